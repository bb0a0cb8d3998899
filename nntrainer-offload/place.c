/* place.c - the placer. See place.h. */
#include "place.h"

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

/* A placed item as place_in_order's sweep reads it: its bytes [lo, hi),
 * its segments, and a mask of the 64 equal parts of the time they touch
 * (disjoint masks: no overlap in time, without reading the segments).
 * Kept contiguous and sorted by lo, so the sweep reads memory in order
 * instead of chasing each item. */
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

/* Place the n items idx[] in that order, each at the lowest offset free
 * of every placed item overlapping it in time (a sweep over the placed
 * ones, kept sorted by offset in placed[]); returns the region. */
static size_t place_in_order(nto_place_item *items, const int *idx, int n,
                             long T, slot *placed) {
  size_t region = 0;
  int np = 0;
  for (int i = 0; i < n; i++) {
    nto_place_item *v = &items[idx[i]];
    size_t len = v->bytes, off = 0;
    uint64_t mask = time_mask(v, T);
    int at = np; /* where v goes in the offset order */
    for (int j = 0; j < np; j++) {
      const slot *u = &placed[j];
      if (u->lo >= off + len)
        break; /* the sweep has found room below u */
      if (u->hi > off && (u->mask & mask) &&
          segs_overlap(u->seg, u->n_seg, v->seg, v->n_seg))
        off = u->hi;
    }
    v->offset = off;
    while (at > 0 && placed[at - 1].lo > off)
      at--;
    memmove(placed + at + 1, placed + at, (size_t)(np - at) * sizeof *placed);
    placed[at] =
        (slot){.lo = off, .hi = off + len, .mask = mask, .n_seg = v->n_seg};
    memcpy(placed[at].seg, v->seg, sizeof v->seg);
    np++;
    if (off + len > region)
      region = off + len;
  }
  return region;
}

size_t nto_place(nto_place_item *v, int n, long T, size_t fit) {
  size_t len = (size_t)(n + 1) * sizeof(int);
  int *idx = malloc(len), *best_idx = malloc(len);
  slot *placed = malloc((size_t)(n + 1) * sizeof *placed);
  if (!idx || !placed || !best_idx) {
    free(idx);
    free(placed);
    free(best_idx);
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
    if (o == 0 || region[o] < region[best]) {
      best = o;
      memcpy(best_idx, idx, (size_t)n * sizeof *idx);
    }
    if (fit && region[best] <= fit)
      break; /* the first order within fit is the smallest so far */
  }
  /* the offsets are the last order's; the winner's sequence, placed
   * again, gives its region exactly (the orders tie on equal keys, so
   * sorting again could give another sequence) */
  if (best != last)
    place_in_order(v, best_idx, n, T, placed);
  free(idx);
  free(placed);
  free(best_idx);
  return region[best];
}
