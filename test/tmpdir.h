/*
 * tmpdir.h - a private temporary directory for a test, removed with all it
 * contains. Test-only; single thread.
 */
#ifndef NTO_TEST_TMPDIR_H
#define NTO_TEST_TMPDIR_H

#include <stddef.h>

/*
 * Create "$TMPDIR/nto-<tag>-XXXXXX" (TMPDIR defaults to /tmp) and write its
 * path into dir (len bytes). Returns 0, or -1 if it cannot be created. A
 * directory not removed by tmpdir_remove (a failed assertion leaves its
 * test by a long jump) is removed when the process exits (atexit), for up
 * to 64 directories at a time.
 */
int tmpdir_make(char *dir, size_t len, const char *tag);

/* Remove dir and everything below it. Returns 0 or -1. */
int tmpdir_remove(const char *dir);

/* A CMocka fixture holding one temporary directory. */
typedef struct tmpdir_fixture {
  char dir[256];
} tmpdir_fixture;

/* *state = a new tmpdir_fixture whose dir is made for tag. Returns 0, or
 * -1 (nothing allocated). */
int tmpdir_fixture_setup(void **state, const char *tag);

/* Remove the fixture's directory and free it; a CMocka teardown. */
int tmpdir_fixture_teardown(void **state);

#endif
