/*
 * swap.c - the anonymous, preallocated swap file. See swap.h.
 *
 * DESIGN
 * nto_swap_open() runs four steps, each failing with a message that names
 * the directory: open_anon() (O_TMPFILE, else a named file unlinked at
 * once), verify_direct() (one aligned page written and read back, then the
 * file truncated to 0 again), check_space() (fstatvfs against the size) and
 * preallocate() (fallocate, else zeros written over the whole file, so that
 * every block is the file's before training starts: a sparse file would
 * pass the free-space check and fail mid-way on a disk filling since).
 * O_DIRECT is verified before preallocating so that a filesystem without
 * O_DIRECT (tmpfs, where fallocate really allocates memory) is refused
 * without first filling it.
 */
#include "swap.h"

#include "tensor.h"

#include <errno.h>
#include <fcntl.h>
#include <linux/magic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <sys/vfs.h>
#include <time.h>
#include <unistd.h>

#define SWAP_DIR_MAX 4096
#define NAMED_TRIES 100

struct nto_swap {
  int fd;
  int direct;
  uint64_t bytes;
  char dir[SWAP_DIR_MAX];
};

static int test_no_tmpfile; /* nto_swap_test_no_tmpfile() */

void nto_swap_test_no_tmpfile(int on) { test_no_tmpfile = on != 0; }

/* The directory to use: dir, else $TMPDIR, else /tmp. */
static const char *pick_dir(const char *dir) {
  if (dir != NULL && dir[0] != '\0')
    return dir;
  const char *t = getenv("TMPDIR");
  return t != NULL && t[0] != '\0' ? t : "/tmp";
}

static int no_space(const char *dir, uint64_t need, uint64_t avail,
                    nto_err *err) {
  char n[32], a[32];
  nto_format_bytes(need, n, sizeof n);
  nto_format_bytes(avail, a, sizeof a);
  return nto_err_set(err, NTO_EIO, "swap dir %s: needs %s, only %s free", dir,
                     n, a);
}

static int direct_unsupported(const char *dir, nto_err *err) {
  return nto_err_set(err, NTO_EUNSUPPORTED,
                     "swap dir %s: the filesystem does not support O_DIRECT "
                     "(use --no-direct to swap through the page cache)",
                     dir);
}

/* Six characters of [A-Za-z0-9] into s[0..6], NUL-terminated. */
static void random_suffix(char s[7]) {
  static const char set[] =
      "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789";
  unsigned char r[6];
  if (getrandom(r, sizeof r, GRND_NONBLOCK) != (ssize_t)sizeof r) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    uint64_t x = (uint64_t)ts.tv_nsec ^ ((uint64_t)getpid() << 32) ^
                 (uint64_t)ts.tv_sec * 0x9e3779b97f4a7c15u;
    for (int i = 0; i < 6; i++, x >>= 8)
      r[i] = (unsigned char)x;
  }
  for (int i = 0; i < 6; i++)
    s[i] = set[r[i] % (sizeof set - 1)];
  s[6] = '\0';
}

/*
 * Create "dir/nto-swap-XXXXXX" exclusively with flags and unlink it at once.
 * Returns the descriptor, or -1 with errno set.
 */
static int open_named(const char *dir, int flags) {
  char path[SWAP_DIR_MAX + 32];
  for (int tries = 0; tries < NAMED_TRIES; tries++) {
    char sfx[7];
    random_suffix(sfx);
    snprintf(path, sizeof path, "%s/nto-swap-%s", dir, sfx);
    int fd = open(path, flags | O_CREAT | O_EXCL, 0600);
    if (fd >= 0) {
      if (unlink(path) != 0) {
        int e = errno;
        close(fd);
        errno = e;
        return -1;
      }
      return fd;
    }
    if (errno == EEXIST)
      continue;
    int e = errno;
    /* The kernel checks O_DIRECT after creating the file: remove it. With
     * O_EXCL the name did not exist before, so it is ours. */
    if (e == EINVAL)
      unlink(path);
    errno = e;
    return -1;
  }
  errno = EEXIST;
  return -1;
}

/*
 * Open a nameless file in dir with flags: O_TMPFILE where the filesystem
 * supports it (O_EXCL: it can never be linked into the tree), else
 * open_named(). Returns the descriptor, or -1 with errno set.
 */
static int open_anon(const char *dir, int flags) {
  if (!test_no_tmpfile) {
    int fd = open(dir, O_TMPFILE | O_EXCL | flags, 0600);
    if (fd >= 0)
      return fd;
    if (errno != EOPNOTSUPP && errno != EISDIR && errno != EINVAL)
      return -1;
  }
  return open_named(dir, flags);
}

/* Transfer one page at offset 0 of fd. Returns 0 or an errno value (EIO
 * for a short transfer). */
static int page_io(int fd, void *p, int write) {
  ssize_t n;
  do
    n = write ? pwrite(fd, p, NTO_PAGE, 0) : pread(fd, p, NTO_PAGE, 0);
  while (n < 0 && errno == EINTR);
  if (n < 0)
    return errno;
  return n == (ssize_t)NTO_PAGE ? 0 : EIO;
}

