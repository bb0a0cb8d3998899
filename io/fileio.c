/*
 * fileio.c - full reads and writes, and the atomic save. See fileio.h.
 *
 * DESIGN
 * Saving goes through nto_file_save(): the content is written to
 * "<path><suffix>" (created exclusively, after removing a stale one),
 * flushed and fsync'ed, renamed over <path>, and the directory is fsync'ed
 * so the rename itself is durable. On any failure before the rename the
 * temporary file is removed and an existing <path> is untouched. The
 * writer fills the file through nto_file_put, which gathers small pieces
 * (headers, checksums) in a 64 KiB buffer and sends large ones (tensor
 * data) straight on; both go out with full writes (pwrite_full), so an
 * interrupted or partial write is continued, never taken for the whole.
 */
#include "fileio.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define OUT_BUFFER (1u << 16) /* bytes gathered before a write */
#define PATH_BYTES 4200       /* a target path and its suffix */

struct nto_file_out {
  int fd;
  const char *path; /* the save's target, for messages */
  uint64_t off;     /* bytes written to the file so far */
  size_t len;       /* bytes waiting in buf */
  unsigned char buf[OUT_BUFFER];
};

int nto_file_open_read(const char *path, int *fd, uint64_t *size,
                       nto_err *err) {
  *fd = open(path, O_RDONLY | O_CLOEXEC);
  if (*fd < 0)
    return nto_err_set(err, NTO_EIO, "%s: cannot open: %s", path,
                       strerror(errno));
  struct stat st;
  if (fstat(*fd, &st) != 0) {
    int e = errno;
    close(*fd);
    *fd = -1;
    return nto_err_set(err, NTO_EIO, "%s: %s", path, strerror(e));
  }
  *size = (uint64_t)st.st_size;
  return 0;
}

int nto_file_pread_full(int fd, void *buf, size_t len, uint64_t off,
                        const char *path, nto_err *err) {
  size_t got = 0;
  while (got < len) {
    ssize_t r = pread(fd, (char *)buf + got, len - got, (off_t)(off + got));
    if (r < 0 && errno == EINTR)
      continue;
    if (r < 0)
      return nto_err_set(err, NTO_EIO,
                         "%s: read failed at byte offset %" PRIu64 ": %s", path,
                         off + got, strerror(errno));
    if (r == 0)
      return nto_err_set(err, NTO_EDATA,
                         "%s: truncated at byte offset %" PRIu64, path,
                         off + got);
    got += (size_t)r;
  }
  return 0;
}

/* Write exactly len bytes at byte offset off of fd. Returns 0 or NTO_EIO
 * naming path and the offset of the write that failed. */
static int pwrite_full(int fd, const void *buf, size_t len, uint64_t off,
                       const char *path, nto_err *err) {
  size_t put = 0;
  while (put < len) {
    ssize_t w =
        pwrite(fd, (const char *)buf + put, len - put, (off_t)(off + put));
    if (w < 0 && errno == EINTR)
      continue;
    if (w <= 0) /* 0: no progress and no reason; call it a full device */
      return nto_err_set(err, NTO_EIO,
                         "%s: write failed at byte offset %" PRIu64 ": %s",
                         path, off + put, strerror(w < 0 ? errno : ENOSPC));
    put += (size_t)w;
  }
  return 0;
}

int nto_file_read_all(const char *path, size_t max, char **out, size_t *len,
                      nto_err *err) {
  int fd;
  uint64_t size;
  *out = NULL;
  int rc = nto_file_open_read(path, &fd, &size, err);
  if (rc)
    return rc;
  char *b = NULL;
  if (size > max)
    rc = nto_err_set(err, NTO_EDATA, "%s: %" PRIu64 " bytes, more than %zu",
                     path, size, max);
  else if (!(b = malloc((size_t)size + 1)))
    rc = nto_err_set(err, NTO_ENOMEM, "%s: out of memory for %" PRIu64 " bytes",
                     path, size);
  else
    rc = nto_file_pread_full(fd, b, (size_t)size, 0, path, err);
  close(fd);
  if (rc) {
    free(b);
    return rc;
  }
  b[size] = '\0';
  *out = b;
  *len = (size_t)size;
  return 0;
}

/* Write what waits in the buffer. */
static int out_flush(nto_file_out *o, nto_err *err) {
  int rc = pwrite_full(o->fd, o->buf, o->len, o->off, o->path, err);
  if (rc == 0)
    o->off += o->len;
  o->len = 0;
  return rc;
}

