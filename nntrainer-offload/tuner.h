/*
 * tuner.h - the residency policy: every decision about what stays in RAM
 * and when reads start, taken before training and between training
 * iterations (never inside one), from the plan (steps.h), the schedules
 * it gives (schedule.h) and what the last iterations measured.
 *
 * What it decides:
 *  - the window: a fixed N, all resident, the largest N whose tensor
 *    region + workspace fits a memory budget, or (auto) N adapted after
 *    every iteration from its stall and the I/O threads' idle time
 *    (autowin.h), capped by the budget (under which, with read-ahead by
 *    time, it seeks the shortest iteration);
 *  - the read-ahead: when each step's reads are queued. By steps (step
 *    s+N's at step s), or by time: after training iterations 1 and 3,
 *    from their measured step times and read bandwidth, each step's reads
 *    are queued early enough to be done before it runs (a frontier,
 *    lookahead.h), fitted into the budget; or within the window's own
 *    region ("room"), kept only while the device has idle time for the
 *    traffic it adds. The default: by time under a budget and for auto,
 *    room for a fixed window without a budget (docs/design.md);
 *  - whether tensors stay resident between uses where the region has room
 *    (schedule.h keep; on by default);
 *  - whether cheap convolutions' outputs are recomputed (tensors.h
 *    nto_recompute auto): when offloading, unless the budget then refuses
 *    the model.
 * The training loop calls nto_tuner_after_pass after every training
 * iteration and reports what changed (nto_tune_report).
 *
 * Threads: the executor's, between passes.
 */
#ifndef NTO_TUNER_H
#define NTO_TUNER_H

#include "autowin.h"
#include "offload.h"
#include "plan.h"
#include "tensors.h"

#include <stddef.h>
#include <stdint.h>

/* How the window is chosen. */
typedef enum {
  NTO_WINDOW_FIXED,  /* window: 0 all resident, N >= 1 */
  NTO_WINDOW_BUDGET, /* all resident if that fits the budget, else the
                        largest N whose region + workspace fits */
  NTO_WINDOW_AUTO,   /* adapt N after every iteration (autowin.h), up to
                        the largest N within the budget (none: the largest
                        N that needs less than everything resident); from
                        N = 1, or, under a given budget (not the memory
                        limit) with read-ahead by time, from that largest
                        N for the shortest iteration */
} nto_window_mode;

/* When the engine reads a step's tensors (see above). AUTO: TIME under a
 * budget or with NTO_WINDOW_AUTO, else ROOM. The others are for tests and
 * experiments. */
typedef enum {
  NTO_PREFETCH_AUTO,
  NTO_PREFETCH_STEPS,
  NTO_PREFETCH_TIME,
  NTO_PREFETCH_ROOM,
} nto_prefetch;

typedef struct nto_tuner_opts {
  nto_window_mode window_mode;
  int window;                /* NTO_WINDOW_FIXED: 0 all resident, N >= 1 */
  size_t memory_budget;      /* bytes, 0: none. A hard bound on the tensor
                                region (or all tensors when resident) +
                                the workspace */
  const char *budget_source; /* names the budget in errors, e.g.
                                "--memory-budget"; NULL: "memory budget" */
  size_t memory_limit;       /* bytes, 0: none. Without a budget: the room
                                for the tensor region + workspace under
                                the memory the process may use (a cgroup
                                limit, MemAvailable). When everything
                                resident would not fit it, it acts as a
                                budget: all resident becomes the largest
                                window within it, a fixed window above it
                                is refused, auto is capped by it */
  const char *limit_source;  /* names the limit in errors and in
                                nto_tuner_limited */
  size_t overhead;           /* bytes of the process beyond its tensors
                                and workspace that the budget or limit as
                                the user gave it includes (memory_budget
                                and memory_limit are net of it); messages
                                add it back to every figure. 0: they are
                                bounds on tensors + workspace alone */
  nto_prefetch prefetch;
  int no_keep;   /* 1: evict a tensor as soon as it leaves the window */
  int plan_only; /* 1: no window is resolved (summary), unless a
                    memory_budget is given: then the window it gives, or
                    the refusal */
} nto_tuner_opts;

