/*
 * floor.h - bench's region floor: the fastest a training pass can run
 * with its tensors in a region of a given size, a lower bound from the
 * plan, the step times and the swap device's bandwidth.
 *
 * Issue 6's floor, max(compute, read / read bandwidth + written / write
 * bandwidth), holds for any memory: it lets a read start any time before
 * its step. A region of R bytes cannot hold reads that far ahead. The
 * bound here takes R into account, phase by phase.
 *
 * A phase is a run of consecutive steps s..e of the pass. At the moment
 * step s starts, at most R bytes of tensors are in RAM (every tensor
 * buffer lives in the region, including reads in flight). Every tensor
 * whose content the phase reads before writing it (weights, optimizer
 * state, activations saved by earlier steps) must be in RAM at its use, so
 * at least need(s, e) - R of those bytes are read while the phase runs.
 * Likewise, at the moment step e ends at most R bytes are in RAM, so of
 * the tensors the phase writes whose content is needed after e
 * (persistent ones always; transient ones when their next use reads
 * them), at least dirty(s, e) - R bytes are written while it runs. Hence
 *   time(s..e) >= max(compute(s..e), io(s, e)),
 *   io = max(0, need - R) / read_bw + max(0, dirty - R) / write_bw
 * on one device whose reads and writes share its time (the model of
 * issue 6's floor), or the larger of the two terms on separate read and
 * write channels (a blkio throttle limits each direction on its own).
 * Phases that do not overlap bound disjoint spans of the pass, so the sum
 * of their bounds over any partition of 0..S-1 into phases bounds the
 * pass; the floor is the largest such sum (dynamic programming over the
 * phase ends, O(S^2) phases, each extended by one step incrementally).
 *
 * Not counted, so the floor stays a lower bound: the im2col workspace,
 * holds, placement (fragmentation of the region), and the priming reads
 * of the first pass (steady state). With R >= every tensor the floor is
 * the compute time.
 */
#ifndef NTO_APP_FLOOR_H
#define NTO_APP_FLOOR_H

#include "error.h"
#include "plan.h"

#include <stddef.h>

/* How reads and writes share the swap device. */
typedef enum {
  FLOOR_SHARED,   /* one device: read time + write time */
  FLOOR_SEPARATE, /* separate channels: the larger of the two */
} floor_channels;

typedef struct region_floor {
  double floor_ms;   /* the bound (ms) */
  double compute_ms; /* sum of the step times (ms) */
  /* The phase whose I/O exceeds its compute the most (-1, -1 and 0 when
   * no phase is I/O-bound): steps first..last, by excess_ms. */
  int first, last;
  double excess_ms;
  /* That phase's bytes: read at least, written at least. */
  double read_bytes, written_bytes;
} region_floor;

/*
 * Floor of the pass of plan p (finished; n_steps S >= 1) with step
 * compute times step_ms[0..S) (ms, >= 0), a region of `region` bytes,
 * and a device reading read_bytes_per_ms and writing write_bytes_per_ms
 * (both > 0) under `channels`. Fills *out. Returns 0, NTO_EINVAL (a bad
 * bandwidth or step time) or NTO_ENOMEM. Pure logic: any thread; p is only
 * read. Time: for each first step, one pass over the accesses of the
 * steps after it, each asking nto_plan_needed_after: O(S x accesses);
 * memory O(S + n_tensors).
 */
int floor_compute(const nto_plan *p, const double *step_ms, size_t region,
                  double read_bytes_per_ms, double write_bytes_per_ms,
                  floor_channels channels, region_floor *out, nto_err *err);

#endif /* NTO_APP_FLOOR_H */
