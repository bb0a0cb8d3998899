/*
 * fileio.h - file I/O that never lies: full reads, full writes, and the
 * one atomic save of a whole file (weights, safetensors, checkpoints).
 *
 * Reads and writes loop over EINTR and partial transfers until every byte
 * moved; a read that meets the end of the file first is its own error
 * (NTO_EDATA, "truncated at byte offset N"), never a silent short count.
 * Every function returns 0 or a negative nto_status and fills err with a
 * one-line message naming the file (and, for a read or a write, the byte
 * offset). Any thread; one descriptor or nto_file_out per thread at a time.
 */
#ifndef NTO_FILEIO_H
#define NTO_FILEIO_H

#include "error.h"

#include <stddef.h>
#include <stdint.h>

/*
 * Open path read-only (O_CLOEXEC): *fd (the caller closes it) and *size,
 * its size in bytes. Returns 0, or NTO_EIO "<path>: cannot open: <reason>"
 * (or "<path>: <reason>" if fstat fails; nothing is left open then).
 */
int nto_file_open_read(const char *path, int *fd, uint64_t *size, nto_err *err);

/*
 * Read exactly len bytes at byte offset off of fd into buf (len bytes,
 * owned by the caller); path names the file in messages. Returns 0;
 * NTO_EIO "<path>: read failed at byte offset <o>: <reason>"; NTO_EDATA
 * "<path>: truncated at byte offset <o>", o being where the file ended.
 * On error buf holds the bytes read before it.
 */
int nto_file_pread_full(int fd, void *buf, size_t len, uint64_t off,
                        const char *path, nto_err *err);

/*
 * The whole of the regular file path, when it has at most max bytes, into
 * *out (malloc'd, len + 1 bytes with a NUL after the content; the caller
 * frees it) and *len. Returns 0; NTO_EIO (cannot open, or a read error);
 * NTO_EDATA "<path>: <n> bytes, more than <max>" or a truncation (the file
 * shrank while read); NTO_ENOMEM. *out is NULL on error.
 */
int nto_file_read_all(const char *path, size_t max, char **out, size_t *len,
                      nto_err *err);

/* The buffered writer an atomic save hands its writer (opaque). */
typedef struct nto_file_out nto_file_out;

/*
 * Append n bytes at p to the file being written. Bytes are buffered (64
 * KiB) and written with full writes (EINTR and partial writes continued).
 * Returns 0, or NTO_EIO "<path>: write failed at byte offset <o>:
 * <reason>", path being the save's target.
 */
int nto_file_put(nto_file_out *out, const void *p, size_t n, nto_err *err);

/* Writes the content of a file with nto_file_put; ctx is the caller's.
 * Returns 0 or a negative nto_status with err filled. */
typedef int (*nto_file_writer)(nto_file_out *out, const void *ctx,
                               nto_err *err);

/*
 * Write path atomically. fill(out, ctx, err) writes the content into
 * "<path><tmp_suffix>" in path's directory (created exclusively, mode
 * 0644 less the umask; a stale temp file of that name, left by a crash,
 * is removed first); then the buffer is flushed, the file fsync'ed and
 * closed, renamed over path, and the directory fsync'ed so that the rename
 * is durable (file systems that cannot fsync a directory, EINVAL, are
 * fine). out belongs to the save: valid only during fill.
 * tmp_suffix: e.g. ".tmp" (checkpoints: "FILE.tmp") or ".tmp.<pid>".
 * Returns 0; NTO_EINVAL "<path>: path too long"; NTO_ENOMEM; NTO_EIO
 * naming path ("cannot create <tmp>", "write failed at byte offset N",
 * "fsync failed", "close failed", "cannot rename <tmp> over it"); or the
 * code fill() returned, its message kept. On any of these the temp file
 * is removed and an existing path is untouched. Only a failure to open or
 * fsync the directory (NTO_EIO, after the rename) leaves the new file in
 * place.
 */
int nto_file_save(const char *path, const char *tmp_suffix,
                  nto_file_writer fill, const void *ctx, nto_err *err);

/* 1 if this host stores integers and floats little-endian, else 0. */
int nto_file_host_le(void);

/*
 * Convert n 32-bit words at p (4n bytes) in place between host order and
 * little-endian, the order of our files: reverses each word's bytes on a
 * big-endian host, nothing on a little-endian one.
 */
void nto_file_le32(void *p, size_t n);

#endif /* NTO_FILEIO_H */