/* What the tuner decides over: the model's plans and memory. */
typedef struct nto_tuner_model {
  const nto_plan *plans[2]; /* training, inference (borrowed) */
  size_t workspace;         /* bytes (page-rounded) of the workspace */
  size_t all_resident;      /* bytes with everything resident */
  int batch;                /* for messages */
} nto_tuner_model;

/* One training iteration of the adaptive window. */
typedef struct nto_window_sample {
  int window;            /* N the iteration ran with */
  double iteration_ms;   /* its wall time */
  double measured_ms;    /* the part after the priming steps (the first N
                            steps after a window change, whose reads no
                            window hides): what the controller judges */
  double stall_ms;       /* executor waiting for reads in that part */
  double io_busy_ms;     /* the busier I/O thread's busy time (whole) */
  double device_ms;      /* a request at the device (whole) */
  int judged;            /* 0: N kept without judging: priming took most of
                            the iteration, it primed with read-ahead by
                            time (autowin.h), or before_read_ahead */
  int before_read_ahead; /* 1: read-ahead by time or room, and the
                            iteration ran before any step time was
                            measured (not judged) */
} nto_window_sample;

/* A training pass as the tuner reads it: the engine's counters before and
 * after it, and its wall time. */
typedef struct nto_pass_sample {
  nto_offload_stats before, after;
  double wall_ms;
} nto_pass_sample;

/* What nto_tuner_after_pass changed. */
typedef struct nto_tune_report {
  int window_from, window_to; /* equal: the window stayed */
  int frontier;      /* 1: a read frontier was (re)computed and put in force */
  int ahead;         /* steps the frontier reads beyond the window */
  int room_declined; /* 1: room's read-ahead did not pay: reads by steps */
} nto_tune_report;

typedef struct nto_tuner nto_tuner;

/* Are cheap convolutions' outputs recomputed with recompute mode r under
 * options o (tensors.h nto_recompute)? */
int nto_tuner_recompute_convs(const nto_tuner_opts *o, nto_recompute r);

/*
 * The tuner of model tm (its plans borrowed) with options o, and the
 * window to start with (nto_tuner_window). Unless o->plan_only, resolves
 * the window from the mode, the window and the budget: NTO_ECONFIG when
 * the budget cannot be met ("--memory-budget 8.0 MiB is below the minimum
 * this model needs at batch 10: 24.3 MiB (window 1's tensor region plus
 * the im2col workspace of 3.8 MiB)", or naming the largest window that
 * fits), with *refused = 1. Returns 0, NTO_ECONFIG or NTO_ENOMEM; *out is
 * NULL on error.
 */
/* When the memory limit (nto_tuner_opts.memory_limit) bound the plan: 1,
 * with limit_source; else 0. Caller's thread. */
int nto_tuner_limited(const nto_tuner *t, const char **source);

int nto_tuner_create(nto_tuner **out, const nto_tuner_model *tm,
                     const nto_tuner_opts *o, int *refused, nto_err *err);
void nto_tuner_free(nto_tuner *t);

/* The window decided (0: all resident); the engine options that are the
 * tuner's (no_keep) into oo. */
int nto_tuner_window(const nto_tuner *t);
/* The largest window the run may use: the adaptive window's upper bound
 * (NTO_WINDOW_AUTO), else nto_tuner_window. Caller's thread. */
int nto_tuner_window_bound(const nto_tuner *t);
void nto_tuner_engine_opts(const nto_tuner *t, nto_offload_opts *oo);

/* The engine the decisions go to (NULL: all resident). */
void nto_tuner_attach(nto_tuner *t, nto_offload *engine);

/*
 * After a training pass that ran as s describes: record it, adapt the
 * window (auto), measure step times (after passes 1 and 3) and put the
 * read frontier in force. Under a budget (or a limit acting as one), a
 * pass after which the window or frontier is recomputed first drains the
 * engine and gives its region's pages back (nto_offload_release), so that
 * the schedules built then stay within the budget, and trims the heap
 * after them. What changed goes to *r. Returns 0, NTO_ENOMEM or the
 * engine's NTO_EIO. Between passes.
 */
int nto_tuner_after_pass(nto_tuner *t, const nto_pass_sample *s,
                         nto_tune_report *r, nto_err *err);

