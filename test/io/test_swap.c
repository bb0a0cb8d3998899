/*
 * test_swap.c - the swap file: anonymous (no directory entry, with
 * O_TMPFILE and with the named-file fallback), preallocated to the rounded
 * size, O_DIRECT verified or refused with the --no-direct hint (also on
 * tmpfs when /dev/shm exists), and the error messages for a size larger
 * than the free space and for a missing or unusable directory.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include "tmpdir.h"

#include "swap.h"
#include "tensor.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

typedef struct {
  char dir[256];
  char shm[64]; /* a directory in /dev/shm, "" if none */
} fixture;

static int setup(void **state) {
  fixture *fx = calloc(1, sizeof *fx);
  if (tmpdir_make(fx->dir, sizeof fx->dir, "swap") != 0) {
    free(fx);
    return -1;
  }
  *state = fx;
  return 0;
}

static int teardown(void **state) {
  fixture *fx = *state;
  nto_swap_test_no_tmpfile(0);
  chmod(fx->dir, 0700);
  tmpdir_remove(fx->dir);
  if (fx->shm[0])
    tmpdir_remove(fx->shm);
  free(fx);
  return 0;
}

static void assert_msg_has(const nto_err *err, const char *s) {
  if (strstr(err->msg, s) == NULL)
    fail_msg("message \"%s\" lacks \"%s\"", err->msg, s);
}

/* Entries of dir other than "." and "..". */
static int count_entries(const char *dir) {
  DIR *d = opendir(dir);
  assert_non_null(d);
  int n = 0;
  struct dirent *e;
  while ((e = readdir(d)) != NULL)
    n += strcmp(e->d_name, ".") != 0 && strcmp(e->d_name, "..") != 0;
  closedir(d);
  return n;
}

/* Write a pattern page at offset and read it back through s's fd. */
static void check_page_io(const nto_swap *s, uint64_t offset) {
  unsigned char *w = (unsigned char *)nto_alloc_aligned(NTO_PAGE);
  unsigned char *r = (unsigned char *)nto_alloc_aligned(NTO_PAGE);
  assert_non_null(w);
  assert_non_null(r);
  for (unsigned i = 0; i < NTO_PAGE; i++)
    w[i] = (unsigned char)(i ^ (offset >> 12));
  assert_int_equal(pwrite(nto_swap_fd(s), w, NTO_PAGE, (off_t)offset),
                   NTO_PAGE);
  assert_int_equal(pread(nto_swap_fd(s), r, NTO_PAGE, (off_t)offset), NTO_PAGE);
  assert_memory_equal(w, r, NTO_PAGE);
  nto_free_aligned((float *)w);
  nto_free_aligned((float *)r);
}

/* Open a buffered swap file of bytes in dir; check it is nameless, sized
 * `expect` and usable. */
static void check_anonymous(const char *dir, uint64_t bytes, uint64_t expect) {
  nto_swap_opts o = {dir, bytes, 0};
  nto_swap *s = NULL;
  nto_err err = {0};
  if (nto_swap_open(&s, &o, &err) != 0)
    fail_msg("%s", err.msg);
  assert_int_equal(nto_swap_size(s), expect);
  assert_int_equal(nto_swap_is_direct(s), 0);
  assert_string_equal(nto_swap_dir(s), dir);
  assert_int_equal(count_entries(dir), 0);
  struct stat st;
  assert_int_equal(fstat(nto_swap_fd(s), &st), 0);
  assert_int_equal(st.st_nlink, 0);
  assert_true(S_ISREG(st.st_mode));
  assert_int_equal((uint64_t)st.st_size, expect);
  int fl = fcntl(nto_swap_fd(s), F_GETFL);
  assert_int_equal(fl & O_ACCMODE, O_RDWR);
  assert_int_equal(fl & O_DIRECT, 0);
  assert_true(fcntl(nto_swap_fd(s), F_GETFD) & FD_CLOEXEC);
  if (expect >= NTO_PAGE) {
    check_page_io(s, 0);
    check_page_io(s, expect - NTO_PAGE);
  }
  nto_swap_close(s);
  assert_int_equal(count_entries(dir), 0);
}

