/* tmpdir.c - private temporary directories for tests. See tmpdir.h. */
#include "tmpdir.h"

#include <ftw.h>
#include <stdio.h>
#include <stdlib.h>

int tmpdir_make(char *dir, size_t len, const char *tag) {
  const char *t = getenv("TMPDIR");
  int n = snprintf(dir, len, "%s/nto-%s-XXXXXX", t ? t : "/tmp", tag);
  if (n < 0 || (size_t)n >= len)
    return -1;
  return mkdtemp(dir) ? 0 : -1;
}

static int remove_entry(const char *p, const struct stat *st, int flag,
                        struct FTW *f) {
  (void)st;
  (void)flag;
  (void)f;
  return remove(p);
}

int tmpdir_remove(const char *dir) {
  return nftw(dir, remove_entry, 16, FTW_DEPTH | FTW_PHYS);
}