int nto_file_put(nto_file_out *o, const void *p, size_t n, nto_err *err) {
  if (o->len + n > sizeof o->buf) {
    int rc = out_flush(o, err);
    if (rc)
      return rc;
  }
  if (n >= sizeof o->buf) { /* large: straight to the file */
    int rc = pwrite_full(o->fd, p, n, o->off, o->path, err);
    if (rc == 0)
      o->off += n;
    return rc;
  }
  if (n)
    memcpy(o->buf + o->len, p, n);
  o->len += n;
  return 0;
}

/* Directory part of path into buf ("." when there is none). */
static void dir_name(const char *path, char *buf, size_t len) {
  const char *slash = strrchr(path, '/');
  if (slash == NULL) {
    snprintf(buf, len, ".");
    return;
  }
  size_t n = (size_t)(slash - path);
  if (n == 0)
    n = 1; /* "/file" */
  if (n >= len)
    n = len - 1;
  memcpy(buf, path, n);
  buf[n] = '\0';
}

/* fsync the directory of path, so that a rename in it is durable. */
static int sync_dir(const char *path, nto_err *err) {
  char dir[PATH_BYTES];
  dir_name(path, dir, sizeof dir);
  int dfd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (dfd < 0)
    return nto_err_set(err, NTO_EIO, "%s: cannot open directory %s: %s", path,
                       dir, strerror(errno));
  /* Some file systems cannot fsync a directory (EINVAL): nothing to do. */
  if (fsync(dfd) != 0 && errno != EINVAL) {
    int e = errno;
    close(dfd);
    return nto_err_set(err, NTO_EIO, "%s: fsync of directory %s failed: %s",
                       path, dir, strerror(e));
  }
  close(dfd);
  return 0;
}

/* Create tmp exclusively, removing a stale one first. Returns the
 * descriptor, or NTO_EIO (negative) naming path and tmp. */
static int create_tmp(const char *path, const char *tmp, nto_err *err) {
  int fd = open(tmp, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
  if (fd < 0 && errno == EEXIST) { /* left by a crash */
    unlink(tmp);
    fd = open(tmp, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
  }
  if (fd < 0)
    return nto_err_set(err, NTO_EIO, "%s: cannot create %s: %s", path, tmp,
                       strerror(errno));
  return fd;
}

int nto_file_save(const char *path, const char *tmp_suffix,
                  nto_file_writer fill, const void *ctx, nto_err *err) {
  char tmp[PATH_BYTES];
  int n = snprintf(tmp, sizeof tmp, "%s%s", path, tmp_suffix);
  if (n < 0 || (size_t)n >= sizeof tmp)
    return nto_err_set(err, NTO_EINVAL, "%s: path too long", path);
  nto_file_out *o = malloc(sizeof *o);
  if (o == NULL)
    return nto_err_set(err, NTO_ENOMEM, "%s: out of memory", path);
  int fd = create_tmp(path, tmp, err);
  if (fd < 0) {
    free(o);
    return fd;
  }
  o->fd = fd;
  o->path = path;
  o->off = 0;
  o->len = 0;
  int rc = fill(o, ctx, err);
  if (rc == 0)
    rc = out_flush(o, err);
  if (rc == 0 && fsync(o->fd) != 0)
    rc = nto_err_set(err, NTO_EIO, "%s: fsync failed: %s", path,
                     strerror(errno));
  if (close(o->fd) != 0 && rc == 0)
    rc = nto_err_set(err, NTO_EIO, "%s: close failed: %s", path,
                     strerror(errno));
  free(o);
  if (rc == 0 && rename(tmp, path) != 0)
    rc = nto_err_set(err, NTO_EIO, "%s: cannot rename %s over it: %s", path,
                     tmp, strerror(errno));
  if (rc) {
    unlink(tmp);
    return rc;
  }
  return sync_dir(path, err);
}

int nto_file_host_le(void) {
  const uint16_t one = 1;
  return *(const unsigned char *)&one == 1;
}

void nto_file_le32(void *p, size_t n) {
  if (nto_file_host_le())
    return;
  unsigned char *b = p;
  for (size_t i = 0; i < n; i++, b += 4) {
    unsigned char t0 = b[0], t1 = b[1];
    b[0] = b[3];
    b[1] = b[2];
    b[2] = t1;
    b[3] = t0;
  }
}