static void test_anonymous(void **state) {
  fixture *fx = *state;
  check_anonymous(fx->dir, 10 * NTO_PAGE, 10 * NTO_PAGE);
  check_anonymous(fx->dir, 3 * NTO_PAGE + 100, 4 * NTO_PAGE); /* rounded */
  check_anonymous(fx->dir, 1, NTO_PAGE);
  check_anonymous(fx->dir, 0, 0);
  /* Preallocated: the blocks are there before any write. */
  nto_swap_opts o = {fx->dir, 256 * NTO_PAGE, 0};
  nto_swap *s;
  nto_err err = {0};
  assert_int_equal(nto_swap_open(&s, &o, &err), 0);
  struct stat st;
  assert_int_equal(fstat(nto_swap_fd(s), &st), 0);
  assert_true((uint64_t)st.st_blocks * 512 >= 256 * NTO_PAGE);
  nto_swap_close(s);
  nto_swap_close(NULL);
}

static void test_named_fallback(void **state) {
  fixture *fx = *state;
  nto_swap_test_no_tmpfile(1);
  check_anonymous(fx->dir, 5 * NTO_PAGE, 5 * NTO_PAGE);
  /* Errors still name the directory and leave nothing behind. */
  nto_swap_opts big = {fx->dir, (uint64_t)1 << 60, 0};
  nto_swap *s = NULL;
  nto_err err = {0};
  assert_int_equal(nto_swap_open(&s, &big, &err), NTO_EIO);
  assert_msg_has(&err, "needs");
  assert_null(s);
  assert_int_equal(count_entries(fx->dir), 0);
  nto_swap_test_no_tmpfile(0);
}

/*
 * O_DIRECT in dir: either it works (flag set, aligned I/O at both ends) or
 * it is refused with NTO_EUNSUPPORTED and the --no-direct hint, and then a
 * buffered file works. Nothing is left in dir either way. Returns 1 if
 * O_DIRECT worked.
 */
static int check_direct(const char *dir) {
  nto_swap_opts o = {dir, 64 * NTO_PAGE, 1};
  nto_swap *s = NULL;
  nto_err err = {0};
  int rc = nto_swap_open(&s, &o, &err);
  if (rc == NTO_EUNSUPPORTED) {
    assert_null(s);
    assert_int_equal(err.code, NTO_EUNSUPPORTED);
    assert_msg_has(&err, dir);
    assert_msg_has(&err, "does not support O_DIRECT");
    assert_msg_has(&err, "--no-direct");
    assert_int_equal(count_entries(dir), 0);
    check_anonymous(dir, 64 * NTO_PAGE, 64 * NTO_PAGE);
    return 0;
  }
  if (rc != 0)
    fail_msg("%s: rc %d: %s", dir, rc, err.msg);
  assert_int_equal(nto_swap_is_direct(s), 1);
  assert_true(fcntl(nto_swap_fd(s), F_GETFL) & O_DIRECT);
  assert_int_equal(nto_swap_size(s), 64 * NTO_PAGE);
  struct stat st;
  assert_int_equal(fstat(nto_swap_fd(s), &st), 0);
  assert_int_equal(st.st_size, 64 * NTO_PAGE);
  assert_int_equal(st.st_nlink, 0);
  check_page_io(s, 0);
  check_page_io(s, 63 * NTO_PAGE);
  assert_int_equal(count_entries(dir), 0);
  nto_swap_close(s);
  return 1;
}

static void test_direct(void **state) {
  fixture *fx = *state;
  int ok = check_direct(fx->dir);
  print_message("O_DIRECT in %s: %s\n", fx->dir,
                ok ? "supported" : "unsupported");
  /* tmpfs, whose O_DIRECT support depends on the kernel. */
  snprintf(fx->shm, sizeof fx->shm, "/dev/shm/nto-swap-XXXXXX");
  if (access("/dev/shm", W_OK) != 0 || mkdtemp(fx->shm) == NULL) {
    fx->shm[0] = '\0';
    print_message("no writable /dev/shm: tmpfs case not run\n");
    return;
  }
  ok = check_direct(fx->shm);
  print_message("O_DIRECT in %s (tmpfs): %s\n", fx->shm,
                ok ? "supported" : "unsupported");
  nto_swap_test_no_tmpfile(1);
  assert_int_equal(check_direct(fx->shm), ok);
  nto_swap_test_no_tmpfile(0);
}

