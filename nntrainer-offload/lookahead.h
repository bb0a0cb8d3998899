/*
 * lookahead.h - how far ahead the offload engine reads: a frontier per
 * step, weighted by measured compute time (the tuner's read-ahead by time
 * and room, tuner.h), and
 * its fit into a memory limit.
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

#include <stddef.h>
#include <stdint.h>

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

/*
 * Fit a frontier into a memory target: each step enters as early as the
 * desired frontier asks where the resident bytes stay within target, else
 * as early as they allow, else where the plain window enters it.
 *
 * desired[0..S): a frontier for window n (nto_lookahead_frontier's
 * output: valid, s + n <= desired[s] <= s + S - 1, nondecreasing across
 * the wrap). live[0..3S): resident bytes at the instants 3s, 3s+1, 3s+2
 * of the plain window's steady-state pass (schedule.h nto_schedule.live);
 * enter_bytes[j]: bytes read when step j enters in that schedule
 * (nto_schedule.enter_read); gain[j] >= 0: what an earlier entry of step
 * j is worth (the caller's choice; tuner.c: the stall the plain window
 * leaves before j, ms); target: bytes the resident set must stay within.
 *
 * Model: step j entering at step e instead of e' > e holds enter_bytes[j]
 * more over the instants [3e, 3e'). Reads are queued in step order, so j
 * entering at e brings every earlier step not yet entered by e in with
 * it, and their bytes count too. Steps are taken by decreasing gain (0:
 * not moved); each enters at the earliest step from its desired entry on
 * where the model stays within target at every instant, and the profile
 * is updated before the next. The model is an estimate (placement can
 * fragment, a tensor read earlier may change what others share): the
 * caller builds the schedule and checks its region (tuner.c retries with
 * a lower target).
 *
 * Writes upto[0..S) (valid; s + n where nothing moved). Returns the number
 * of steps that enter earlier than at the plain window, or NTO_ENOMEM.
 * Pure logic: any thread.
 */
int nto_lookahead_fit(int S, int n, const int *desired, const size_t *live,
                      const uint64_t *enter_bytes, const double *gain,
                      size_t target, int *upto);

#endif /* NTO_LOOKAHEAD_H */
