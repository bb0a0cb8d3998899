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

#include <stdio.h>
#include <string.h>

static void test_refused(void **state) {
  (void)state;
  nto_swap_probe_result r;
  nto_err err = {0};
  char dir[256], missing[300];
  assert_int_equal(tmpdir_make(dir, sizeof dir, "probe"), 0);
  snprintf(missing, sizeof missing, "%s/none", dir);
  assert_int_equal(nto_swap_probe(missing, NTO_IO_AUTO, 1, &r, &err), NTO_EIO);
  if (!strstr(err.msg, "swap dir ") || !strstr(err.msg, missing))
    fail_msg("%s", err.msg);
  assert_int_equal(r.depth, NTO_SWAP_PROBE_DEPTH);
  assert_int_equal(r.block, NTO_SWAP_PROBE_BLOCK);
  assert_null(r.io);
  assert_int_equal(nto_swap_probe(dir, (nto_io_kind)9, 0, &r, &err),
                   NTO_EINVAL);
  tmpdir_remove(dir);
}

int main(void) {
  const struct CMUnitTest tests[] = {cmocka_unit_test(test_refused)};
  return cmocka_run_group_tests(tests, NULL, NULL);
}
