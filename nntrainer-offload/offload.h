/*
 * offload.h - the offload engine: a sliding window of N steps resident,
 * everything else in a swap file, moved by two I/O threads.
 *
 * Threads. The executor is the caller's thread (it runs the steps and is
 * the only BLAS caller). The engine adds the onloader, which allocates
 * buffers and reads tensors through its own I/O queue (io_uring or psync,
 * io/iobackend.h), and the offloader, which writes tensors through its own
 * queue and releases their buffers. The executor waits only for the reads
 * of the step it is about to run (a stall); offloading never waits on
 * onloading.
 *
 * Per-step state machine (window.h decides the tensor traffic):
 *
 *   SWAPPED --enter--> WAIT_FOR_EXEC --all reads done--> READY_FOR_EXEC
 *   READY_FOR_EXEC --run, leave--> WAIT_FOR_OFF --writes done--> SWAPPED
 *   WAIT_FOR_OFF --enter (window wraps onto it again)--> WAIT_FOR_EXEC
 *
 * Any other transition is a programming error (assert).
 *
 * A pass (a training iteration or an inference pass) is driven through
 * the residency interface (residency.h, nto_offload_residency): begin(s),
 * run s, end(s) for every step. While passes of the same mode follow each
 * other, the window runs on into the next pass without a pause; a change
 * of mode first drains the window.
 *
 * Checksums: every write of a tensor to the swap file records a checksum
 * of its bytes (computed by the offloader before it submits the write, or
 * by the residency's store), and every read is verified against it on the
 * onloader before the tensor is published resident. Tensors still "zero"
 * (never written) have none. opts.checksum chooses; NTO_SWAP_CHECKSUM=0|1
 * in the environment overrides it (a debugging knob).
 *
 * Errors: the first I/O error (a failed or short-ended transfer, or a
 * checksum mismatch) is recorded by the I/O thread and returned by the
 * next begin, end or drain as NTO_EIO with a message naming the
 * tensor, its layer, size and offset, e.g. "swap read of tensor
 * conv1:weight (layer conv1, 4096 bytes at offset 0): checksum mismatch
 * (stored 0x..., read 0x...)"; the engine then refuses further steps.
 *
 * Test hook: NTO_FAULT=OP:N:KIND in the environment (iobackend.h,
 * nto_io_fault_parse; e.g. read:5:flip, write:3:enospc) sets the I/O
 * fault injection when the engine is created; a malformed value is an
 * NTO_EINVAL error of nto_offload_create.
 */
#ifndef NTO_OFFLOAD_H
#define NTO_OFFLOAD_H

#include "error.h"
#include "iobackend.h"
#include "plan.h"
#include "residency.h"
#include "tensor.h"

#include <stddef.h>
#include <stdint.h>

typedef struct nto_offload nto_offload;

/* Step states (see the diagram above). */
typedef enum {
  NTO_STEP_SWAPPED,
  NTO_STEP_WAIT_FOR_EXEC,
  NTO_STEP_READY_FOR_EXEC,
  NTO_STEP_WAIT_FOR_OFF,
} nto_step_state;

/* "SWAPPED", "WAIT_FOR_EXEC", ... */
const char *nto_step_state_name(nto_step_state s);

/* Called on every step state transition, from the executor or the
 * offloader thread, with the engine's lock held: keep it short and do not
 * call into the engine. mode: the plan index (0 train, 1 inference). */
typedef void (*nto_state_log_fn)(void *user, int mode, int step,
                                 nto_step_state from, nto_step_state to);

/* What a trace event records (nto_trace_fn). */
typedef enum {
  NTO_TRACE_READ,  /* the onloader read tensor id */
  NTO_TRACE_WRITE, /* the offloader wrote tensor id */
} nto_trace_kind;

/* Called when a swap read or write completed without error, from the I/O
 * thread that did it, without the engine's lock: it may take its own
 * lock, but must not call into the engine. id: the tensor; t0_ms, t1_ms:
 * submission and completion, CLOCK_MONOTONIC in ms. */
