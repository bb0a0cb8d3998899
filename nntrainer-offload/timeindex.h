/*
 * timeindex.h - which items live when: the time [0, T) of a pass cut into
 * buckets, each listing the items (buffers, residency intervals) whose
 * segments touch it, so that a query for the items alive around a given
 * time reads those buckets instead of every item. A long-lived item goes
 * to a list that every query reads (listing it in every bucket would cost
 * more than reading it once). Used by the placer (place.c) and the
 * spreading of a schedule's placement (schedule.c), where a scan of every
 * item per item made planning quadratic in depth (a 2000-layer net: some
 * 17,000 buffers placed about 270 times).
 *
 * Pure; one thread per index.
 */
#ifndef NTO_TIMEINDEX_H
#define NTO_TIMEINDEX_H

/* Buckets an item may touch before it goes to the long-lived list. */
#define NTO_TIME_INDEX_LONG 64

typedef struct nto_time_index {
  long w;           /* instants per bucket */
  int nb;           /* buckets, at most 4096 */
  int *head;        /* (nb) first node of a bucket, -1: none */
  int *node, *next; /* the pool of (item, next node) */
  int n_node, cap_node;
  int *lng, n_lng; /* long-lived items */
  int *stamp;      /* (n) the last query that collected an item */
  int query;       /* queries so far */
} nto_time_index;

/* An empty index for items 0..n-1 over time [0, T). Returns 0, or -1 when
 * out of memory (free it either way). */
int nto_time_index_init(nto_time_index *x, int n, long T);
void nto_time_index_free(nto_time_index *x);

/* Buckets the segments seg[0..n_seg) ([first, last] instants, first <=
 * last < T) touch, summed. */
long nto_time_index_span(const nto_time_index *x, const long (*seg)[2],
                         int n_seg);

/* Item k, living in seg[0..n_seg), into its buckets, or with lng into the
 * long-lived list. Returns 0 or -1 when out of memory. */
int nto_time_index_add(nto_time_index *x, int k, const long (*seg)[2],
                       int n_seg, int lng);

/* The items in the buckets that the ranges r[0..nr) ([first, last]
 * instants) touch, and the long-lived ones, each once, into out (room for
 * every item); returns their count. A superset of the items alive in the
 * ranges: callers check the times exactly. */
int nto_time_index_near(nto_time_index *x, const long (*r)[2], int nr,
                        int *out);

#endif /* NTO_TIMEINDEX_H */
