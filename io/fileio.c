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
 * Every SAVE_WRITEBACK bytes the written part is sent to the device and
 * waited for (sync_file_range) and its pages dropped from the page cache
 * (posix_fadvise DONTNEED), and the whole file after its fsync: a save
 * holds at most that much of its file in the page cache, dirty or not, so
 * that saving 48 MiB of weights or a 144 MiB checkpoint inside a memory
 * cgroup (which counts the page cache) does not fill it with pages the
 * kernel must first write back.
 *
 * A save writes through a symbolic link (the link stays, the file it
 * leads to is replaced next to itself) and never replaces what is not a
 * regular file: renaming over /dev/null would leave a regular file there.
 * Temp files carry the pid (".tmp.<pid>"), so two processes saving one
 * file never write the same temp file, and one left by a crash is known
 * to be stale once its process is gone (nto_file_remove_stale). Outputs
 * are checked before a run starts (nto_file_check_output) with the same
 * probe a save makes: creating and removing that temp file.
 */
#include "fileio.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <limits.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#define OUT_BUFFER (1u << 16) /* bytes gathered before a write */
#define SAVE_WRITEBACK ((uint64_t)4 << 20) /* bytes written, then synced
                                              and dropped from the cache */
#define PATH_BYTES NTO_PATH_BYTES
#define MAX_LINKS 40 /* symbolic links followed, as the kernel's limit */

struct nto_file_out {
  int fd;
  const char *path; /* the save's target, for messages */
  uint64_t off;     /* bytes written to the file so far */
  uint64_t synced;  /* of which on the device and out of the cache */
  size_t len;       /* bytes waiting in buf */
  unsigned char buf[OUT_BUFFER];
};

