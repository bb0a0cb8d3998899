/*
 * swap.h - the swap file: one anonymous, preallocated file on the SSD that
 * holds the bytes of swapped-out tensors.
 *
 * The file has no name in its directory (O_TMPFILE, or a named file unlinked
 * right after it was created), so the kernel frees its blocks when the
 * descriptor is closed or the process dies, even by kill -9. Tensors are
 * placed at NTO_PAGE-aligned offsets; with O_DIRECT every transfer must be
 * NTO_PAGE-aligned in buffer, length and offset.
 *
 * Threads: open and close on the main thread; the descriptor may then be
 * used by any thread with pread/pwrite or an nto_io queue (iobackend.h).
 */
#ifndef NTO_SWAP_H
#define NTO_SWAP_H

#include "error.h"

#include <stdint.h>

typedef struct nto_swap nto_swap;

typedef struct nto_swap_opts {
  const char *dir; /* directory for the swap file; NULL or "": $TMPDIR if
                      set and non-empty, else /tmp (the command line passes
                      its own choice, which skips tmpfs: app/setup.c) */
  uint64_t bytes;  /* bytes to preallocate; rounded up to NTO_PAGE */
  int direct;      /* 1: O_DIRECT required (error if unsupported);
                      0: buffered, through the page cache (--no-direct) */
} nto_swap_opts;

/*
 * Open an anonymous swap file of o->bytes (rounded up to NTO_PAGE) in o->dir.
 *
 * The file is opened O_TMPFILE|O_RDWR (|O_DIRECT). Where the filesystem
 * refuses O_TMPFILE (EOPNOTSUPP, EISDIR, EINVAL) it falls back to creating
 * "dir/nto-swap-XXXXXX" exclusively and unlinking it at once; only a kill
 * in the tiny window between the two calls leaves that file behind.
 *
 * With o->direct, O_DIRECT is verified by one aligned 4096-byte pwrite and
 * pread at offset 0 (tmpfs accepts the open flag on some kernels but fails
 * the I/O with EINVAL). Free space is then checked with fstatvfs
 * (filesystems reporting no capacity, such as an unlimited tmpfs, are not
 * checked) and the file preallocated with fallocate, or ftruncate where
 * fallocate is not supported (the blocks are then allocated on first write).
 *
 * On success *out owns the descriptor; free it with nto_swap_close.
 * Errors (*out untouched):
 *   NTO_EINVAL       o or out NULL, bytes too large for a file offset, dir
 *                    path too long;
 *   NTO_EUNSUPPORTED the filesystem does not support O_DIRECT ("swap dir
 *                    DIR: the filesystem does not support O_DIRECT (use
 *                    --no-direct ...)");
 *   NTO_EIO          missing directory, permission, not enough free space
 *                    ("swap dir DIR: needs 812.0 MiB, only 100.0 MiB free"),
 *                    any other I/O failure; the message names the directory;
 *   NTO_ENOMEM.
 * Main thread only.
 */
int nto_swap_open(nto_swap **out, const nto_swap_opts *o, nto_err *err);

/* Close the descriptor (the kernel frees the blocks) and free s. NULL ok.
 * Main thread only; no I/O on the descriptor may be in flight. */
void nto_swap_close(nto_swap *s);

/*
 * Grow the file to bytes (rounded up to NTO_PAGE; a smaller size is a
 * no-op): free space is checked for the added bytes, then they are
 * preallocated as by nto_swap_open. Errors as nto_swap_open (NTO_EIO
 * naming the directory and the size needed); the file keeps its old size.
 * Main thread; no I/O may be in flight beyond the old size.
 */
int nto_swap_grow(nto_swap *s, uint64_t bytes, nto_err *err);

/* The file descriptor (O_RDWR, O_CLOEXEC, O_DIRECT if nto_swap_is_direct). */
int nto_swap_fd(const nto_swap *s);

/* Preallocated size in bytes (a multiple of NTO_PAGE). */
uint64_t nto_swap_size(const nto_swap *s);

/* 1 if the descriptor is O_DIRECT, else 0. */
int nto_swap_is_direct(const nto_swap *s);

/* The directory actually used (after the NULL/$TMPDIR//tmp choice); owned
 * by s, valid until nto_swap_close. */
const char *nto_swap_dir(const nto_swap *s);

/*
 * Whether the filesystem of directory dir keeps its pages in RAM: tmpfs or
 * ramfs (statfs(2) f_type TMPFS_MAGIC, RAMFS_MAGIC). A swap file there
 * saves no memory: its pages are RAM too. nto_swap_open does not refuse
 * such a directory; the command line does (app/setup.c).
 * Returns 1 with *fs = "tmpfs" or "ramfs" (a static string), 0 for any
 * other filesystem (*fs untouched), or NTO_EIO when statfs fails (the
 * message names dir and the reason; a missing directory is reported so).
 * Any thread.
 */
int nto_swap_dir_in_ram(const char *dir, const char **fs, nto_err *err);

/*
 * Test hook: on != 0 makes nto_swap_open behave as if every filesystem
 * refused O_TMPFILE, so the named-file fallback is exercised. Process-global;
 * main thread only. Off by default.
 */
void nto_swap_test_no_tmpfile(int on);

#endif /* NTO_SWAP_H */
