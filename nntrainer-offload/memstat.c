/* memstat.c - VmHWM / VmRSS from /proc/self/status. See memstat.h. */
#include "memstat.h"

#include <stdio.h>
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
