/* place.c - the placer. See place.h. */
#include "place.h"

#include "timeindex.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

/* Do the segments a[0..na) and b[0..nb) share an instant? */
static int segs_overlap(const long (*a)[2], int na, const long (*b)[2],
                        int nb) {
  for (int i = 0; i < na; i++)
    for (int j = 0; j < nb; j++)
      if (a[i][0] <= b[j][1] && b[j][0] <= a[i][1])
        return 1;
  return 0;
}

/* Largest first, then earliest first instant. ctx: the items (qsort_r). */
static int by_size(const void *x, const void *y, void *ctx) {
  const nto_place_item *v = ctx;
  const nto_place_item *a = &v[*(const int *)x], *b = &v[*(const int *)y];
  if (a->bytes != b->bytes)
    return a->bytes < b->bytes ? 1 : -1;
  return a->seg[0][0] < b->seg[0][0] ? -1 : a->seg[0][0] > b->seg[0][0];
}

/* Instants an item's segments cover. */
static long span(const nto_place_item *v) {
  long n = 0;
  for (int i = 0; i < v->n_seg; i++)
    n += v->seg[i][1] - v->seg[i][0] + 1;
  return n;
}

/* Longest-lived first, then as by_size. */
static int by_span(const void *x, const void *y, void *ctx) {
  const nto_place_item *v = ctx;
  long a = span(&v[*(const int *)x]), b = span(&v[*(const int *)y]);
  if (a != b)
    return a < b ? 1 : -1;
  return by_size(x, y, ctx);
}

/* Earliest first use first, then as by_size. */
static int by_start(const void *x, const void *y, void *ctx) {
  const nto_place_item *v = ctx;
  long a = v[*(const int *)x].seg[0][0], b = v[*(const int *)y].seg[0][0];
  if (a != b)
    return a < b ? -1 : 1;
  return by_size(x, y, ctx);
}

/* A placed item as place_in_order reads it: its bytes [lo, hi), its
 * segments, and a mask of the 64 equal parts of the time they touch
 * (disjoint masks: no overlap in time, without reading the segments). */
typedef struct slot {
  size_t lo, hi;
  uint64_t mask;
  long seg[2][2];
  int n_seg;
} slot;

/* The mask of v: bit i for the part [i w, (i + 1) w) of the time of T
 * instants, w = ceil(T / 64), that a segment of v touches. */
static uint64_t time_mask(const nto_place_item *v, long T) {
  long w = (T + 63) / 64;
  uint64_t mask = 0;
  for (int i = 0; i < v->n_seg; i++) {
    long a = v->seg[i][0] / w, b = v->seg[i][1] / w;
    mask |= (b >= 63 ? ~0ULL : (2ULL << b) - 1) & ~((1ULL << a) - 1);
  }
  return mask;
}

/* The placed items (placed[0..np)) overlapping slot s in time into
 * cand (room for np); returns their count. A long-lived s reads every
 * placed item, a short-lived one those the time index lists near it
 * (timeindex.h). */
static int overlapping(nto_time_index *x, const slot *placed, int np,
                       const slot *s, int *cand) {
  int n = 0;
  if (nto_time_index_span(x, s->seg, s->n_seg) > NTO_TIME_INDEX_LONG)
    for (; n < np; n++)
      cand[n] = n;
  else
    n = nto_time_index_near(x, s->seg, s->n_seg, cand);
  int nc = 0;
  for (int i = 0; i < n; i++) {
    const slot *u = &placed[cand[i]];
    if ((u->mask & s->mask) && segs_overlap(u->seg, u->n_seg, s->seg, s->n_seg))
      cand[nc++] = cand[i];
  }
  return nc;
}

/* qsort_r comparator: candidates by their offset (ctx: the slots). */
static int by_lo(const void *x, const void *y, void *ctx) {
  const slot *p = ctx;
  size_t a = p[*(const int *)x].lo, b = p[*(const int *)y].lo;
  return a < b ? -1 : a > b;
}

/* c[0..n) by their slots' offsets: insertion sort for the usual handful
 * (16 on average planning a 2000-layer net), qsort beyond. */
static void sort_by_lo(int *c, int n, slot *placed) {
  if (n > 32) {
    qsort_r(c, (size_t)n, sizeof *c, by_lo, placed);
    return;
  }
  for (int i = 1; i < n; i++) {
    int v = c[i], j = i;
    for (; j > 0 && placed[c[j - 1]].lo > placed[v].lo; j--)
      c[j] = c[j - 1];
    c[j] = v;
  }
}

/* Insert placed item i into by_off[0..n) (placed items by offset),
 * after those at the same offset. */
static void insert_by_lo(int *by_off, int n, const slot *placed, int i) {
  int lo = 0, hi = n;
  while (lo < hi) {
    int mid = lo + (hi - lo) / 2;
    if (placed[by_off[mid]].lo <= placed[i].lo)
      lo = mid + 1;
    else
      hi = mid;
  }
  memmove(&by_off[lo + 1], &by_off[lo], (size_t)(n - lo) * sizeof *by_off);
  by_off[lo] = i;
}