/*
 * What a window of n steps (n >= 1) keeps in RAM: the tensor region (the
 * larger of the two passes' schedules; with upto, the training pass's
 * read frontier, NULL: s + n) plus the workspace, in bytes: what a memory
 * budget is checked against. Keeping tensors resident and spreading the
 * placement never raise it (schedule.h), so this is also the engine's
 * bound. Returns 0 or NTO_ENOMEM.
 */
int nto_tuner_need(const nto_tuner *t, int n, const int *upto, size_t *bytes,
                   nto_err *err);

/* What training with window n plans (summary): the tensor region +
 * workspace (nto_tuner_need) and the bytes the engine's schedule reads
 * and writes per training pass. */
typedef struct nto_window_plan {
  size_t need;
  uint64_t read_bytes, written_bytes;
} nto_window_plan;
int nto_tuner_window_plan(const nto_tuner *t, int n, nto_window_plan *wp,
                          nto_err *err);

/*
 * Put window n (>= 1) with training frontier upto[0..S) (NULL: s + n) in
 * force, checked against the budget like a window: NTO_EINVAL when all
 * resident or n < 1; NTO_ECONFIG when it does not fit the budget; else as
 * nto_offload_set_frontier. Read-ahead by time or room replaces it by
 * its own after the next window change or measured iteration.
 */
int nto_tuner_set_frontier(nto_tuner *t, int n, const int *upto, nto_err *err);

/*
 * The read frontier of read-ahead by time and room for window n (>= 1;
 * clamped to S - 1) from step times step_ms[0..S) (ms) and a read
 * bandwidth bytes_per_ms (> 0): the tuner computes it after training
 * passes 1 and 3 from what it measured; tests give their own. Step j's
 * read time is the bytes that bring it in at bytes_per_ms, with a margin.
 * The frontier is fitted so that the region + workspace stay within
 * limit (bytes; 0: none) and, with room, within the plain window's own:
 * with the lookahead's target lowered a few times, then, if no target
 * fits once placed, with only some steps moved, chosen in batches by gain
 * (the stall the plain window leaves before a step). Writes upto[0..S)
 * and *moved, the steps entering earlier than in the plain window (0:
 * the plain window stands). Returns 0, NTO_EINVAL (n < 1, S < 2 or no
 * bandwidth) or NTO_ENOMEM. Builds a schedule per try (at most 4 + 48).
 */
int nto_tuner_frontier(const nto_tuner *t, int n, const double *step_ms,
                       double bytes_per_ms, int room, size_t limit, int *upto,
                       int *moved, nto_err *err);

/* The share of a pass's wall time the device may be busy with room's
 * traffic: an SSD with room's bytes stays well below it, a 45/25 MB/s
 * flash device is busy the whole pass (docs/design.md). */
#define NTO_ROOM_DEVICE_SHARE 0.9

/*
 * Does room's read-ahead pay for window n with frontier upto[0..S)? Within
 * the same region it takes room that keeping tensors resident would use,
 * so the schedule may move more bytes. *pays = 1 when it moves no more
 * bytes (read + written) than without it, or when its bytes at the
 * device's rate in a measured pass (pass_bytes moved in device_ms, the
 * time a request was at the device) keep the device busy for at most
 * NTO_ROOM_DEVICE_SHARE of that pass's wall time pass_ms. Nothing
 * measured: *pays = 0 for more bytes. Returns 0 or NTO_ENOMEM.
 */
int nto_tuner_room_pays(const nto_tuner *t, int n, const int *upto,
                        double pass_ms, double device_ms, uint64_t pass_bytes,
                        int *pays, nto_err *err);

/* 1 when room's read-ahead was last declined (it did not pay). */
int nto_tuner_room_declined(const nto_tuner *t);

/* The adaptive window's record: one sample per training iteration (NULL
 * and *n = 0 unless NTO_WINDOW_AUTO); valid until the next
 * nto_tuner_after_pass. */
const nto_window_sample *nto_tuner_window_trace(const nto_tuner *t, int *n);

/* "steps", "time", "room" (AUTO: "auto"). */
const char *nto_prefetch_name(nto_prefetch p);

/* The read-ahead in use (never AUTO). */
nto_prefetch nto_tuner_prefetch(const nto_tuner *t);

#endif /* NTO_TUNER_H */
