/* tmpdir.c - private temporary directories for tests. See tmpdir.h. */
#include "tmpdir.h"

#include <ftw.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Directories made and not removed yet: a failed CMocka assertion leaves
 * its test by a long jump, past the test's own tmpdir_remove, so the
 * process removes what is left when it exits. */
#define LEFT_MAX 64
static char left[LEFT_MAX][256];
static int n_left;

static int remove_entry(const char *p, const struct stat *st, int flag,
                        struct FTW *f) {
  (void)st;
  (void)flag;
  (void)f;
  return remove(p);
}

static int remove_tree(const char *dir) {
  return nftw(dir, remove_entry, 16, FTW_DEPTH | FTW_PHYS);
}

static void remove_left(void) {
  for (int i = 0; i < n_left; i++)
    remove_tree(left[i]);
  n_left = 0;
}

int tmpdir_make(char *dir, size_t len, const char *tag) {
  const char *t = getenv("TMPDIR");
  int n = snprintf(dir, len, "%s/nto-%s-XXXXXX", t ? t : "/tmp", tag);
  if (n < 0 || (size_t)n >= len || (size_t)n >= sizeof left[0])
    return -1;
  if (!mkdtemp(dir))
    return -1;
  static int registered;
  if (!registered)
    registered = atexit(remove_left) == 0;
  if (n_left < LEFT_MAX)
    strcpy(left[n_left++], dir);
  return 0;
}

int tmpdir_remove(const char *dir) {
  for (int i = 0; i < n_left; i++)
    if (strcmp(left[i], dir) == 0) {
      memcpy(left[i], left[--n_left], sizeof left[i]);
      break;
    }
  return remove_tree(dir);
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
