/*
 * place.h - the placer: byte offsets in one region for buffers that live
 * at known times, so that buffers alive at the same time never share
 * bytes. One placer serves the offload schedule (schedule.h: residency
 * intervals in the cyclic time of a pass) and the all-resident arena
 * (arena.h: each transient tensor from its first to its last step).
 *
 * Greedy: each buffer, in order, goes to the lowest offset free of every
 * buffer already placed that overlaps it in time. Three orders are tried
 * and the smallest region kept (the earliest order on a tie): largest
 * first, longest-lived first, earliest first use first. TFLite's arena
 * planner tries "greedy by size" and "greedy by breadth" alike; no order
 * is best for every profile (ResNet-18 b32's window-1 region is 33.7 MiB
 * by size, 40.5 by lifetime and 32.9 by first use, MobileNetV2 224 b10's
 * 137.9 MiB by size and 180.9 by first use).
 *
 * Pure; any thread.
 */
#ifndef NTO_PLACE_H
#define NTO_PLACE_H

#include <stddef.h>

/* One buffer: its size and when it lives, as one or two segments
 * [first, last] of instants in a time of T instants (two: a residency
 * interval that wraps around the end of a pass). */
typedef struct nto_place_item {
  size_t bytes;
  long seg[2][2];
  int n_seg;     /* 1 or 2 */
  size_t offset; /* out: its offset in the region */
} nto_place_item;

/*
 * Place v[0..n) in time [0, T) and set each offset. With fit > 0, the
 * first order whose region is within fit bytes is kept without trying the
 * others. Returns the region's size in bytes (the largest end), or
 * (size_t)-1 when out of memory (offsets then undefined). Time per
 * order: for each buffer, the placed buffers alive around it (found
 * through an index of time buckets; long-lived ones are read by every
 * query) sorted by offset and swept; O(n^2) only when most buffers live
 * long. Test: test_place (the same offsets as the plain quadratic sweep).
 */
size_t nto_place(nto_place_item *v, int n, long T, size_t fit);

#endif /* NTO_PLACE_H */
