/*
 * test_fileio.c - io/fileio.h: full reads (a short read is its own error
 * naming the file and the offset), whole-file reads with a size cap, and
 * the atomic save: content written in pieces of every size comes out
 * whole; a stale temp file is replaced; on a writer's error, a write error
 * (the file size limit, RLIMIT_FSIZE, cuts a write short: the rest is
 * retried and fails with the byte offset), a failed rename or a missing
 * directory, the temp file is gone and the target untouched.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include "tmpdir.h"

#include "fileio.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

typedef tmpdir_fixture fixture;

static int setup(void **state) { return tmpdir_fixture_setup(state, "fileio"); }
static int teardown(void **state) { return tmpdir_fixture_teardown(state); }

static void check_msg(const nto_err *err, const char *want) {
  if (strstr(err->msg, want) == NULL)
    fail_msg("message \"%s\" lacks \"%s\"", err->msg, want);
}

/* dir/name into buf. */
static const char *in_dir(const fixture *fx, const char *name, char *buf,
                          size_t len) {
  snprintf(buf, len, "%s/%s", fx->dir, name);
  return buf;
}

/* Create path holding the n bytes at p (plain open and write). */
static void make_file(const char *path, const void *p, size_t n) {
  int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0644);
  assert_true(fd >= 0);
  assert_int_equal(write(fd, p, n), (ssize_t)n);
  assert_int_equal(close(fd), 0);
}

/* Entries of the fixture's directory (besides . and ..). */
static int entries(const fixture *fx) {
  DIR *d = opendir(fx->dir);
  assert_non_null(d);
  int n = 0;
  for (struct dirent *e; (e = readdir(d)) != NULL;)
    n += strcmp(e->d_name, ".") != 0 && strcmp(e->d_name, "..") != 0;
  closedir(d);
  return n;
}

/* ----------------------------------------------------------------- reads */

static void test_pread(void **state) {
  fixture *fx = *state;
  char path[512];
  in_dir(fx, "data", path, sizeof path);
  unsigned char bytes[100], got[100];
  for (int i = 0; i < 100; i++)
    bytes[i] = (unsigned char)(3 * i + 1);
  make_file(path, bytes, sizeof bytes);
  int fd;
  uint64_t size = 0;
  nto_err err = {0};
  assert_int_equal(nto_file_open_read(path, &fd, &size, &err), 0);
  assert_int_equal(size, 100);
  assert_int_equal(nto_file_pread_full(fd, got, 60, 40, path, &err), 0);
  assert_memory_equal(got, bytes + 40, 60);
  assert_int_equal(nto_file_pread_full(fd, got, 0, 100, path, &err), 0);
  /* The end of the file before the last byte: NTO_EDATA where it ended. */
  assert_int_equal(nto_file_pread_full(fd, got, 30, 90, path, &err), NTO_EDATA);
  check_msg(&err, path);
  check_msg(&err, ": truncated at byte offset 100");
  assert_memory_equal(got, bytes + 90, 10); /* what there was */
  assert_int_equal(nto_file_pread_full(fd, got, 1, 500, path, &err), NTO_EDATA);
  check_msg(&err, "truncated at byte offset 500");
  close(fd);
  /* A descriptor that cannot read: NTO_EIO with the offset. */
  fd = open(path, O_WRONLY);
  assert_true(fd >= 0);
  assert_int_equal(nto_file_pread_full(fd, got, 4, 8, path, &err), NTO_EIO);
  check_msg(&err, "read failed at byte offset 8: ");
  close(fd);
  in_dir(fx, "none", path, sizeof path);
  assert_int_equal(nto_file_open_read(path, &fd, &size, &err), NTO_EIO);
  check_msg(&err, ": cannot open: No such file");
}

