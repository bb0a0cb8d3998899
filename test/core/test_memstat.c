/*
 * test_memstat.c - the memory limit the process lives under (memstat.h
 * nto_memory_limit), read from a fake /sys/fs/cgroup and /proc written
 * into a temporary directory: cgroup v2 and v1 limits of the cgroup and
 * its ancestors (the smallest wins), "max" and v1's unlimited value as no
 * limit, MemAvailable when there is none.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include "tmpdir.h"

#include "memstat.h"

#include <stdio.h>
#include <string.h>
#include <sys/stat.h>

static char dir[256];

static int setup(void **state) {
  (void)state;
  return tmpdir_make(dir, sizeof dir, "memstat");
}

static int teardown(void **state) {
  (void)state;
  return tmpdir_remove(dir);
}

/* Write text to dir/rel, making its directories. */
static void put(const char *rel, const char *text) {
  char p[512];
  snprintf(p, sizeof p, "%s/%s", dir, rel);
  for (char *s = strchr(p + strlen(dir) + 1, '/'); s; s = strchr(s + 1, '/')) {
    *s = '\0';
    mkdir(p, 0700);
    *s = '/';
  }
  FILE *f = fopen(p, "w");
  assert_non_null(f);
  fputs(text, f);
  fclose(f);
}

static nto_limit_kind limit(const char *case_dir, size_t *bytes) {
  char root[512], proc[512];
  snprintf(root, sizeof root, "%s/%s/sys", dir, case_dir);
  snprintf(proc, sizeof proc, "%s/%s/proc", dir, case_dir);
  return nto_memory_limit(root, proc, bytes);
}

static void test_cgroup_v2(void **state) {
  (void)state;
  size_t b;
  put("v2/proc/self/cgroup", "0::/user.slice/job\n");
  put("v2/proc/meminfo", "MemTotal: 1000 kB\nMemAvailable: 500 kB\n");
  put("v2/sys/user.slice/job/memory.max", "max\n");
  put("v2/sys/user.slice/memory.max", "67108864\n");
  assert_int_equal(limit("v2", &b), NTO_LIMIT_CGROUP_V2);
  assert_int_equal(b, 64 << 20); /* the parent's: the job has none */
  put("v2/sys/user.slice/job/memory.max", "33554432\n");
  assert_int_equal(limit("v2", &b), NTO_LIMIT_CGROUP_V2);
  assert_int_equal(b, 32 << 20); /* the smaller */
}

static void test_cgroup_v1(void **state) {
  (void)state;
  size_t b;
  put("v1/proc/self/cgroup",
      "5:cpu,cpuacct:/\n4:memory:/process_api/abc\n0::/\n");
  put("v1/proc/meminfo", "MemAvailable: 500 kB\n");
  put("v1/sys/memory/process_api/abc/memory.limit_in_bytes",
      "9223372036854771712\n"); /* unlimited */
  put("v1/sys/memory/process_api/memory.limit_in_bytes", "536870912\n");
  put("v1/sys/memory/memory.limit_in_bytes", "9223372036854771712\n");
  assert_int_equal(limit("v1", &b), NTO_LIMIT_CGROUP_V1);
  assert_int_equal(b, 512 << 20);
}

static void test_mem_available(void **state) {
  (void)state;
  size_t b;
  put("none/proc/self/cgroup", "4:memory:/\n0::/\n");
  put("none/proc/meminfo",
      "MemTotal: 24000000 kB\nMemFree: 100 kB\nMemAvailable: 2048 kB\n");
  put("none/sys/memory/memory.limit_in_bytes", "9223372036854771712\n");
  assert_int_equal(limit("none", &b), NTO_LIMIT_AVAILABLE);
  assert_int_equal(b, 2048 * 1024);
  put("empty/proc/self/cgroup", "");
  put("empty/proc/meminfo", "MemTotal: 10 kB\n");
  assert_int_equal(limit("empty", &b), NTO_LIMIT_NONE);
  assert_int_equal(b, 0);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_cgroup_v2),
      cmocka_unit_test(test_cgroup_v1),
      cmocka_unit_test(test_mem_available),
  };
  return cmocka_run_group_tests(tests, setup, teardown);
}
