/*
 * test_probe.c - io/probe.h: the swap directory's bandwidth probe refuses
 * a missing directory and an unknown backend before any I/O, naming what
 * is wrong. (A measurement writes and reads up to 2 x 256 MiB: the bench
 * CLI test, test/cli/test_bench.sh, runs one.)
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include "tmpdir.h"

#include "probe.h"

#include <dirent.h>
#include <stdio.h>
#include <string.h>

static void test_refused(void **state) {
  (void)state;
  nto_swap_probe_result r;
  nto_err err = {0};
  char dir[256], missing[300];
  assert_int_equal(tmpdir_make(dir, sizeof dir, "probe"), 0);
  snprintf(missing, sizeof missing, "%s/none", dir);
  assert_int_equal(nto_swap_probe(missing, NTO_IO_AUTO, 1, 0, &r, &err),
                   NTO_EIO);
  if (!strstr(err.msg, "swap dir ") || !strstr(err.msg, missing))
    fail_msg("%s", err.msg);
  assert_int_equal(r.depth, NTO_SWAP_PROBE_DEPTH);
  assert_int_equal(r.block, NTO_SWAP_PROBE_BLOCK);
  assert_null(r.io);
  assert_int_equal(nto_swap_probe(dir, (nto_io_kind)9, 0, 0, &r, &err),
                   NTO_EINVAL);
  tmpdir_remove(dir);
}

/* A probe of the size asked (train's, before it chooses recompute auto's
 * segments: the minimum, 16 MiB) measures that many bytes each way with a
 * quarter of its requests in flight (4 MiB of buffers) and leaves nothing
 * in the directory. */
static void test_bytes(void **state) {
  (void)state;
  nto_swap_probe_result r;
  nto_err err = {0};
  char dir[256];
  assert_int_equal(tmpdir_make(dir, sizeof dir, "probe"), 0);
  int rc = nto_swap_probe(dir, NTO_IO_AUTO, 1, 1, &r, &err);
  if (rc == NTO_EIO && strstr(err.msg, "too little to measure")) {
    tmpdir_remove(dir);
    skip(); /* a nearly full test directory */
  }
  if (rc != 0)
    fail_msg("%s", err.msg);
  assert_true(r.bytes == NTO_SWAP_PROBE_MIN_BYTES);
  assert_int_equal(r.depth, 4); /* a quarter of its 16 requests */
  assert_true(r.write_mib_s > 0 && r.read_mib_s > 0);
  DIR *d = opendir(dir);
  assert_non_null(d);
  struct dirent *e;
  int left = 0;
  while ((e = readdir(d)))
    left += strcmp(e->d_name, ".") != 0 && strcmp(e->d_name, "..") != 0;
  closedir(d);
  assert_int_equal(left, 0);
  tmpdir_remove(dir);
}

int main(void) {
  const struct CMUnitTest tests[] = {cmocka_unit_test(test_refused),
                                     cmocka_unit_test(test_bytes)};
  return cmocka_run_group_tests(tests, NULL, NULL);
}