int nto_file_open_read(const char *path, int *fd, uint64_t *size,
                       nto_err *err) {
  /* Non-blocking first: opening a FIFO for reading waits for a writer,
   * forever if none comes; the flag is cleared once the file is known to
   * be regular (where it changes nothing). */
  *fd = open(path, O_RDONLY | O_NONBLOCK | O_CLOEXEC);
  if (*fd < 0)
    return nto_err_set(err, NTO_EIO, "%s: cannot open: %s", path,
                       strerror(errno));
  struct stat st;
  int rc = 0;
  if (fstat(*fd, &st) != 0)
    rc = nto_err_set(err, NTO_EIO, "%s: %s", path, strerror(errno));
  else if (!S_ISREG(st.st_mode)) /* its size says nothing of its content */
    rc = nto_err_set(err, NTO_EIO, "%s: is %s, expected a regular file", path,
                     S_ISDIR(st.st_mode)    ? "a directory"
                     : S_ISFIFO(st.st_mode) ? "a FIFO"
                     : S_ISSOCK(st.st_mode) ? "a socket"
                                            : "a device");
  else if (fcntl(*fd, F_SETFL, fcntl(*fd, F_GETFL) & ~O_NONBLOCK) != 0)
    rc = nto_err_set(err, NTO_EIO, "%s: %s", path, strerror(errno));
  if (rc) {
    close(*fd);
    *fd = -1;
    return rc;
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
/* Once SAVE_WRITEBACK bytes are written beyond o->synced: write them
 * back, wait, and drop their pages. A file system without
 * sync_file_range (EINVAL, ENOSYS) keeps them until the fsync. */
static int out_writeback(nto_file_out *o, nto_err *err) {
  uint64_t n = o->off - o->synced;
  if (n < SAVE_WRITEBACK)
    return 0;
  if (sync_file_range(o->fd, (off_t)o->synced, (off_t)n,
                      SYNC_FILE_RANGE_WAIT_BEFORE | SYNC_FILE_RANGE_WRITE |
                          SYNC_FILE_RANGE_WAIT_AFTER) != 0) {
    if (errno == EINVAL || errno == ENOSYS)
      return 0;
    return nto_err_set(err, NTO_EIO, "%s: writing back failed: %s", o->path,
                       strerror(errno));
  }
  (void)posix_fadvise(o->fd, (off_t)o->synced, (off_t)n, POSIX_FADV_DONTNEED);
  o->synced = o->off;
  return 0;
}

static int out_flush(nto_file_out *o, nto_err *err) {
  int rc = pwrite_full(o->fd, o->buf, o->len, o->off, o->path, err);
  if (rc == 0)
    o->off += o->len;
  o->len = 0;
  return rc == 0 ? out_writeback(o, err) : rc;
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
    return rc == 0 ? out_writeback(o, err) : rc;
  }
  if (n)
    memcpy(o->buf + o->len, p, n);
  o->len += n;
  return 0;
}

/* Length of path's directory part with its last slash; 0: none. */
static size_t dir_len(const char *path) {
  const char *slash = strrchr(path, '/');
  return slash ? (size_t)(slash - path) + 1 : 0;
}

/* Directory part of path into buf ("." when there is none). */
static void dir_name(const char *path, char *buf, size_t len) {
  size_t n = dir_len(path);
  if (n == 0) {
    snprintf(buf, len, ".");
    return;
  }
  if (n > 1)
    n--; /* without the slash, except for "/file" */
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

const char *nto_file_tmp_suffix(char *buf, size_t len) {
  snprintf(buf, len, ".tmp.%ld", (long)getpid());
  return buf;
}

int nto_file_resolve(const char *path, char *out, size_t len, nto_err *err) {
  int n = snprintf(out, len, "%s", path);
  if (n < 0 || (size_t)n >= len)
    return nto_err_set(err, NTO_EINVAL, "%s: path too long", path);
  for (int hops = 0;; hops++) {
    struct stat st;
    /* Not there, or not a link: the file is out. Other errors (a
     * directory that cannot be searched) show when it is written. */
    if (lstat(out, &st) != 0 || !S_ISLNK(st.st_mode))
      return 0;
    if (hops == MAX_LINKS)
      return nto_err_set(err, NTO_EIO, "%s: too many levels of symbolic links",
                         path);
    char target[PATH_BYTES];
    ssize_t t = readlink(out, target, sizeof target);
    if (t < 0)
      return nto_err_set(err, NTO_EIO, "%s: cannot read the link %s: %s", path,
                         out, strerror(errno));
    /* a relative target is taken from the link's directory */
    size_t d = target[0] == '/' ? 0 : dir_len(out);
    if ((size_t)t >= sizeof target || d + (size_t)t >= len)
      return nto_err_set(err, NTO_EINVAL, "%s: path too long", path);
    memcpy(out + d, target, (size_t)t);
    out[d + (size_t)t] = '\0';
  }
}

/* What a file of mode m is, for messages. */
static const char *kind_name(mode_t m) {
  return S_ISDIR(m)    ? "a directory"
         : S_ISCHR(m)  ? "a character device"
         : S_ISBLK(m)  ? "a block device"
         : S_ISFIFO(m) ? "a FIFO"
         : S_ISSOCK(m) ? "a socket"
                       : "not a regular file";
}

int nto_file_save(const char *path, const char *tmp_suffix,
                  nto_file_writer fill, const void *ctx, nto_err *err) {
  char file[PATH_BYTES], tmp[PATH_BYTES];
  int rc = nto_file_resolve(path, file, sizeof file, err);
  if (rc)
    return rc;
  /* A device, FIFO or socket would become a regular file (a directory
   * makes the rename fail) */
  struct stat st;
  if (stat(file, &st) == 0 && !S_ISREG(st.st_mode) && !S_ISDIR(st.st_mode))
    return nto_err_set(err, NTO_EIO, "%s: is %s: not replaced", path,
                       kind_name(st.st_mode));
  int n = snprintf(tmp, sizeof tmp, "%s%s", file, tmp_suffix);
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
  o->synced = 0;
  o->len = 0;
  rc = fill(o, ctx, err);
  if (rc == 0)
    rc = out_flush(o, err);
  if (rc == 0 && fsync(o->fd) != 0)
    rc = nto_err_set(err, NTO_EIO, "%s: fsync failed: %s", path,
                     strerror(errno));
  if (rc == 0) /* on the device: its pages can go */
    (void)posix_fadvise(o->fd, 0, 0, POSIX_FADV_DONTNEED);
  if (close(o->fd) != 0 && rc == 0)
    rc = nto_err_set(err, NTO_EIO, "%s: close failed: %s", path,
                     strerror(errno));
  free(o);
  if (rc == 0 && rename(tmp, file) != 0)
    rc = nto_err_set(err, NTO_EIO, "%s: cannot rename %s over it: %s", path,
                     tmp, strerror(errno));
  if (rc) {
    unlink(tmp);
    return rc;
  }
  return sync_dir(file, err);
}

/* Create and remove "<file>.tmp.<pid>", the temp file a save of path
 * would write. Returns 0 or NTO_EIO naming path and the temp file. */
static int probe_create(const char *path, const char *file, nto_err *err) {
  char tmp[PATH_BYTES], suffix[32];
  int n = snprintf(tmp, sizeof tmp, "%s%s", file,
                   nto_file_tmp_suffix(suffix, sizeof suffix));
  if (n < 0 || (size_t)n >= sizeof tmp)
    return nto_err_set(err, NTO_EINVAL, "%s: path too long", path);
  int fd = create_tmp(path, tmp, err);
  if (fd < 0)
    return fd;
  close(fd);
  unlink(tmp);
  return 0;
}

int nto_file_check_output(const char *path, nto_file_write_kind kind,
                          nto_err *err) {
  char file[PATH_BYTES];
  int rc = nto_file_resolve(path, file, sizeof file, err);
  if (rc)
    return rc;
  struct stat st;
  if (stat(file, &st) != 0) {
    if (errno != ENOENT) /* e.g. a path through a regular file */
      return nto_err_set(err, NTO_EIO, "%s: %s", path, strerror(errno));
    return probe_create(path, file, err);
  }
  if (S_ISDIR(st.st_mode) || (kind == NTO_WRITE_RENAME && !S_ISREG(st.st_mode)))
    return nto_err_set(err, NTO_EIO, "%s: is %s%s", path, kind_name(st.st_mode),
                       S_ISDIR(st.st_mode)
                           ? ""
                           : ": a save would replace it with a regular file");
  if (faccessat(AT_FDCWD, file, W_OK, AT_EACCESS) != 0)
    return nto_err_set(err, NTO_EIO, "%s: cannot write it: %s", path,
                       strerror(errno));
  return kind == NTO_WRITE_RENAME ? probe_create(path, file, err) : 0;
}

void nto_file_identify(const char *path, nto_file_id *id) {
  /* on the heap: 12 KiB of paths on a 64 KiB stack (ulimit -s 64) */
  struct {
    char file[PATH_BYTES], dir[PATH_BYTES], real[PATH_MAX];
  } *b = malloc(sizeof *b);
  memset(id, 0, sizeof *id);
  if (b == NULL) { /* compared as given */
    snprintf(id->path, sizeof id->path, "%s", path);
    return;
  }
  char *file = b->file, *dir = b->dir, *real = b->real;
  if (nto_file_resolve(path, file, PATH_BYTES, NULL) != 0)
    snprintf(file, PATH_BYTES, "%s", path);
  struct stat st;
  if (stat(file, &st) == 0) {
    id->exists = 1;
    id->dev = (uint64_t)st.st_dev;
    id->ino = (uint64_t)st.st_ino;
  }
  dir_name(file, dir, PATH_BYTES);
  const char *name = file + dir_len(file);
  int n = -1;
  if (realpath(dir, real))
    n = snprintf(id->path, sizeof id->path, "%s/%s",
                 strcmp(real, "/") ? real : "", name);
  if (n < 0 || (size_t)n >= sizeof id->path) /* as given, then */
    snprintf(id->path, sizeof id->path, "%s", file);
  free(b);
}

int nto_file_same(const nto_file_id *a, const nto_file_id *b) {
  if (a->exists && b->exists)
    return a->dev == b->dev && a->ino == b->ino;
  return !strcmp(a->path, b->path);
}

/* 1 if name is "<base>.tmp.<pid>" with pid not a live process, or, with
 * legacy, "<base>.tmp". A pid that is alive, maybe reused by another
 * program, keeps its file: only what is surely stale goes. */
static int stale_name(const char *name, const char *base, int legacy) {
  size_t blen = strlen(base);
  if (strncmp(name, base, blen) != 0 || strncmp(name + blen, ".tmp", 4) != 0)
    return 0;
  const char *p = name + blen + 4;
  if (*p == '\0')
    return legacy;
  if (*p++ != '.' || *p == '\0' || strlen(p) > 9)
    return 0;
  for (const char *q = p; *q; q++)
    if (*q < '0' || *q > '9')
      return 0;
  long pid = strtol(p, NULL, 10);
  if (pid <= 0 || pid == (long)getpid())
    return 0;
  return kill((pid_t)pid, 0) != 0 && errno == ESRCH;
}

int nto_file_remove_stale(const char *path, int legacy) {
  char file[PATH_BYTES], dir[PATH_BYTES];
  if (nto_file_resolve(path, file, sizeof file, NULL) != 0)
    return 0;
  const char *base = file + dir_len(file);
  dir_name(file, dir, sizeof dir);
  DIR *d = base[0] ? opendir(dir) : NULL;
  if (d == NULL)
    return 0;
  int removed = 0;
  struct dirent *e;
  while ((e = readdir(d)) != NULL) {
    struct stat st;
    if (stale_name(e->d_name, base, legacy) &&
        fstatat(dirfd(d), e->d_name, &st, AT_SYMLINK_NOFOLLOW) == 0 &&
        S_ISREG(st.st_mode) && unlinkat(dirfd(d), e->d_name, 0) == 0)
      removed++;
  }
  closedir(d);
  return removed;
}

/* " (pid N)" from the lock file fd, its holder's, into buf; "" if it
 * holds no pid yet. */
static void lock_holder(int fd, char *buf, size_t len) {
  char b[24];
  ssize_t n = pread(fd, b, sizeof b - 1, 0);
  buf[0] = '\0';
  if (n <= 0)
    return;
  b[n] = '\0';
  long pid = strtol(b, NULL, 10);
  if (pid > 0)
    snprintf(buf, len, " (pid %ld)", pid);
}

int nto_file_lock(const char *path, int *fd, char *lock_path, size_t len,
                  nto_err *err) {
  char file[PATH_BYTES];
  *fd = -1;
  int rc = nto_file_resolve(path, file, sizeof file, err);
  if (rc)
    return rc;
  int n = snprintf(lock_path, len, "%s.lock", file);
  if (n < 0 || (size_t)n >= len)
    return nto_err_set(err, NTO_EINVAL, "%s: path too long", path);
  /* The holder removes the lock file before it lets go: a lock taken on
   * a file that is no longer at lock_path is worth nothing, try again. */
  for (int tries = 0; tries < 16; tries++) {
    int f = open(lock_path, O_RDWR | O_CREAT | O_CLOEXEC | O_NOFOLLOW, 0644);
    if (f < 0)
      return nto_err_set(err, NTO_EIO, "%s: cannot create its lock file %s: %s",
                         path, lock_path, strerror(errno));
    if (flock(f, LOCK_EX | LOCK_NB) != 0) {
      int e = errno;
      char who[40];
      lock_holder(f, who, sizeof who);
      close(f);
      if (e == EWOULDBLOCK)
        return nto_err_set(err, NTO_EIO,
                           "%s: another process%s holds its lock %s", path, who,
                           lock_path);
      unlink(lock_path); /* ours: nobody can hold it */
      return nto_err_set(err, NTO_EUNSUPPORTED, "%s: cannot lock %s: %s", path,
                         lock_path, strerror(e));
    }
    struct stat a, b;
    if (fstat(f, &a) == 0 && stat(lock_path, &b) == 0 && a.st_dev == b.st_dev &&
        a.st_ino == b.st_ino) {
      char pid[24];
      int k = snprintf(pid, sizeof pid, "%ld\n", (long)getpid());
      /* the pid only names the holder in another run's message */
      if (ftruncate(f, 0) == 0)
        (void)pwrite_full(f, pid, (size_t)k, 0, lock_path, NULL);
      *fd = f;
      return 0;
    }
    close(f);
  }
  return nto_err_set(err, NTO_EIO, "%s: cannot lock %s: it keeps being removed",
                     path, lock_path);
}

void nto_file_unlock(int fd, const char *lock_path) {
  if (fd < 0)
    return;
  unlink(lock_path);
  close(fd);
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
