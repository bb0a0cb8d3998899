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

int tmpdir_fixture_setup(void **state, const char *tag) {
  tmpdir_fixture *fx = calloc(1, sizeof *fx);
  if (!fx || tmpdir_make(fx->dir, sizeof fx->dir, tag) != 0) {
    free(fx);
    return -1;
  }
  *state = fx;
  return 0;
}

int tmpdir_fixture_teardown(void **state) {
  tmpdir_fixture *fx = *state;
  tmpdir_remove(fx->dir);
  free(fx);
  return 0;
}
