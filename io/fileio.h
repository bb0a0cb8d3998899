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

#define NTO_PATH_BYTES 4200 /* a path and a temp file suffix */

/*
 * Open path read-only (O_CLOEXEC) if it is a regular file: *fd (the caller
 * closes it) and *size, its size in bytes. Opened non-blocking first, so a
 * FIFO (whose open waits for a writer) is refused at once. Returns 0, or
 * NTO_EIO "<path>: cannot open: <reason>", "<path>: is a directory|a
 * FIFO|a socket|a device, expected a regular file", or "<path>: <reason>"
 * if fstat fails; nothing is left open then.
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
 * Write path atomically. A symbolic link at path is followed (as
 * nto_file_resolve does): the link stays and the file it leads to is
 * replaced, so the save happens in that file's directory. fill(out, ctx,
 * err) writes the content into "<file><tmp_suffix>" next to that file
 * (created exclusively, mode 0644 less the umask; a stale temp file of
 * that name, left by a crash, is removed first); then the buffer is
 * flushed, the file fsync'ed and closed, renamed over the file, and the
 * directory fsync'ed so that the rename is durable (file systems that
 * cannot fsync a directory, EINVAL, are fine). out belongs to the save:
 * valid only during fill.
 * tmp_suffix: ".tmp.<pid>" (nto_file_tmp_suffix), so that two processes
 * saving one file never share a temp file.
 * Returns 0; NTO_EINVAL "<path>: path too long"; NTO_ENOMEM; NTO_EIO
 * naming path ("is a character device: not replaced" and the like for
 * a device, FIFO or socket; "cannot create <tmp>", "write failed at byte
 * offset N", "fsync failed", "close failed", "cannot rename <tmp> over
 * it"); or the code fill() returned, its message kept. On any of these the temp
 * file is removed and an existing file is untouched. Only a failure to open or
 * fsync the directory (NTO_EIO, after the rename) leaves the new file in place.
 */
int nto_file_save(const char *path, const char *tmp_suffix,
                  nto_file_writer fill, const void *ctx, nto_err *err);

/* ".tmp.<pid>" (this process's id) into buf (len bytes, 24 are enough):
 * the temp file suffix of every save of ours. Returns buf. */
const char *nto_file_tmp_suffix(char *buf, size_t len);

/*
 * The file a save of path writes, into out (len bytes): path itself, or,
 * when path is a symbolic link, where its links lead (a relative target
 * taken from the link's directory), also when that file does not exist
 * yet. Returns 0; NTO_EINVAL "<path>: path too long"; NTO_EIO "<path>:
 * <reason>" (a link that cannot be read, or more than 40 of them).
 */
int nto_file_resolve(const char *path, char *out, size_t len, nto_err *err);

/* How outputs are written (nto_file_check_output). */
typedef enum {
  NTO_WRITE_RENAME,  /* by nto_file_save: a new file renamed over path */
  NTO_WRITE_IN_PLACE /* opened and truncated as it is (fopen "w") */
} nto_file_write_kind;

/*
 * Check, before any work is done, that path can be written as kind says,
 * without changing anything (the probe file is removed again). Links are
 * followed (nto_file_resolve). An existing file must not be a directory
 * and must be writable (access W_OK); for NTO_WRITE_RENAME it must be a
 * regular file: a device, FIFO or socket would be replaced by a regular
 * file. Then a file "<file>.tmp.<pid>" must be creatable next to it (for
 * NTO_WRITE_RENAME always, for NTO_WRITE_IN_PLACE when the file does not
 * exist): the directory exists, is a directory, is writable and on a
 * writable file system, and the name fits. Returns 0, or NTO_EIO with a
 * message that starts with path ("<path>: is a directory", "<path>: is a
 * character device: a save would replace it with a regular file",
 * "<path>: cannot create <probe>: <reason>", ...).
 */
int nto_file_check_output(const char *path, nto_file_write_kind kind,
                          nto_err *err);

/* What a path names, for telling whether two paths are one file. */
typedef struct nto_file_id {
  int exists;                /* 1: the file exists (dev, ino valid) */
  uint64_t dev, ino;         /* st_dev, st_ino of the file links lead to */
  char path[NTO_PATH_BYTES]; /* its directory's real path and its name */
} nto_file_id;

/* path's identity into *id (links followed; a directory that cannot be
 * resolved leaves the path as given). Never fails. */
void nto_file_identify(const char *path, nto_file_id *id);

/* 1 if a and b are the same file: the same device and inode where both
 * exist, else the same resolved path. */
int nto_file_same(const nto_file_id *a, const nto_file_id *b);

/*
 * Remove the temp files that saves of path by processes no longer
 * running left behind (a crash, kill -9): "<file>.tmp.<pid>" next to the
 * file links lead to, pid being decimal digits only and no live process
 * (kill(pid, 0) fails with ESRCH), and, when legacy is 1, "<file>.tmp"
 * (the temp file name of earlier versions' checkpoints). Only regular
 * files of exactly these names; nothing else is touched. Returns how many
 * were removed (0 also when the directory cannot be read).
 */
int nto_file_remove_stale(const char *path, int legacy);

/*
 * Hold "<file>.lock" next to the file path leads to (links followed; its
 * name into lock_path, len bytes) with an exclusive flock(2) for as long
 * as *fd stays open, this process's pid written in it; nto_file_unlock
 * releases it. Another process holding it
 * is NTO_EIO "<path>: another process (pid P) holds its lock <lock>";
 * NTO_EIO also when the lock file cannot be created; NTO_EUNSUPPORTED
 * when the file system takes no flock (ENOLCK: some network file
 * systems; nothing is left then). The lock file is
 * removed by its holder only, while it holds the lock, so a lock taken
 * is never one on a removed file (checked after flock, retried).
 */
int nto_file_lock(const char *path, int *fd, char *lock_path, size_t len,
                  nto_err *err);

/* Release a lock of nto_file_lock: remove lock_path, then close fd (fd
 * < 0: nothing). */
void nto_file_unlock(int fd, const char *lock_path);

/* 1 if this host stores integers and floats little-endian, else 0. */
int nto_file_host_le(void);

/*
 * Convert n 32-bit words at p (4n bytes) in place between host order and
 * little-endian, the order of our files: reverses each word's bytes on a
 * big-endian host, nothing on a little-endian one.
 */
void nto_file_le32(void *p, size_t n);

#endif /* NTO_FILEIO_H */
