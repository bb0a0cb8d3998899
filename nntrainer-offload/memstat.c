/* memstat.c - VmHWM / VmRSS from /proc/self/status, the memory limit
 * from the cgroup or /proc/meminfo. See memstat.h. */
#include "memstat.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static size_t status_kib(const char *key) {
  FILE *f = fopen("/proc/self/status", "r");
  if (!f)
    return 0;
  char line[256];
  size_t kib = 0, n = strlen(key);
  while (fgets(line, sizeof line, f))
    if (strncmp(line, key, n) == 0 && line[n] == ':') {
      sscanf(line + n + 1, "%zu", &kib);
      break;
    }
  fclose(f);
  return kib;
}

size_t nto_peak_rss_bytes(void) { return status_kib("VmHWM") * 1024; }
size_t nto_current_rss_bytes(void) { return status_kib("VmRSS") * 1024; }

/* The number in the file at path ("max": none) into *v; 0 or -1. */
static int read_limit(const char *path, unsigned long long *v) {
  FILE *f = fopen(path, "r");
  char buf[64];
  int ok = f && fgets(buf, sizeof buf, f) && strncmp(buf, "max", 3) != 0 &&
           sscanf(buf, "%llu", v) == 1;
  if (f)
    fclose(f);
  return ok ? 0 : -1;
}

/* The smallest limit of file `name` in dir and its parents up to base
 * (dir begins with base); 0: none. v1's "unlimited" is a page-rounded
 * LONG_MAX: anything from 2^60 on counts as none. */
static size_t walk_up(char *dir, size_t base_len, const char *name) {
  size_t best = 0;
  for (;;) {
    char path[4200];
    unsigned long long v;
    snprintf(path, sizeof path, "%s/%s", dir, name);
    if (read_limit(path, &v) == 0 && v < (1ULL << 60) && v > 0 &&
        (best == 0 || v < best))
      best = (size_t)v;
    char *slash = strrchr(dir, '/');
    if (strlen(dir) <= base_len || !slash || (size_t)(slash - dir) < base_len)
      return best;
    *slash = '\0';
  }
}

nto_limit_kind nto_memory_limit(const char *root, const char *proc,
                                size_t *bytes) {
  const char *r = root ? root : "/sys/fs/cgroup", *pr = proc ? proc : "/proc";
  char path[4200], line[4096];
  *bytes = 0;
  snprintf(path, sizeof path, "%s/self/cgroup", pr);
  FILE *f = fopen(path, "r");
  size_t v2 = 0, v1 = 0;
  while (f && fgets(line, sizeof line, f)) {
    line[strcspn(line, "\n")] = '\0';
    char *c1 = strchr(line, ':'), *c2 = c1 ? strchr(c1 + 1, ':') : NULL;
    if (!c2)
      continue;
    *c1 = *c2 = '\0'; /* line: the hierarchy id */
    const char *ctrl = c1 + 1, *cg = c2 + 1;
    char dir[4200];
    if (!strcmp(line, "0") && !*ctrl) { /* v2: "0::/path" */
      snprintf(dir, sizeof dir, "%s%s", r, strcmp(cg, "/") ? cg : "");
      v2 = walk_up(dir, strlen(r), "memory.max");
    } else if (strstr(ctrl, "memory")) { /* v1: "N:memory:/path" */
      size_t base = (size_t)snprintf(dir, sizeof dir, "%s/memory", r);
      snprintf(dir + base, sizeof dir - base, "%s", strcmp(cg, "/") ? cg : "");
      v1 = walk_up(dir, base, "memory.limit_in_bytes");
    }
  }
  if (f)
    fclose(f);
  if (v2 && (!v1 || v2 <= v1)) {
    *bytes = v2;
    return NTO_LIMIT_CGROUP_V2;
  }
  if (v1) {
    *bytes = v1;
    return NTO_LIMIT_CGROUP_V1;
  }
  snprintf(path, sizeof path, "%s/meminfo", pr);
  if (!(f = fopen(path, "r")))
    return NTO_LIMIT_NONE;
  size_t kib = 0;
  while (fgets(line, sizeof line, f))
    if (sscanf(line, "MemAvailable: %zu kB", &kib) == 1)
      break;
  fclose(f);
  *bytes = kib * 1024;
  return kib ? NTO_LIMIT_AVAILABLE : NTO_LIMIT_NONE;
}