typedef void (*nto_trace_fn)(void *user, nto_trace_kind kind, int id,
                             double t0_ms, double t1_ms);

/* Whether swapped tensors carry a checksum when opts.checksum is 0: off,
 * because hashing every transfer costs a few percent of an iteration at
 * small windows (docs/design.md). */
#define NTO_OFFLOAD_CHECKSUM_DEFAULT 0

typedef struct nto_offload_opts {
  int window;                 /* N >= 1 */
  const char *swap_dir;       /* NULL or "": $TMPDIR, else /tmp */
  nto_io_kind io;             /* AUTO: io_uring, psync where it is refused */
  int no_direct;              /* 1: buffered swap file (page cache) */
  unsigned depth;             /* requests in flight per queue; 0: 16 */
  nto_state_log_fn log_state; /* NULL: off */
  void *log_user;
  nto_trace_fn trace; /* NULL: off */
  void *trace_user;
  int no_keep;  /* 1: evict a tensor as soon as it leaves the window,
                   even where the region has room to keep it until its
                   next use (default 0: keep there; schedule.h keep) */
  int checksum; /* checksums of swapped tensors: 1 on, -1 off, 0 the
                   default (NTO_OFFLOAD_CHECKSUM_DEFAULT); the environment
                   variable NTO_SWAP_CHECKSUM=0|1 overrides this */
  int no_fixed; /* 1: io_uring requests without registered buffers (by
                   default each I/O thread registers the tensor region,
                   iobackend.h nto_io_register_buffer) */
} nto_offload_opts;

/* Counters since creation. */
typedef struct nto_offload_stats {
  int window;               /* N in use (clamped to the plan) */
  int ahead;                /* training frontier: the most steps entered
                               beyond the window (0 without a frontier) */
  const char *io;           /* "io_uring" or "psync" */
  int fixed;                /* io_uring: both I/O threads have registered
                               the tensor region for their requests (0
                               before their first I/O, with psync,
                               no_fixed, or when the kernel refused:
                               fixed_note says why) */
  char fixed_note[160];     /* why registering the region failed, or "" */
  int direct;               /* swap file opened with O_DIRECT */
  const char *swap_dir;     /* directory of the swap file */
  uint64_t swap_bytes;      /* swap file size */
  double stall_ms;          /* executor waiting for reads */
  double prime_stall_ms;    /* the part of stall_ms spent waiting for the
                               reads that prime an empty window (the first
                               N steps after creation, a drain or a window
                               change), which no lookahead can hide */
  double prime_ms;          /* executor wall time of those first N steps
                               (waits included) */
  double read_busy_ms;      /* onloader: time with jobs queued or in
                               flight, up to now */
  double write_busy_ms;     /* offloader: the same */
  double device_busy_ms;    /* time with a request of either I/O thread at
                               the I/O backend (handed over, not yet
                               reaped), up to now: the device is idle
                               outside it */
  uint64_t read_bytes;      /* read from the swap file */
  uint64_t written_bytes;   /* written to the swap file */
  int checksum;             /* swapped tensors carry a checksum */
  double checksum_ms;       /* time spent computing checksums (both I/O
                               threads and synchronous store/fetch) */
  long relocated;           /* buffers put at their second offset because
                               their planned pages were still held
                               (nto_sched_act alt) */
  size_t peak_resident;     /* peak bytes of tensor buffers in use */
  size_t planned_peak;      /* the schedule's peak (schedule.h) */
  size_t region;            /* bytes of the tensor region: every buffer
                               lives here, so this bounds tensor RAM */
  size_t region_max;        /* the largest region since creation: the
                               bound over a run whose window changed */
  uint64_t planned_read;    /* predicted bytes read per training pass */
  uint64_t planned_written; /* predicted bytes written per training pass */
  char note[160];           /* e.g. why io_uring was not used; "" if none */
} nto_offload_stats;