static void test_read_all(void **state) {
  fixture *fx = *state;
  char path[512];
  in_dir(fx, "text", path, sizeof path);
  make_file(path, "{\"a\": 1}", 8);
  char *buf = NULL;
  size_t len = 0;
  nto_err err = {0};
  assert_int_equal(nto_file_read_all(path, 8, &buf, &len, &err), 0);
  assert_int_equal(len, 8);
  assert_string_equal(buf, "{\"a\": 1}"); /* NUL-terminated */
  free(buf);
  assert_int_equal(nto_file_read_all(path, 7, &buf, &len, &err), NTO_EDATA);
  assert_null(buf);
  check_msg(&err, ": 8 bytes, more than 7");
  make_file(path, "", 0);
  assert_int_equal(nto_file_read_all(path, 7, &buf, &len, &err), 0);
  assert_int_equal(len, 0);
  assert_string_equal(buf, "");
  free(buf);
  in_dir(fx, "none", path, sizeof path);
  assert_int_equal(nto_file_read_all(path, 7, &buf, &len, &err), NTO_EIO);
  check_msg(&err, "cannot open");
}

/* ----------------------------------------------------------------- saves */

/* What a test writer writes: n bytes in pieces of the given sizes (cycled),
 * byte i being (i * 7) & 255; fail: after the content, return this code
 * with a message of its own (0: succeed). */
typedef struct content {
  size_t n;
  const size_t *pieces;
  int n_pieces;
  int fail;
} content;

static unsigned char content_byte(size_t i) { return (unsigned char)(i * 7); }

static int write_content(nto_file_out *out, const void *vctx, nto_err *err) {
  const content *c = vctx;
  unsigned char *piece = malloc(1 << 18);
  assert_non_null(piece);
  int rc = 0;
  for (size_t at = 0, k = 0; rc == 0 && at < c->n; k++) {
    size_t m = c->pieces[k % (size_t)c->n_pieces];
    if (m > c->n - at)
      m = c->n - at;
    for (size_t j = 0; j < m; j++)
      piece[j] = content_byte(at + j);
    rc = nto_file_put(out, piece, m, err);
    at += m;
  }
  free(piece);
  if (rc == 0 && c->fail)
    rc = nto_err_set(err, c->fail, "the writer gave up");
  return rc;
}

/* 1 if path holds exactly c's bytes. */
static int holds(const char *path, const content *c) {
  char *buf;
  size_t len;
  nto_err err = {0};
  if (nto_file_read_all(path, c->n + 1, &buf, &len, &err) != 0)
    fail_msg("%s", err.msg);
  int same = len == c->n;
  for (size_t i = 0; same && i < len; i++)
    same = (unsigned char)buf[i] == content_byte(i);
  free(buf);
  return same;
}

static void test_save(void **state) {
  fixture *fx = *state;
  char path[512], tmp[512];
  in_dir(fx, "out.bin", path, sizeof path);
  in_dir(fx, "out.bin.tmp", tmp, sizeof tmp);
  /* Pieces around the 64 KiB buffer: small, exactly it, larger, empty. */
  static const size_t pieces[] = {1, 5, 65536, 3, 0, 65535, 200000, 17, 2};
  content c = {700001, pieces, 9, 0};
  nto_err err = {0};
  assert_int_equal(nto_file_save(path, ".tmp", write_content, &c, &err), 0);
  assert_true(holds(path, &c));
  assert_int_equal(entries(fx), 1);
  /* Over an existing file, with a stale temp file of the same name. */
  make_file(tmp, "stale", 5);
  c.n = 10;
  assert_int_equal(nto_file_save(path, ".tmp", write_content, &c, &err), 0);
  assert_true(holds(path, &c));
  assert_int_equal(entries(fx), 1);
  /* A relative path: the directory synced is ".". */
  char cwd[512];
  assert_non_null(getcwd(cwd, sizeof cwd));
  assert_int_equal(chdir(fx->dir), 0);
  c.n = 3;
  int rc = nto_file_save("rel.bin", ".tmp", write_content, &c, &err);
  assert_int_equal(chdir(cwd), 0);
  assert_int_equal(rc, 0);
  in_dir(fx, "rel.bin", tmp, sizeof tmp);
  assert_true(holds(tmp, &c));
  unlink(tmp);
}

