/*
 * lookahead.h - how far ahead the offload engine reads: a frontier per
 * step, weighted by measured compute time (--prefetch time).
 *
 * A window of N steps reads step s+N's tensors at the start of step s, so
 * a read has one step's compute to hide behind, whatever the step costs.
 * In ResNet-18 at batch 10 a 9.4 MiB layer-4 weight is read behind a
 * batch-normalization or activation step of well under a millisecond: the
 * executor stalls although the disk is idle two thirds of the iteration.
 * The frontier upto[s] instead says which steps have entered (their reads
 * queued) by the start of step s, and it is chosen in time, not in steps.
 *
 * Model (the engine's, schedule.h): one read queue served in step order
 * (the onloader is FIFO); step j's reads take read_ms[j]; step j starts at
 *   T(j) = sum of step_ms[k], k < j,  period P = T(S),
 * and must not start before its reads are done. As late as possible: going
 * backwards from the far end of the unrolled passes,
 *   finish(j) = min(T(j), start(j+1)),  start(j) = finish(j) - read_ms[j],
 * so each read ends when its step starts or when the next read must start,
 * whichever is earlier (classic ALAP list scheduling on one machine).
 * Step j is entered at the start of the last step s with T(s) <= start(j),
 * but no later than at step j - N (the window), and no earlier than step
 * j - (S - 1) (a pass cannot hold a step twice). Then
 *   upto[s] = max { j : j enters at or before the start of step s },
 * counted from the start of the pass of s (values >= S are steps of the
 * next pass); upto[s] >= s + N, nondecreasing, upto[S-1] - S <= upto[0].
 *
 * If the reads of a pass take longer than its compute (read-bound, e.g.
 * slow flash), no frontier hides them and ALAP would pull reads ever
 * earlier; the read times are then scaled down to fit the period, so the
 * queue is kept busy without holding more than a pass's reads ahead.
 *
 * Pure logic, no allocation beyond the call: any thread.
 */
#ifndef NTO_LOOKAHEAD_H
#define NTO_LOOKAHEAD_H

#include "error.h"

/*
 * Frontier of S steps (S >= 2) for window n (clamped to [1, S-1]).
 * step_ms[s] >= 0: compute time of step s (ms); read_ms[j] >= 0: time of
 * the reads that bring step j in (ms; the caller adds its safety margin).
 * max_ahead: the frontier is kept within s + n + max_ahead (steps; < 0:
 * no bound beyond S - 1). Writes upto[0..S). Returns the largest
 * upto[s] - s - n (steps entered beyond the window), or NTO_ENOMEM.
 */
int nto_lookahead_frontier(int S, int n, const double *step_ms,
                           const double *read_ms, int max_ahead, int *upto);

#endif /* NTO_LOOKAHEAD_H */
