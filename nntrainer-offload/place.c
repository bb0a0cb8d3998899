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

/*
 * Which placed items live when: the time [0, T) cut into nb buckets of w
 * instants, each with the list of placed items touching it (nodes in one
 * pool); an item touching more than LONG_BUCKETS buckets goes to the list
 * `lng` instead, which every query reads. A query collects the placed
 * items whose segments overlap an item's: its cost follows the items alive
 * around it, not all the placed ones (planning a 2000-layer net placed
 * 17,000 buffers 270 times; the sweep over every placed buffer made that
 * quadratic).
 */
#define LONG_BUCKETS 64
typedef struct time_index {
  long w;
  int nb;
  int *head;             /* (nb) first node of a bucket, -1: none */
  int *node_item, *next; /* the pool */
  int n_node, cap_node;
  int *lng, n_lng;       /* (n) long-lived items */
  int *stamp;            /* (n) the last query that collected the item */
  int *cand;             /* (n) a query's candidates */
} time_index;

static void index_free(time_index *x) {
  free(x->head);
  free(x->node_item);
  free(x->next);
  free(x->lng);
  free(x->stamp);
  free(x->cand);
}

static int index_init(time_index *x, int n, long T) {
  memset(x, 0, sizeof *x);
  x->nb = (int)(T < 4096 ? (T > 0 ? T : 1) : 4096);
  x->w = (T + x->nb - 1) / x->nb;
  if (x->w < 1)
    x->w = 1;
  x->head = malloc((size_t)x->nb * sizeof *x->head);
  x->lng = malloc((size_t)(n + 1) * sizeof *x->lng);
  x->stamp = malloc((size_t)(n + 1) * sizeof *x->stamp);
  x->cand = malloc((size_t)(n + 1) * sizeof *x->cand);
  if (!x->head || !x->lng || !x->stamp || !x->cand)
    return -1;
  for (int b = 0; b < x->nb; b++)
    x->head[b] = -1;
  for (int i = 0; i <= n; i++)
    x->stamp[i] = -1;
  return 0;
}

/* Buckets v's segments touch; *nb_out their count. */
static long buckets_of(const time_index *x, const long seg[2], long *a) {
  *a = seg[0] / x->w;
  long b = seg[1] / x->w;
  if (b >= x->nb)
    b = x->nb - 1;
  return b - *a + 1;
}

static long span_buckets(const time_index *x, const slot *s) {
  long total = 0, a;
  for (int i = 0; i < s->n_seg; i++)
    total += buckets_of(x, s->seg[i], &a);
  return total;
}

/* Item k (slot s) into the index. Returns 0 or -1 when out of memory. */
static int index_add(time_index *x, int k, const slot *s) {
  if (span_buckets(x, s) > LONG_BUCKETS) {
    x->lng[x->n_lng++] = k;
    return 0;
  }
  for (int i = 0; i < s->n_seg; i++) {
    long a, nb = buckets_of(x, s->seg[i], &a);
    for (long b = a; b < a + nb; b++) {
      if (x->n_node == x->cap_node) {
        int cap = x->cap_node ? 2 * x->cap_node : 4096;
        int *ni = realloc(x->node_item, (size_t)cap * sizeof *ni);
        if (!ni)
          return -1;
        x->node_item = ni;
        int *nx = realloc(x->next, (size_t)cap * sizeof *nx);
        if (!nx)
          return -1;
        x->next = nx;
        x->cap_node = cap;
      }
      x->node_item[x->n_node] = k;
      x->next[x->n_node] = x->head[b];
      x->head[b] = x->n_node++;
    }
  }
  return 0;
}

/* Candidate k for query q: collected once, if its time overlaps s's. */
static void collect(time_index *x, const slot *placed, int k, int q,
                    const slot *s, int *nc) {
  if (x->stamp[k] == q)
    return;
  x->stamp[k] = q;
  const slot *u = &placed[k];
  if ((u->mask & s->mask) && segs_overlap(u->seg, u->n_seg, s->seg, s->n_seg))
    x->cand[(*nc)++] = k;
}

/* The placed items (of np) overlapping slot s in time into x->cand;
 * returns their count. A long-lived s reads every placed item. */
static int overlapping(time_index *x, const slot *placed, int np, int q,
                       const slot *s) {
  int nc = 0;
  if (span_buckets(x, s) > LONG_BUCKETS) {
    for (int k = 0; k < np; k++)
      collect(x, placed, k, q, s, &nc);
    return nc;
  }
  for (int i = 0; i < s->n_seg; i++) {
    long a, nb = buckets_of(x, s->seg[i], &a);
    for (long b = a; b < a + nb; b++)
      for (int e = x->head[b]; e >= 0; e = x->next[e])
        collect(x, placed, x->node_item[e], q, s, &nc);
  }
  for (int j = 0; j < x->n_lng; j++)
    collect(x, placed, x->lng[j], q, s, &nc);
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

/* Place the n items idx[] in that order, each at the lowest offset free
 * of every placed item overlapping it in time: a sweep in offset order
 * over those items (placed[] in placement order, found through the time
 * index); returns the region, or (size_t)-1 when out of memory. */
static size_t place_in_order(nto_place_item *items, const int *idx, int n,
                             long T, slot *placed) {
  time_index x;
  size_t region = 0;
  if (index_init(&x, n, T) != 0) {
    index_free(&x);
    return (size_t)-1;
  }
  for (int i = 0; i < n; i++) {
    nto_place_item *v = &items[idx[i]];
    slot *s = &placed[i];
    *s = (slot){.mask = time_mask(v, T), .n_seg = v->n_seg};
    memcpy(s->seg, v->seg, sizeof v->seg);
    int nc = overlapping(&x, placed, i, i, s);
    sort_by_lo(x.cand, nc, placed);
    size_t len = v->bytes, off = 0;
    for (int c = 0; c < nc; c++) {
      const slot *u = &placed[x.cand[c]];
      if (u->lo >= off + len)
        break; /* room below u */
      if (u->hi > off)
        off = u->hi;
    }
    v->offset = s->lo = off;
    s->hi = off + len;
    if (index_add(&x, i, s) != 0) {
      index_free(&x);
      return (size_t)-1;
    }
    if (off + len > region)
      region = off + len;
  }
  index_free(&x);
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
    if (region[o] == (size_t)-1)
      break; /* out of memory */
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
  size_t r = region[last] == (size_t)-1 ? (size_t)-1 : region[best];
  if (r != (size_t)-1 && best != last &&
      place_in_order(v, best_idx, n, T, placed) == (size_t)-1)
    r = (size_t)-1;
  free(idx);
  free(placed);
  free(best_idx);
  return r;
}
