/*
 * schedule.h - the offload engine's static schedule: every residency
 * decision and every buffer address, computed once per plan and window.
 *
 * The window's decisions (window.h) depend only on the plan and N, so they
 * are made once, ahead of time, by running the window over a few passes
 * with modelled I/O (reads complete at once, a step's writes during the
 * next step). The steady-state pass is periodic: its actions are recorded
 * per step, and every residency interval (from the action that brings a
 * tensor in to the one that releases its buffer, across the wrap into the
 * next pass) gets a fixed byte offset in one tensor region, placed
 * greedily like an arena (each at the lowest offset free of every
 * interval that overlaps it in time), in three orders (largest,
 * longest-lived, earliest first), the smallest region kept. The engine
 * then only replays the lists: addresses never collide in the model,
 * pages are touched once and reused every iteration, and the region is the
 * resident peak plus the placement's fragmentation, known before training
 * starts.
 *
 * Frontier. By default step s+N enters (its reads are queued) at the start
 * of step s. A frontier upto[] (lookahead.h) generalizes this: at the start
 * of step s every step up to upto[s] has entered, counted from the start
 * of the pass of s (upto[s] >= S: steps of the next pass); several steps
 * may enter at one step's start and none at another's. upto[s] = s + N is
 * the default.
 *
 * Spreading. The greedy placement puts each buffer at the lowest free
 * offset, often in pages the model has a write release one instant
 * before; on the device that write is still running and the step that
 * needs the buffer waits for it. The engine's schedule (spread) then
 * moves each interval, in order, to the offset within the region whose
 * pages are free longest before it starts and after it ends (the largest
 * smallest gap to the intervals sharing its bytes, counted up to 24
 * instants). Offsets only: the region, the actions and the bytes stay.
 * Then each interval
 * whose pages another one leaves or takes within those 24 instants gets a
 * second offset (nto_sched_act alt), chosen the same way among the offsets
 * that do not overlap its own and that no other interval overlapping it in
 * time takes: where the planned pages are still held by a write, the
 * engine may put the buffer there.
 *
 * Time within a pass: step s has three instants, 3s (its start: the
 * lookahead's reads, and the buffers of its own tensors that have no
 * content yet), 3s+1 (the previous step's writes complete) and 3s+2 (its
 * end: evictions). A buffer released at time r can be reused by an
 * allocation at time a > r.
 */
#ifndef NTO_SCHEDULE_H
#define NTO_SCHEDULE_H

#include "plan.h"
#include "window.h"

#include <stddef.h>
#include <stdint.h>

typedef struct nto_sched_act {
  int t;              /* tensor */
  unsigned char kind; /* begin lists: NTO_ACT_LOAD (content from the swap
                         file) or NTO_ACT_ALLOC (no content yet); end lists:
                         NTO_ACT_WRITE, NTO_ACT_DROP or NTO_ACT_FREE */
  unsigned char keep; /* WRITE: keep the buffer (the tensor re-enters the
                         window before the write completes) */
  size_t offset;      /* LOAD/ALLOC: the buffer's offset in the region */
  size_t alt;         /* LOAD/ALLOC: a second offset, free of every other
                         buffer while this one is resident (no other
                         interval's offset overlaps it then), used when the
                         pages at `offset` are still held (a write in
                         flight); SIZE_MAX: none */
} nto_sched_act;

typedef struct nto_schedule {
  int n_steps; /* S of the plan */
  int window;  /* N, clamped to [1, S-1] */
  int *upto;   /* S: the frontier (steps entered by the start of step s,
                  counted from its pass's start), s + N <= upto[s] <= s+S-1 */
  int n_lead;  /* steps of a pass entered before it starts: upto[S-1]-S+1
                  (N without a frontier) */
  uint64_t *enter_read; /* S: bytes read when step j enters (steady) */
  /* Actions at the start of step s (reading in the steps that enter then,
   * up to upto[s], and allocating step s's tensors without content):
   * begin[begin_first[s] .. begin_first[s+1]); at its end:
   * end[end_first[s] .. end_first[s+1]). */
  int *begin_first, *end_first;
  nto_sched_act *begin, *end;
  /* Before the first step after a drain: the buffers the steady state
   * holds when a pass starts (the tensors of steps 0 .. n_lead-1, and
   * persistent ones whose write at the end of a pass is reclaimed across
   * the wrap). */
  nto_sched_act *prime;
  int n_prime;
  size_t region;          /* bytes of the tensor region */
  size_t peak;            /* resident bytes at the busiest instant */
  size_t *live;           /* 3S: resident bytes at each instant 3s, 3s+1,
                             3s+2 of the steady-state cycle */
  int n_kept;             /* keep: gaps kept resident */
  uint64_t read_bytes;    /* per steady-state pass */
  uint64_t written_bytes; /* per steady-state pass */
  unsigned char *written; /* per tensor: some pass writes it (swap slot) */
} nto_schedule;

/* What a schedule is built with. */
typedef struct nto_schedule_req {
  int window;      /* N >= 1 (clamped to [1, S-1]) */
  const int *upto; /* the frontier upto[0..S), NULL: s + N; else made
                      valid first: raised to s + N, lowered to s + S - 1,
                      made nondecreasing across the wrap */
  int keep;        /* keep tensors resident through gaps (see Keeping) */
  int spread;      /* spread the placement (see Spreading): the engine's */
} nto_schedule_req;

/*
 * The schedule of plan p (borrowed during the call) for rq: the one entry
 * for sizing (a memory budget, summary: keep and spread off, the cheapest),
 * for what summary reports of the engine's traffic (keep as the engine)
 * and for the engine itself (keep and spread as it runs). The region is
 * the same for every rq with the same plan, window and frontier: keeping
 * and spreading never raise it, and a kept or spread schedule reports the
 * plain placement's region, within which its offsets lie. So a window's
 * memory has one answer.
 *
 * Keeping. The window evicts a tensor as soon as no step of the window
 * uses it, although the region is sized by the busiest instant and has
 * room elsewhere (ResNet-18 b10 window 1: the last convolution's 9 MiB
 * weight leaves after its forward step and is read back a few cheap steps
 * later for its backward). A gap is a tensor t and two consecutive uses a
 * < b in the cyclic step order (b >= S: the next pass; persistent tensors
 * only) whose content b needs and which the window does not keep. Keeping
 * it resident = the steps a+1 .. b-1 hold t (plan.h nto_plan_add_holds).
 * Gaps are taken in order of memory-time per byte saved (shortest first,
 * then the largest tensor). One is a candidate when t plus the bytes
 * resident at every instant where t is out stay within the plain
 * schedule's peak; candidates are tried 32 at a time: a batch is kept when
 * the schedule with it has a region no larger than the plain window's and
 * moves fewer bytes (read + written), else each half is tried in turn.
 * Results of training cannot change: only residency does. The action
 * lists are those of the plan with holds; the engine runs them against p
 * unchanged. sc->n_kept counts the gaps kept. Cost: a plain build per
 * batch of 32 gaps plus one per half tried.
 *
 * Spreading costs one more build and O(intervals^2).
 *
 * Returns 0, NTO_ENOMEM, or NTO_EINVAL if the modelled passes are not
 * periodic (a programming error). sc is zeroed first; free with
 * nto_schedule_free. Any single thread.
 */
int nto_schedule_make(nto_schedule *sc, const nto_plan *p,
                      const nto_schedule_req *rq, nto_err *err);
void nto_schedule_free(nto_schedule *sc);

#endif /* NTO_SCHEDULE_H */