/*
 * Create the engine over the model's tensor table t[0..n_tensors) (borrowed;
 * the engine sets t[i].data and t[i].state). plans[0] is the training plan,
 * plans[1] the inference plan (both borrowed, same tensors). Every tensor
 * starts without content: persistent ones as zeros until the residency's
 * store gives them a value. Sizes the swap file from the window's simulation
 * (every persistent tensor, plus every transient one the window may
 * write), opens it (io/swap.h) and starts the two I/O threads. Returns 0,
 * NTO_EIO / NTO_EUNSUPPORTED (swap file, io_uring asked for explicitly
 * but refused) or NTO_ENOMEM, with a message. Executor thread.
 */
int nto_offload_create(nto_offload **out, nto_tensor *t, int n_tensors,
                       const nto_plan *plans[2], const nto_offload_opts *o,
                       nto_err *err);

/*
 * The engine as the executor's residency (residency.h). Owned by the
 * engine; its free is nto_offload_free. Executor thread.
 *   begin(pass, s): extends the window (the steps up to the frontier
 *     enter: s + N, or upto[s] of nto_offload_set_frontier), then waits
 *     until every tensor of step s is resident;
 *   end(s): evicts what the window no longer holds (writes go to the
 *     offloader);
 *   drain: waits for in-flight reads, writes every dirty persistent
 *     tensor, frees the rest, waits for the writes; afterwards no tensor
 *     is resident (also the way out of a pass abandoned midway);
 *   store, fetch, zero: synchronous access to a persistent tensor's
 *     content (they drain first): store writes it to the swap file with
 *     its checksum, fetch reads it back (verified against the checksum),
 *     zero makes it zeros without I/O.
 * Each returns 0, the recorded I/O error (NTO_EIO naming the tensor: a
 * failed transfer or a checksum mismatch) or NTO_ENOMEM.
 */
nto_residency *nto_offload_residency(nto_offload *o);

/* Drain, stop the threads, close the swap file (nothing is left on disk),
 * release all buffers. NULL is ignored. Executor thread. */
void nto_offload_free(nto_offload *o);

/*
 * Put window N (>= 1; clamped to the plan like the window at creation)
 * and a read frontier for the training plan (schedule.h, lookahead.h:
 * upto[0..S), copied, S the training plan's steps; NULL for s + N) in
 * force; the inference plan keeps s + N. Nothing happens when both are
 * the ones in force. Else drains, builds both schedules, gives the
 * tensors the new schedules may write a swap slot (the file grows; slots
 * never move) and remaps the tensor region at its new size; the next pass
 * primes the new window (its first reads are not hidden). Results stay
 * bit-identical: only residency changes. Returns 0; NTO_EIO (the recorded
 * I/O error, or the disk has no room for the larger file: the message
 * names the size); NTO_ENOMEM. On error the old window stays in force.
 * Executor thread, between passes.
 */
int nto_offload_set_frontier(nto_offload *o, int window, const int *upto,
                             nto_err *err);

/*
 * Drain (as the residency's drain) and give the tensor region's pages back
 * to the kernel; the region stays mapped, the next pass faults its pages
 * in again and primes the window. For work between passes whose own
 * memory must not come on top of a full region (the tuner's schedule
 * builds under a memory budget). Returns 0 or the recorded I/O error.
 * Executor thread, between passes.
 */
int nto_offload_release(nto_offload *o, nto_err *err);

/*
 * Compute time of every step of the training plan in its last pass (ms,
 * from the moment the step was ready to its end: waits for reads
 * excluded; 0 for steps not run yet) into ms[0..S); returns S. Executor
 * thread.
 */
int nto_offload_step_times(nto_offload *o, double *ms);

/* Counters; any thread that owns the engine (executor). */
void nto_offload_get_stats(nto_offload *o, nto_offload_stats *st);

#endif /* NTO_OFFLOAD_H */