static void test_too_large(void **state) {
  fixture *fx = *state;
  for (int direct = 0; direct <= 1; direct++) {
    nto_swap_opts o = {fx->dir, (uint64_t)1 << 60, direct};
    nto_swap *s = NULL;
    nto_err err = {0};
    int rc = nto_swap_open(&s, &o, &err);
    if (direct && rc == NTO_EUNSUPPORTED)
      continue;
    assert_int_equal(rc, NTO_EIO);
    assert_int_equal(err.code, NTO_EIO);
    assert_null(s);
    assert_msg_has(&err, fx->dir);
    assert_msg_has(&err, "needs 1.0 EiB, only ");
    assert_msg_has(&err, " free");
    assert_int_equal(count_entries(fx->dir), 0);
  }
  /* Beyond any file offset. */
  nto_swap_opts o = {fx->dir, UINT64_MAX, 0};
  nto_swap *s = NULL;
  nto_err err = {0};
  assert_int_equal(nto_swap_open(&s, &o, &err), NTO_EINVAL);
  assert_msg_has(&err, "too large");
  assert_null(s);
}

static void test_bad_dir(void **state) {
  fixture *fx = *state;
  char path[512];
  nto_swap *s = NULL;
  nto_err err = {0};
  snprintf(path, sizeof path, "%s/missing", fx->dir);
  for (int direct = 0; direct <= 1; direct++) {
    nto_swap_opts o = {path, NTO_PAGE, direct};
    assert_int_equal(nto_swap_open(&s, &o, &err), NTO_EIO);
    assert_msg_has(&err, path);
    assert_msg_has(&err, strerror(ENOENT));
    assert_null(s);
  }
  /* A regular file where the directory should be. */
  snprintf(path, sizeof path, "%s/file", fx->dir);
  FILE *f = fopen(path, "w");
  assert_non_null(f);
  fclose(f);
  nto_swap_opts o = {path, NTO_PAGE, 0};
  assert_int_equal(nto_swap_open(&s, &o, &err), NTO_EIO);
  assert_msg_has(&err, path);
  assert_msg_has(&err, strerror(ENOTDIR));
  assert_int_equal(unlink(path), 0);
  /* No write permission (root bypasses it). */
  if (geteuid() != 0) {
    assert_int_equal(chmod(fx->dir, 0500), 0);
    o.dir = fx->dir;
    assert_int_equal(nto_swap_open(&s, &o, &err), NTO_EIO);
    assert_msg_has(&err, fx->dir);
    assert_msg_has(&err, strerror(EACCES));
    nto_swap_test_no_tmpfile(1);
    assert_int_equal(nto_swap_open(&s, &o, &err), NTO_EIO);
    assert_msg_has(&err, strerror(EACCES));
    nto_swap_test_no_tmpfile(0);
    assert_int_equal(chmod(fx->dir, 0700), 0);
  }
  assert_null(s);
  assert_int_equal(nto_swap_open(NULL, &o, &err), NTO_EINVAL);
  assert_int_equal(nto_swap_open(&s, NULL, &err), NTO_EINVAL);
}

static void test_default_dir(void **state) {
  fixture *fx = *state;
  const char *old = getenv("TMPDIR");
  char *saved = old ? strdup(old) : NULL;
  assert_int_equal(setenv("TMPDIR", fx->dir, 1), 0);
  const char *dirs[] = {NULL, ""};
  for (int i = 0; i < 2; i++) {
    nto_swap_opts o = {dirs[i], NTO_PAGE, 0};
    nto_swap *s;
    nto_err err = {0};
    assert_int_equal(nto_swap_open(&s, &o, &err), 0);
    assert_string_equal(nto_swap_dir(s), fx->dir);
    nto_swap_close(s);
  }
  assert_int_equal(setenv("TMPDIR", "", 1), 0);
  nto_swap_opts o = {NULL, NTO_PAGE, 0};
  nto_swap *s;
  nto_err err = {0};
  assert_int_equal(nto_swap_open(&s, &o, &err), 0);
  assert_string_equal(nto_swap_dir(s), "/tmp");
  nto_swap_close(s);
  if (saved) {
    setenv("TMPDIR", saved, 1);
    free(saved);
  } else {
    unsetenv("TMPDIR");
  }
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test_setup_teardown(test_anonymous, setup, teardown),
      cmocka_unit_test_setup_teardown(test_named_fallback, setup, teardown),
      cmocka_unit_test_setup_teardown(test_direct, setup, teardown),
      cmocka_unit_test_setup_teardown(test_too_large, setup, teardown),
      cmocka_unit_test_setup_teardown(test_bad_dir, setup, teardown),
      cmocka_unit_test_setup_teardown(test_default_dir, setup, teardown),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