static unsigned char test_byte(unsigned i) {
  return (unsigned char)(i * 31u + 7u);
}

/*
 * Check that O_DIRECT I/O works on fd: one aligned page written, read back
 * and compared, then the file truncated to 0. NTO_EUNSUPPORTED on EINVAL,
 * NTO_EIO on other failures, NTO_ENOMEM.
 */
static int verify_direct(int fd, const char *dir, nto_err *err) {
  unsigned char *p = (unsigned char *)nto_alloc_aligned(NTO_PAGE);
  if (p == NULL)
    return nto_err_set(err, NTO_ENOMEM, "swap dir %s: out of memory", dir);
  for (unsigned i = 0; i < NTO_PAGE; i++)
    p[i] = test_byte(i);
  int e = page_io(fd, p, 1);
  if (e == 0) {
    memset(p, 0, NTO_PAGE);
    e = page_io(fd, p, 0);
  }
  int same = 1;
  for (unsigned i = 0; e == 0 && i < NTO_PAGE; i++)
    same &= p[i] == test_byte(i);
  nto_free_aligned((float *)p);
  if (e == EINVAL)
    return direct_unsupported(dir, err);
  if (e != 0)
    return nto_err_set(err, NTO_EIO, "swap dir %s: O_DIRECT test I/O: %s", dir,
                       strerror(e));
  if (!same)
    return nto_err_set(err, NTO_EIO,
                       "swap dir %s: O_DIRECT test page read back wrong", dir);
  if (ftruncate(fd, 0) != 0)
    return nto_err_set(err, NTO_EIO, "swap dir %s: ftruncate: %s", dir,
                       strerror(errno));
  return 0;
}

/*
 * Free bytes for unprivileged users on fd's filesystem into *avail.
 * Returns 1 if known, 0 if fstatvfs fails or the filesystem reports no
 * capacity at all (unlimited tmpfs, some FUSE filesystems).
 */
static int free_bytes(int fd, uint64_t *avail) {
  struct statvfs sv;
  if (fstatvfs(fd, &sv) != 0 || sv.f_blocks == 0)
    return 0;
  uint64_t unit = sv.f_frsize ? sv.f_frsize : sv.f_bsize;
  *avail = (uint64_t)sv.f_bavail * unit;
  return 1;
}

static int check_space(int fd, const char *dir, uint64_t bytes, nto_err *err) {
  uint64_t avail;
  if (free_bytes(fd, &avail) && bytes > avail)
    return no_space(dir, bytes, avail, err);
  return 0;
}

/*
 * Reserve the blocks of [from, bytes) of fd by writing zeros, where the
 * filesystem has no fallocate (ext2, ext3, vfat, some FUSE): ftruncate
 * alone leaves the file sparse, so the free-space check before it would
 * guarantee nothing and a disk that fills later would end the run at its
 * first write there. glibc's posix_fallocate emulates it the same way, a
 * byte per block; here whole pages (the file may be O_DIRECT) from an
 * aligned buffer, RESERVE_CHUNK bytes a write. Costs one sequential write
 * of the file at start. Returns 0, or NTO_EIO naming dir ("needs X, only
 * Y free" on ENOSPC); the file is cut back to `from` then.
 */
#define RESERVE_CHUNK ((size_t)1 << 20)

static int reserve_by_writing(int fd, const char *dir, uint64_t from,
                              uint64_t bytes, nto_err *err) {
  unsigned char *zero = (unsigned char *)nto_alloc_aligned(RESERVE_CHUNK);
  if (zero == NULL)
    return nto_err_set(err, NTO_ENOMEM, "swap dir %s: out of memory", dir);
  memset(zero, 0, RESERVE_CHUNK);
  int e = 0;
  for (uint64_t off = from; off < bytes && e == 0;) {
    size_t len =
        bytes - off < RESERVE_CHUNK ? (size_t)(bytes - off) : RESERVE_CHUNK;
    ssize_t w = pwrite(fd, zero, len, (off_t)off);
    if (w < 0 && errno == EINTR)
      continue;
    if (w <= 0) /* 0: no progress and no reason; call it a full device */
      e = w < 0 ? errno : ENOSPC;
    else
      off += (uint64_t)w / NTO_PAGE * NTO_PAGE; /* O_DIRECT: whole pages */
    if (w > 0 && (size_t)w < NTO_PAGE)
      e = ENOSPC; /* less than a page: the device is full */
  }
  nto_free_aligned((float *)zero);
  if (e == 0)
    return 0;
  uint64_t avail = 0;
  int known = free_bytes(fd, &avail);
  /* Give the blocks back; if that fails too, the error below stands and
   * the caller closes the file (or keeps its old size in use). */
  int cut = ftruncate(fd, (off_t)from);
  (void)cut;
  if (e == ENOSPC)
    return no_space(dir, bytes - from, known ? avail : 0, err);
  char n[32];
  nto_format_bytes(bytes - from, n, sizeof n);
  return nto_err_set(err, NTO_EIO, "swap dir %s: cannot reserve %s: %s", dir, n,
                     strerror(e));
}