/* The placed items (placed[0..np)) overlapping slot s in time into cand,
 * by offset. Few candidates (the time index's, for a short-lived s) are
 * sorted; many (more than SORT_MAX, or a long-lived s, which reads every
 * placed item) are taken in by_off's order instead, filtered by a mark:
 * sorting them for every item was most of a deep net's placement. The
 * order among equal offsets does not change the sweep's result. */
#define SORT_MAX 64
static int overlapping_by_lo(nto_time_index *x, slot *placed, int np,
                             const int *by_off, unsigned char *mark,
                             const slot *s, int *cand) {
  int nc = overlapping(x, placed, np, s, cand);
  if (nc <= SORT_MAX) {
    sort_by_lo(cand, nc, placed);
    return nc;
  }
  for (int k = 0; k < nc; k++)
    mark[cand[k]] = 1;
  int m = 0;
  for (int k = 0; k < np && m < nc; k++)
    if (mark[by_off[k]]) {
      mark[by_off[k]] = 0;
      cand[m++] = by_off[k];
    }
  return m;
}

/* Place the n items idx[] in that order, each at the lowest offset free
 * of every placed item overlapping it in time: a sweep in offset order
 * over those items (placed[] in placement order, found through the time
 * index, by_off the placed ones by offset); returns the region, or
 * (size_t)-1 when out of memory. */
static size_t place_in_order(nto_place_item *items, const int *idx, int n,
                             long T, slot *placed) {
  nto_time_index x = {0};
  size_t region = 0;
  int *cand = malloc(((size_t)n + 1) * sizeof *cand);
  int *by_off = malloc(((size_t)n + 1) * sizeof *by_off);
  unsigned char *mark = calloc((size_t)n + 1, 1);
  if (!cand || !by_off || !mark || nto_time_index_init(&x, n, T) != 0)
    region = (size_t)-1;
  for (int i = 0; region != (size_t)-1 && i < n; i++) {
    nto_place_item *v = &items[idx[i]];
    slot *s = &placed[i];
    *s = (slot){.mask = time_mask(v, T), .n_seg = v->n_seg};
    memcpy(s->seg, v->seg, sizeof v->seg);
    int nc = overlapping_by_lo(&x, placed, i, by_off, mark, s, cand);
    size_t len = v->bytes, off = 0;
    for (int c = 0; c < nc; c++) {
      const slot *u = &placed[cand[c]];
      if (u->lo >= off + len)
        break; /* room below u */
      if (u->hi > off)
        off = u->hi;
    }
    v->offset = s->lo = off;
    s->hi = off + len;
    insert_by_lo(by_off, i, placed, i);
    int lng = nto_time_index_span(&x, s->seg, s->n_seg) > NTO_TIME_INDEX_LONG;
    if (nto_time_index_add(&x, i, s->seg, s->n_seg, lng) != 0)
      region = (size_t)-1;
    else if (off + len > region)
      region = off + len;
  }
  nto_time_index_free(&x);
  free(cand);
  free(by_off);
  free(mark);
  return region;
}

size_t nto_place(nto_place_item *v, int n, long T, size_t fit) {
  size_t len = (size_t)(n + 1) * sizeof(int);
  int *idx = malloc(len);
  size_t *best_off = malloc((size_t)(n + 1) * sizeof *best_off);
  slot *placed = malloc((size_t)(n + 1) * sizeof *placed);
  if (!idx || !placed || !best_off) {
    free(idx);
    free(placed);
    free(best_off);
    return (size_t)-1;
  }
  for (int k = 0; k < n; k++)
    idx[k] = k;
  int (*const order[])(const void *, const void *, void *) = {by_size, by_span,
                                                              by_start};
  enum { N_ORDER = sizeof order / sizeof *order };
  size_t region[N_ORDER] = {0};
  int best = 0, last = 0;
  for (int o = 0; o < N_ORDER; o++) {
    qsort_r(idx, (size_t)n, sizeof *idx, order[o], v);
    region[o] = place_in_order(v, idx, n, T, placed);
    last = o;
    if (region[o] == (size_t)-1)
      break; /* out of memory */
    if (o == 0 || region[o] < region[best]) {
      best = o;
      for (int k = 0; k < n; k++)
        best_off[k] = v[k].offset;
    }
    if (fit && region[best] <= fit)
      break; /* the first order within fit is the smallest so far */
  }
  /* the offsets are the last order's: the winner's, kept, go back */
  size_t r = region[last] == (size_t)-1 ? (size_t)-1 : region[best];
  if (r != (size_t)-1 && best != last)
    for (int k = 0; k < n; k++)
      v[k].offset = best_off[k];
  free(idx);
  free(placed);
  free(best_off);
  return r;
}
