/*
 * test_place.c - the placer (place.h) against a transcription of its
 * specification: each buffer, in each order, at the lowest offset free of
 * every buffer placed before it that shares an instant with it, found by a
 * sweep over all of them in offset order (the placer's first form, which
 * was quadratic). Random sets of buffers, short-lived and long-lived, one
 * and two segments (wrapping), and equal sizes and starts (the orders'
 * ties): the same offsets and region, bit for bit; and no two buffers
 * alive at once share a byte.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include "place.h"

#include <stdlib.h>
#include <string.h>

/* ---- the reference: the specification, written plainly ---- */

static int overlap(const nto_place_item *a, const nto_place_item *b) {
  for (int i = 0; i < a->n_seg; i++)
    for (int j = 0; j < b->n_seg; j++)
      if (a->seg[i][0] <= b->seg[j][1] && b->seg[j][0] <= a->seg[i][1])
        return 1;
  return 0;
}

static long span(const nto_place_item *v) {
  long n = 0;
  for (int i = 0; i < v->n_seg; i++)
    n += v->seg[i][1] - v->seg[i][0] + 1;
  return n;
}

/* The three orders of place.h: size, lifetime, first use (each with the
 * same tie-breaks: larger, then earlier first instant; stable on index). */
static const nto_place_item *ref_v;
static int ref_key; /* 0 size, 1 span, 2 start */

static int ref_cmp(const void *x, const void *y) {
  const nto_place_item *a = &ref_v[*(const int *)x],
                       *b = &ref_v[*(const int *)y];
  if (ref_key == 1 && span(a) != span(b))
    return span(a) < span(b) ? 1 : -1;
  if (ref_key == 2 && a->seg[0][0] != b->seg[0][0])
    return a->seg[0][0] < b->seg[0][0] ? -1 : 1;
  if (a->bytes != b->bytes)
    return a->bytes < b->bytes ? 1 : -1;
  if (a->seg[0][0] != b->seg[0][0])
    return a->seg[0][0] < b->seg[0][0] ? -1 : 1;
  return 0;
}

/* Greedy placement of idx[0..n) in that order; returns the region. */
static size_t ref_place_order(nto_place_item *v, const int *idx, int n) {
  size_t region = 0;
  for (int i = 0; i < n; i++) {
    nto_place_item *p = &v[idx[i]];
    size_t off = 0;
    for (int moved = 1; moved;) { /* bump past every clash, to a fixpoint */
      moved = 0;
      for (int j = 0; j < i; j++) {
        const nto_place_item *u = &v[idx[j]];
        if (u->offset < off + p->bytes && off < u->offset + u->bytes &&
            overlap(u, p)) {
          off = u->offset + u->bytes;
          moved = 1;
        }
      }
    }
    p->offset = off;
    if (off + p->bytes > region)
      region = off + p->bytes;
  }
  return region;
}

/* The smallest region of the three orders (the earliest on a tie), with
 * its offsets. */
static size_t ref_place(nto_place_item *v, int n) {
  int *idx = malloc((size_t)n * sizeof *idx);
  nto_place_item *best = malloc((size_t)n * sizeof *best);
  size_t best_region = SIZE_MAX;
  for (int o = 0; o < 3; o++) {
    for (int k = 0; k < n; k++)
      idx[k] = k;
    ref_v = v;
    ref_key = o;
    qsort(idx, (size_t)n, sizeof *idx, ref_cmp);
    size_t r = ref_place_order(v, idx, n);
    if (r < best_region) {
      best_region = r;
      memcpy(best, v, (size_t)n * sizeof *v);
    }
  }
  memcpy(v, best, (size_t)n * sizeof *v);
  free(idx);
  free(best);
  return best_region;
}

/* ---- random buffer sets ---- */

static uint64_t rng_state;

static long below(long n) { /* an LCG: deterministic, good enough here */
  if (n < 1)
    n = 1;
  rng_state = rng_state * 6364136223846793005ull + 1442695040888963407ull;
  return (long)((rng_state >> 33) % (uint64_t)n);
}

/* n buffers in time [0, T): mostly short-lived, some long-lived (over the
 * bucketing's long threshold), some wrapping (two segments); sizes from a
 * few values so that the orders tie. */
static void random_items(nto_place_item *v, int n, long T) {
  static const size_t sizes[] = {4096, 8192, 4096, 12288, 65536, 4096};
  for (int i = 0; i < n; i++) {
    long kind = below(10), len;
    if (kind < 6)
      len = 1 + below(8); /* short */
    else if (kind < 9)
      len = 1 + below(T / 2); /* long */
    else
      len = T / 2 + below(T / 2); /* very long, often wrapping */
    if (len < 1)
      len = 1;
    long a = below(T);
    v[i] = (nto_place_item){.bytes = sizes[below(6)]};
    if (a + len <= T) {
      v[i].n_seg = 1;
      v[i].seg[0][0] = a, v[i].seg[0][1] = a + len - 1;
    } else { /* wraps around the end of the pass */
      v[i].n_seg = 2;
      v[i].seg[0][0] = 0, v[i].seg[0][1] = a + len - 1 - T;
      v[i].seg[1][0] = a, v[i].seg[1][1] = T - 1;
    }
  }
}

/* No two buffers sharing an instant share a byte; every buffer within the
 * region. */
static void check_valid(const nto_place_item *v, int n, size_t region) {
  for (int i = 0; i < n; i++) {
    assert_true(v[i].offset + v[i].bytes <= region);
    for (int j = 0; j < i; j++)
      if (overlap(&v[i], &v[j]) && v[i].offset < v[j].offset + v[j].bytes &&
          v[j].offset < v[i].offset + v[i].bytes)
        fail_msg("buffers %d and %d overlap in time and bytes", i, j);
  }
}

static void test_place_matches_reference(void **state) {
  (void)state;
  const struct {
    int n;
    long T;
  } cases[] = {{1, 1},      {2, 3},     {40, 12},    {200, 60},
               {300, 9000}, {600, 400}, {800, 5000}, {1000, 14436}};
  for (size_t c = 0; c < sizeof cases / sizeof *cases; c++)
    for (int round = 0; round < 3; round++) {
      int n = cases[c].n;
      long T = cases[c].T;
      rng_state = 1000 * c + (uint64_t)round + 1;
      nto_place_item *a = calloc((size_t)n, sizeof *a);
      nto_place_item *b = calloc((size_t)n, sizeof *b);
      random_items(a, n, T);
      memcpy(b, a, (size_t)n * sizeof *a);
      size_t ra = nto_place(a, n, T, 0), rb = ref_place(b, n);
      if (ra != rb)
        fail_msg("n %d T %ld round %d: region %zu, reference %zu", n, T, round,
                 ra, rb);
      for (int i = 0; i < n; i++)
        if (a[i].offset != b[i].offset)
          fail_msg("n %d T %ld round %d: buffer %d at %zu, reference %zu", n, T,
                   round, i, a[i].offset, b[i].offset);
      check_valid(a, n, ra);
      free(a);
      free(b);
    }
}

/* With fit: the first order within fit is kept (the same region as
 * without when the size order already fits), and the offsets are valid. */
static void test_place_fit(void **state) {
  (void)state;
  int n = 500;
  long T = 300;
  nto_place_item *a = calloc((size_t)n, sizeof *a);
  rng_state = 77;
  random_items(a, n, T);
  size_t full = nto_place(a, n, T, 0);
  size_t loose = nto_place(a, n, T, SIZE_MAX / 2);
  check_valid(a, n, loose);
  assert_true(loose >= full);
  free(a);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_place_matches_reference),
      cmocka_unit_test(test_place_fit),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