/* Give fd its size, every block allocated: fallocate, or where the
 * filesystem does not support it reserve_by_writing from the current
 * size. */
static int preallocate(int fd, const char *dir, uint64_t bytes, nto_err *err) {
  if (bytes == 0)
    return 0;
  int r;
  do
    r = fallocate(fd, 0, 0, (off_t)bytes);
  while (r != 0 && errno == EINTR);
  if (r == 0)
    return 0;
  int e = errno;
  uint64_t avail = 0;
  char n[32];
  nto_format_bytes(bytes, n, sizeof n);
  if (e == ENOSPC)
    return no_space(dir, bytes, free_bytes(fd, &avail) ? avail : 0, err);
  if (e != EOPNOTSUPP && e != ENOSYS)
    return nto_err_set(err, NTO_EIO, "swap dir %s: cannot preallocate %s: %s",
                       dir, n, strerror(e));
  struct stat st;
  if (fstat(fd, &st) != 0)
    return nto_err_set(err, NTO_EIO, "swap dir %s: %s", dir, strerror(errno));
  uint64_t from = (uint64_t)st.st_size / NTO_PAGE * NTO_PAGE;
  return from < bytes ? reserve_by_writing(fd, dir, from, bytes, err) : 0;
}

/* Open, verify and size the file for s (s->dir, s->bytes, s->direct). */
static int swap_setup(nto_swap *s, nto_err *err) {
  int flags = O_RDWR | O_CLOEXEC | (s->direct ? O_DIRECT : 0);
  s->fd = open_anon(s->dir, flags);
  if (s->fd < 0) {
    if (errno == EINVAL && s->direct)
      return direct_unsupported(s->dir, err);
    return nto_err_set(err, NTO_EIO, "swap dir %s: %s", s->dir,
                       strerror(errno));
  }
  int rc = s->direct ? verify_direct(s->fd, s->dir, err) : 0;
  if (rc == 0)
    rc = check_space(s->fd, s->dir, s->bytes, err);
  if (rc == 0)
    rc = preallocate(s->fd, s->dir, s->bytes, err);
  return rc;
}

int nto_swap_open(nto_swap **out, const nto_swap_opts *o, nto_err *err) {
  if (out == NULL || o == NULL)
    return nto_err_set(err, NTO_EINVAL, "swap: invalid arguments");
  const char *dir = pick_dir(o->dir);
  if (strlen(dir) >= SWAP_DIR_MAX)
    return nto_err_set(err, NTO_EINVAL, "swap dir %.64s...: path too long",
                       dir);
  if (o->bytes > (uint64_t)INT64_MAX - (NTO_PAGE - 1))
    return nto_err_set(err, NTO_EINVAL,
                       "swap dir %s: size %llu bytes is too large", dir,
                       (unsigned long long)o->bytes);
  nto_swap *s = calloc(1, sizeof *s);
  if (s == NULL)
    return nto_err_set(err, NTO_ENOMEM, "swap dir %s: out of memory", dir);
  strcpy(s->dir, dir);
  s->bytes = (o->bytes + NTO_PAGE - 1) / NTO_PAGE * NTO_PAGE;
  s->direct = o->direct != 0;
  int rc = swap_setup(s, err);
  if (rc) {
    nto_swap_close(s);
    return rc;
  }
  *out = s;
  return 0;
}

void nto_swap_close(nto_swap *s) {
  if (s == NULL)
    return;
  if (s->fd >= 0)
    close(s->fd);
  free(s);
}

int nto_swap_grow(nto_swap *s, uint64_t bytes, nto_err *err) {
  if (bytes > (uint64_t)INT64_MAX - (NTO_PAGE - 1))
    return nto_err_set(err, NTO_EINVAL,
                       "swap dir %s: size %llu bytes is too large", s->dir,
                       (unsigned long long)bytes);
  bytes = (bytes + NTO_PAGE - 1) / NTO_PAGE * NTO_PAGE;
  if (bytes <= s->bytes)
    return 0;
  int rc = check_space(s->fd, s->dir, bytes - s->bytes, err);
  if (rc == 0)
    rc = preallocate(s->fd, s->dir, bytes, err);
  if (rc == 0)
    s->bytes = bytes;
  return rc;
}

int nto_swap_fd(const nto_swap *s) { return s->fd; }

uint64_t nto_swap_size(const nto_swap *s) { return s->bytes; }

int nto_swap_is_direct(const nto_swap *s) { return s->direct; }

const char *nto_swap_dir(const nto_swap *s) { return s->dir; }

int nto_swap_dir_in_ram(const char *dir, const char **fs, nto_err *err) {
  struct statfs sf;
  if (statfs(dir, &sf) != 0)
    return nto_err_set(err, NTO_EIO, "swap dir %s: %s", dir, strerror(errno));
  /* the magics are 32 bits; f_type is a signed word of either width */
  uint32_t type = (uint32_t)sf.f_type;
  if (type == (uint32_t)TMPFS_MAGIC || type == (uint32_t)RAMFS_MAGIC) {
    *fs = type == (uint32_t)TMPFS_MAGIC ? "tmpfs" : "ramfs";
    return 1;
  }
  return 0;
}