static void test_save_fail(void **state) {
  fixture *fx = *state;
  char path[512], sub[512];
  in_dir(fx, "keep.bin", path, sizeof path);
  static const size_t pieces[] = {4096};
  content old = {5000, pieces, 1, 0}, c = {9000, pieces, 1, NTO_ENOMEM};
  nto_err err = {0};
  assert_int_equal(nto_file_save(path, ".tmp.1", write_content, &old, &err), 0);
  /* The writer fails: its code and message; nothing else changes. */
  assert_int_equal(nto_file_save(path, ".tmp.1", write_content, &c, &err),
                   NTO_ENOMEM);
  assert_string_equal(err.msg, "the writer gave up");
  assert_true(holds(path, &old));
  assert_int_equal(entries(fx), 1);
  /* A write fails (the file size limit): the byte offset where. The
   * first write of the buffer is cut short at the limit, the rest is
   * retried and refused. */
  struct rlimit was, lim;
  assert_int_equal(getrlimit(RLIMIT_FSIZE, &was), 0);
  lim = was;
  lim.rlim_cur = 6000;
  void (*prev)(int) = signal(SIGXFSZ, SIG_IGN);
  assert_int_equal(setrlimit(RLIMIT_FSIZE, &lim), 0);
  c.fail = 0;
  c.n = 70000; /* fills the buffer, then writes it */
  int rc = nto_file_save(path, ".tmp.1", write_content, &c, &err);
  assert_int_equal(setrlimit(RLIMIT_FSIZE, &was), 0);
  signal(SIGXFSZ, prev);
  assert_int_equal(rc, NTO_EIO);
  check_msg(&err, path);
  check_msg(&err, ": write failed at byte offset 6000: ");
  assert_true(holds(path, &old));
  assert_int_equal(entries(fx), 1);
  /* The rename fails (the target is a non-empty directory). */
  in_dir(fx, "dir", sub, sizeof sub);
  assert_int_equal(mkdir(sub, 0755), 0);
  in_dir(fx, "dir/x", path, sizeof path);
  make_file(path, "x", 1);
  c.n = 10;
  assert_int_equal(nto_file_save(sub, ".tmp", write_content, &c, &err),
                   NTO_EIO);
  check_msg(&err, "cannot rename");
  assert_int_equal(entries(fx), 2);
  unlink(path);
  rmdir(sub);
  /* No such directory; a path too long for the temp name. */
  in_dir(fx, "nodir/f.bin", path, sizeof path);
  assert_int_equal(nto_file_save(path, ".tmp", write_content, &c, &err),
                   NTO_EIO);
  check_msg(&err, "cannot create");
  check_msg(&err, "nodir/f.bin.tmp");
  char *longp = malloc(5000);
  assert_non_null(longp);
  memset(longp, 'a', 4999);
  longp[4999] = '\0';
  assert_int_equal(nto_file_save(longp, ".tmp", write_content, &c, &err),
                   NTO_EINVAL); /* the message: the path, cut */
  free(longp);
  assert_int_equal(entries(fx), 1);
}

static void test_le32(void **state) {
  (void)state;
  const uint32_t one = 0x01020304u;
  unsigned char b[4];
  memcpy(b, &one, 4);
  nto_file_le32(b, 1);
  assert_int_equal(b[0], 4); /* little-endian, whatever the host */
  assert_int_equal(b[3], 1);
  assert_int_equal(nto_file_host_le(), ((const unsigned char *)&one)[0] == 4);
}

/* A test with its own temporary directory. */
#define IN_TMPDIR(f) cmocka_unit_test_setup_teardown(f, setup, teardown)

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_le32), IN_TMPDIR(test_pread),
      IN_TMPDIR(test_read_all), IN_TMPDIR(test_save),
      IN_TMPDIR(test_save_fail)};
  return cmocka_run_group_tests(tests, NULL, NULL);
}
