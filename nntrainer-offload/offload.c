/*
 * offload.c - the offload engine. See offload.h.
 *
 * DESIGN
 * The decisions are static (schedule.h): per step, the buffers to bring
 * in (each at a planned offset of one tensor region) and the tensors to
 * write, drop or free. The engine replays them; only the I/O timing is
 * dynamic. One mutex (mu) guards the per-tensor runtime state (dirty,
 * zero, writing, the data/state fields of the tensor table), the page
 * owners of the region, both job queues, the step states and the
 * counters. Three threads take it:
 *   - the executor (caller) queues the step's begin actions for the
 *     onloader in offload_begin and waits on cv_exec until its step's
 *     tensors are resident and not being written; in offload_end it
 *     marks what the step wrote dirty, queues writes for the offloader and
 *     releases dropped/freed buffers itself;
 *   - the onloader pops LOAD/ALLOC jobs in queue (step) order, waits until
 *     the pages of the planned buffer are free (a release the model placed
 *     earlier may still be in flight: an earlier write) and the tensor's
 *     own previous write is done, claims the pages, reads through its own
 *     queue (io/iobackend.h, created on that thread) or zero-fills,
 *     verifies what it read against the tensor's checksum (when
 *     checksums are on), and publishes the tensor as resident;
 *   - the offloader pops WRITE jobs, computes the checksum of the
 *     tensor's buffer (when on), submits the write, and on completion
 *     records the checksum, releases the buffer (unless the schedule
 *     keeps it) and advances the writing step to SWAPPED.
 * Waits cannot deadlock: a load waits only for releases the model placed
 * before it, i.e. executor releases of steps already run, or writes,
 * which complete on their own.
 * Jobs are popped in batches and the I/O itself runs without the lock.
 * Ownership of a buffer moves with its job: the executor never touches a
 * tensor that is not RESIDENT, and an I/O thread touches a buffer only
 * between popping its job and completing it. The first I/O error (or
 * checksum mismatch) is kept in `ferr`; every later executor call returns
 * it, and waits end on it. Checksums (`sum`, valid where `has_sum`) live
 * in RAM only; the expected one travels with the LOAD job, read under the
 * lock when the onloader claims the buffer (the tensor's previous write is
 * done by then).
 * Each I/O thread ends when `stop` is set and it has nothing queued or in
 * flight. I/O threads block all signals.
 */
#include "offload.h"
#include "schedule.h"
#include "swap.h"

#include <assert.h>
#include <errno.h>
#include <limits.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>
#include <zlib.h>

#define BATCH 64 /* jobs popped / completions reaped per round */

typedef struct job {
  int t;         /* tensor */
  int kind;      /* nto_act_kind: LOAD, ALLOC or WRITE */
  int keep;      /* WRITE: keep the buffer afterwards */
  int step;      /* WRITE: the step whose end decided it, -1 for a drain */
  size_t off;    /* LOAD/ALLOC: offset in the region */
  int claimed;   /* LOAD/ALLOC: its pages were claimed when queued */
  size_t alt;    /* LOAD/ALLOC: second offset (nto_sched_act), SIZE_MAX */
  double t0;     /* submission time, ms (trace) */
  int check;     /* WRITE: sum was computed; LOAD: verify against sum */
  uint64_t sum;  /* WRITE: checksum of the bytes written; LOAD: the one
                    stored for the swap copy being read */
  double sum_ms; /* time spent computing it */
} job;

typedef struct fifo {
  job *v;
  int cap, head, n;
} fifo;

enum { ONLOADER = 0, OFFLOADER = 1 };

/* One I/O thread: the onloader (reads, LOAD and ALLOC jobs) or the
 * offloader (writes). Guarded by the engine's mu. */
typedef struct io_worker {
  struct nto_offload *o;
  int writer;        /* ONLOADER or OFFLOADER */
  fifo q;            /* its jobs, in queue (step) order */
  pthread_cond_t cv; /* signalled when q grows, on stop and on reg_gen */
  int inflight;      /* jobs queued or submitted */
  job *jobs;         /* one slot per tensor: one job in flight each */
  /* Registered buffers (io_main): the thread registers the region with
   * its ring before its first request and drops that registration when
   * asked (drop_fixed_locked: reg_gen moved past its reg_ack) before the
   * region's pages are unmapped or released. */
  int fixed;      /* its ring has the region registered */
  int fixed_once; /* it has registered it at least once */
  unsigned reg_ack;
  double busy_ms;    /* time with jobs queued or in flight, closed periods */
  double busy_since; /* start of the open busy period, or -1 */
  pthread_t th;
  int started;
} io_worker;

struct nto_offload {
  nto_residency res; /* first: the residency interface */
  nto_tensor *t;
  int n_t;
  const nto_plan *plans[2];
  int mode; /* plan being replayed */
  nto_schedule sched[2];
  nto_offload_opts opts;

  nto_swap *swap;
  nto_io_kind io_kind;
  char note[160];
  char *region; /* tensor buffers, at planned offsets */
  size_t region_bytes;
  size_t region_max;      /* the largest region mapped (window changes) */
  int *owner;             /* per region page: tensor holding it, or -1 */
  size_t in_use, peak;    /* bytes of claimed pages */
  long relocated;         /* buffers placed at their second offset */
  nto_io_req *req;        /* per tensor: at most one I/O in flight per tensor */
  int64_t *offset;        /* per tensor: swap file offset, -1 if none */
  unsigned char *dirty;   /* per tensor: RAM newer than the swap file */
  unsigned char *zero;    /* per tensor: content is zeros, nothing on disk */
  unsigned char *writing; /* per tensor: a write is in flight */
  unsigned char *loading; /* per tensor: a LOAD/ALLOC is queued */
  uint64_t *sum;          /* per tensor: checksum of its swap copy */
  unsigned char *has_sum; /* per tensor: sum is valid (a write with
                             checksums completed since the last one
                             that failed) */
  int checksum;           /* checksums on (opts, NTO_SWAP_CHECKSUM) */
  uint64_t swap_bytes;

  unsigned char *step_state; /* per step of the current plan */
  int *step_writes;          /* per step: its writes not yet complete */
  long entered, executed;    /* steps since the window was primed */
  int primed;
  int *upto;       /* the training plan's frontier as given (has_upto) */
  int has_upto;    /* 0: none, s + N */
  double *step_ms; /* per training step: compute time, last pass */
  double ready_t;  /* when the step being run became ready */

  pthread_mutex_t mu;
  pthread_cond_t cv_exec, cv_mem;
  io_worker io[2]; /* ONLOADER, OFFLOADER */
  int stop, failed, io_dead;
  unsigned reg_gen;     /* asks the I/O threads to drop their registrations */
  char fixed_note[160]; /* the first refusal, or "" */
  nto_err ferr;

  double stall_ms, prime_stall_ms;
  double prime_ms, prime_t0; /* executor time in the priming steps */
  /* The device (nto_offload_stats device_busy_ms): requests of either
   * thread handed to the I/O backend and not yet reaped. dev_mu alone
   * guards these (taken with mu held or not, never the reverse). */
  pthread_mutex_t dev_mu;
  int dev_inflight;
  double dev_ms, dev_since;
  uint64_t read_bytes, written_bytes;
  double sum_ms; /* I/O threads and sync I/O: computing checksums */
};

const char *nto_step_state_name(nto_step_state s) {
  static const char *const names[] = {"SWAPPED", "WAIT_FOR_EXEC",
                                      "READY_FOR_EXEC", "WAIT_FOR_OFF"};
  return (unsigned)s < 4 ? names[s] : "?";
}

static double now_ms(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return ts.tv_sec * 1e3 + ts.tv_nsec / 1e6;
}

static int fifo_init(fifo *q, int cap) {
  q->v = malloc((size_t)cap * sizeof *q->v);
  q->cap = cap;
  q->head = q->n = 0;
  return q->v ? 0 : -1;
}

static void fifo_push(fifo *q, job j) {
  assert(q->n < q->cap);
  q->v[(q->head + q->n++) % q->cap] = j;
}

static int fifo_pop(fifo *q, job *out, int max) {
  int k = 0;
  while (k < max && q->n > 0) {
    out[k++] = q->v[q->head];
    q->head = (q->head + 1) % q->cap;
    q->n--;
  }
  return k;
}

/* ---- step states (lock held) ---- */

static int legal(nto_step_state from, nto_step_state to) {
  return (from == NTO_STEP_SWAPPED && to == NTO_STEP_WAIT_FOR_EXEC) ||
         (from == NTO_STEP_WAIT_FOR_EXEC && to == NTO_STEP_READY_FOR_EXEC) ||
         (from == NTO_STEP_READY_FOR_EXEC && to == NTO_STEP_WAIT_FOR_OFF) ||
         (from == NTO_STEP_WAIT_FOR_OFF && to == NTO_STEP_SWAPPED) ||
         (from == NTO_STEP_WAIT_FOR_OFF && to == NTO_STEP_WAIT_FOR_EXEC);
}

static void set_state(nto_offload *o, int s, nto_step_state to) {
  nto_step_state from = o->step_state[s];
  assert(legal(from, to));
  o->step_state[s] = (unsigned char)to;
  if (o->opts.log_state)
    o->opts.log_state(o->opts.log_user, o->mode, s, from, to);
}

/* "tensor L:W (layer L, N bytes at offset O)" for messages: tensor names
 * are "<layer>:<what>". */
static void describe(const nto_offload *o, int t, char *buf, size_t n) {
  const char *name = o->t[t].name, *colon = strchr(name, ':');
  if (colon)
    snprintf(buf, n, "tensor %s (layer %.*s, %zu bytes at offset %lld)", name,
             (int)(colon - name), name, o->t[t].bytes, (long long)o->offset[t]);
  else
    snprintf(buf, n, "tensor %s (%zu bytes at offset %lld)", name,
             o->t[t].bytes, (long long)o->offset[t]);
}

/* The message of a failed swap transfer of t (res: a negative errno). */
static int io_error(const nto_offload *o, nto_err *err, int t, const char *what,
                    int res) {
  char d[200];
  describe(o, t, d, sizeof d);
  if (res == -ENOSPC || res == -EDQUOT)
    return nto_err_set(err, NTO_EIO,
                       "swap %s of %s failed: %s (swap file of %llu bytes in "
                       "%s: free space there or choose another --swap-dir)",
                       what, d, strerror(-res),
                       (unsigned long long)o->swap_bytes,
                       o->swap ? nto_swap_dir(o->swap) : "?");
  return nto_err_set(err, NTO_EIO, "swap %s of %s failed: %s", what, d,
                     strerror(-res));
}

/* The message of a swap read of t whose checksum does not match. */
static int sum_error(const nto_offload *o, nto_err *err, int t, uint64_t stored,
                     uint64_t got) {
  char d[200];
  describe(o, t, d, sizeof d);
  return nto_err_set(err, NTO_EIO,
                     "swap read of %s: checksum mismatch (stored 0x%016llx, "
                     "read 0x%016llx): the swap file's content changed",
                     d, (unsigned long long)stored, (unsigned long long)got);
}

/* The first I/O error wins (a failed transfer: res a negative errno; a
 * checksum mismatch: res 0, sums stored and got); wakes everyone. Lock
 * held. */
static void record_error(nto_offload *o, int t, const char *what, int res,
                         uint64_t stored, uint64_t got) {
  if (!o->failed) {
    if (res < 0)
      io_error(o, &o->ferr, t, what, res);
    else
      sum_error(o, &o->ferr, t, stored, got);
  }
  o->failed = 1;
  pthread_cond_broadcast(&o->cv_exec);
  pthread_cond_broadcast(&o->cv_mem);
}

static int failure(nto_offload *o, nto_err *err) {
  if (err)
    *err = o->ferr;
  return o->ferr.code ? o->ferr.code : NTO_EIO;
}

/* ---- the region (lock held) ---- */

static size_t first_page(const nto_offload *o, const void *buf) {
  return (size_t)((const char *)buf - o->region) / NTO_PAGE;
}

/* Are the pages of [off, off + bytes) free? */
static int pages_free(const nto_offload *o, size_t off, size_t bytes) {
  for (size_t p = off / NTO_PAGE, e = (off + bytes) / NTO_PAGE; p < e; p++)
    if (o->owner[p] >= 0)
      return 0;
  return 1;
}

static void set_pages(nto_offload *o, size_t first, size_t bytes, int who) {
  for (size_t p = first, e = first + bytes / NTO_PAGE; p < e; p++)
    o->owner[p] = who;
}

/* Release tensor t's buffer and give it state st. */
static void release(nto_offload *o, int t, nto_res_state st) {
  set_pages(o, first_page(o, o->t[t].data), o->t[t].bytes, -1);
  o->in_use -= o->t[t].bytes;
  o->t[t].data = NULL;
  o->t[t].state = st;
  pthread_cond_broadcast(&o->cv_mem);
}

/* Claim [off, off + bytes) for tensor t. Lock held. */
static void claim_pages(nto_offload *o, int t, size_t off) {
  set_pages(o, off / NTO_PAGE, o->t[t].bytes, t);
  o->in_use += o->t[t].bytes;
  if (o->in_use > o->peak)
    o->peak = o->in_use;
}

/* May tensor t's buffer, planned at off, go to its second offset alt
 * (nto_sched_act) instead: one exists, its pages are free, and t's own
 * previous write is done (that write reads the old buffer)? */
static int second_free(const nto_offload *o, int t, size_t alt, size_t off) {
  return !o->writing[t] && alt != SIZE_MAX && alt != off &&
         pages_free(o, alt, o->t[t].bytes);
}

/* Where tensor t's buffer goes for begin action a: its planned pages, or
 * its second offset when those are still held (a write in flight: the
 * model had it done) and the second's pages are free. The second offset
 * is free of every other planned buffer while t is resident (schedule.h),
 * and pages taken there are claimed at once, so no later claim of another
 * tensor can wait for them. Returns the offset; *now: claim at once. */
static size_t place_begin(nto_offload *o, const nto_sched_act *a, int *now) {
  *now = !o->writing[a->t] && pages_free(o, a->offset, o->t[a->t].bytes);
  if (*now || !second_free(o, a->t, a->alt, a->offset))
    return a->offset;
  *now = 1;
  o->relocated++;
  return a->alt;
}

/* Queue the begin actions a[0..n) (bringing a step in). A buffer without
 * content whose pages are already free is claimed here at once: no
 * round trip through the onloader. */
static void queue_loads(nto_offload *o, const nto_sched_act *a, int n) {
  int queued = 0;
  for (int i = 0; i < n; i++) {
    int t = a[i].t;
    /* not resident, or its buffer is still being written out */
    assert(!o->t[t].data || o->writing[t]);
    assert(a[i].kind == NTO_ACT_ALLOC || o->offset[t] >= 0 || o->zero[t]);
    int now = 0;
    size_t off = place_begin(o, &a[i], &now);
    o->t[t].data = (float *)(o->region + off);
    if (now)
      claim_pages(o, t, off);
    if (now && a[i].kind == NTO_ACT_ALLOC && !o->zero[t]) {
      o->t[t].state = NTO_RES_RESIDENT;
      continue;
    }
    o->loading[t] = 1;
    o->t[t].state = NTO_RES_NONE; /* not ready */
    fifo_push(&o->io[ONLOADER].q, (job){.t = t,
                                        .kind = a[i].kind,
                                        .step = -1,
                                        .off = off,
                                        .claimed = now,
                                        .alt = a[i].alt});
    o->io[ONLOADER].inflight++;
    queued++;
  }
  if (queued)
    pthread_cond_signal(&o->io[ONLOADER].cv);
}

/* Write t (dirty) and release or keep its buffer afterwards. */
static void queue_write(nto_offload *o, int t, int keep, int step) {
  assert(o->offset[t] >= 0); /* the schedule gave it a slot */
  o->writing[t] = 1;
  o->dirty[t] = 0;
  size_t off = (size_t)((char *)o->t[t].data - o->region);
  fifo_push(&o->io[OFFLOADER].q, (job){.t = t,
                                       .kind = NTO_ACT_WRITE,
                                       .keep = keep,
                                       .step = step,
                                       .off = off});
  o->io[OFFLOADER].inflight++;
  if (step >= 0)
    o->step_writes[step]++;
  pthread_cond_signal(&o->io[OFFLOADER].cv);
}

/* Evict t: write it if it holds content the swap file lacks, else
 * release it at once (keep: the schedule keeps the buffer). */
static void evict(nto_offload *o, int t, int keep, int step) {
  int persistent = o->plans[o->mode]->persistent[t];
  if (o->dirty[t] && (persistent || o->offset[t] >= 0))
    queue_write(o, t, keep, step);
  else if (!keep)
    release(o, t, persistent && !o->zero[t] ? NTO_RES_SWAPPED : NTO_RES_NONE);
}

/* Carry out the end actions a[0..n) of step `step`. */
static void apply_end(nto_offload *o, const nto_sched_act *a, int n, int step) {
  for (int i = 0; i < n; i++) {
    int t = a[i].t;
    switch (a[i].kind) {
    case NTO_ACT_WRITE:
      evict(o, t, a[i].keep, step);
      break;
    case NTO_ACT_DROP: /* the model's copy is current: so is ours */
      assert(!o->dirty[t]);
      evict(o, t, 0, step);
      break;
    case NTO_ACT_FREE: /* dead (transient) or still all zeros */
      o->dirty[t] &= o->plans[o->mode]->persistent[t];
      evict(o, t, 0, step);
      break;
    }
  }
}

/* ---- I/O threads ---- */

/* A LOAD/ALLOC of j->t finished (res 0 or -errno; 1: the bytes read do
 * not match the stored checksum, which was got). */
static void complete_load(nto_offload *o, const job *j, int res, uint64_t got) {
  pthread_mutex_lock(&o->mu);
  o->loading[j->t] = 0;
  o->sum_ms += j->sum_ms;
  if (res != 0) {
    record_error(o, j->t, "read", res < 0 ? res : 0, j->sum, got);
  } else {
    o->t[j->t].state = NTO_RES_RESIDENT;
    if (j->kind == NTO_ACT_LOAD && !o->zero[j->t])
      o->read_bytes += o->t[j->t].bytes;
  }
  o->io[ONLOADER].inflight--;
  pthread_cond_broadcast(&o->cv_exec);
  pthread_mutex_unlock(&o->mu);
}

/* A WRITE finished (res 0 or -errno). */
static void complete_write(nto_offload *o, const job *j, int res) {
  pthread_mutex_lock(&o->mu);
  int t = j->t;
  o->writing[t] = 0;
  o->sum_ms += j->sum_ms;
  o->has_sum[t] = 0; /* a failed write leaves the swap copy unknown */
  if (res < 0) {
    record_error(o, t, "write", res, 0, 0);
  } else {
    o->sum[t] = j->sum;
    o->has_sum[t] = (unsigned char)j->check;
    o->written_bytes += o->t[t].bytes;
    o->zero[t] = 0;
    if (!j->keep) { /* a load may already wait for it with a new buffer */
      set_pages(o, j->off / NTO_PAGE, o->t[t].bytes, -1);
      o->in_use -= o->t[t].bytes;
      if (!o->loading[t]) {
        o->t[t].data = NULL;
        o->t[t].state = NTO_RES_SWAPPED;
      }
    }
  }
  if (j->step >= 0 && --o->step_writes[j->step] == 0 &&
      o->step_state[j->step] == NTO_STEP_WAIT_FOR_OFF)
    set_state(o, j->step, NTO_STEP_SWAPPED);
  o->io[OFFLOADER].inflight--;
  pthread_cond_broadcast(&o->cv_exec);
  pthread_cond_broadcast(&o->cv_mem);
  pthread_mutex_unlock(&o->mu);
}

/* Onloader: wait until job j's pages are free and the tensor's previous
 * write is done, then claim the pages. Returns 0, or -1 after a failure
 * elsewhere. Decides what fills the buffer: *how = 0 nothing (a transient
 * about to be written), 1 zeros, 2 a read. */
static int claim(nto_offload *o, job *j, int *how) {
  int t = j->t;
  size_t bytes = o->t[t].bytes;
  pthread_mutex_lock(&o->mu);
  while (!o->failed && !j->claimed &&
         (o->writing[t] || !pages_free(o, j->off, bytes))) {
    if (second_free(o, t, j->alt, j->off)) {
      j->off = j->alt; /* the planned pages are still held */
      o->t[t].data = (float *)(o->region + j->off);
      o->relocated++;
      break;
    }
    pthread_cond_wait(&o->cv_mem, &o->mu);
  }
  int rc = o->failed ? -1 : 0;
  if (rc == 0) {
    if (!j->claimed)
      claim_pages(o, t, j->off);
    *how = o->zero[t] ? 1 : j->kind == NTO_ACT_LOAD ? 2 : 0;
    j->check = *how == 2 && o->checksum && o->has_sum[t];
    j->sum = o->sum[t];
  }
  pthread_mutex_unlock(&o->mu);
  return rc;
}

/* ---- checksums ---- */

/* zlib's CRC-32 of n bytes (zlib is a dependency already; a faster hash
 * would be a new one, and checksums are off by default: every hash tried
 * cost more than 2% of an iteration). */
static uint64_t checksum(const void *buf, size_t n) {
  return crc32_z(crc32_z(0L, Z_NULL, 0), buf, n);
}

/* n requests handed to the I/O backend (n > 0) or reaped (n < 0): the
 * device's busy time opens when the first is handed and closes when the
 * last comes back. Either I/O thread, with or without mu. */
static void device_count(nto_offload *o, int n) {
  pthread_mutex_lock(&o->dev_mu);
  if (o->dev_inflight == 0 && n > 0)
    o->dev_since = now_ms();
  o->dev_inflight += n;
  assert(o->dev_inflight >= 0);
  if (o->dev_inflight == 0 && n < 0)
    o->dev_ms += now_ms() - o->dev_since;
  pthread_mutex_unlock(&o->dev_mu);
}

/* Start job j on queue io: returns 1 if a request was submitted, 0 if the
 * job completed at once. */
static int start_job(nto_offload *o, nto_io *io, job *j) {
  size_t bytes = o->t[j->t].bytes;
  j->check = 0;
  j->sum_ms = 0;
  if (j->kind != NTO_ACT_WRITE) {
    int how = 0;
    if (claim(o, j, &how) != 0) { /* may move j->off to its second offset */
      complete_load(o, j, -ECANCELED, 0);
      return 0;
    }
    if (how < 2) {
      if (how == 1)
        memset(o->region + j->off, 0, bytes);
      complete_load(o, j, 0, 0);
      return 0;
    }
  } else if (o->checksum) { /* the buffer is ours until the write is done */
    double t0 = now_ms();
    j->sum = checksum(o->region + j->off, bytes);
    j->check = 1;
    j->sum_ms = now_ms() - t0;
  }
  nto_io_req *r = &o->req[j->t];
  memset(r, 0, sizeof *r);
  r->op = j->kind == NTO_ACT_WRITE ? NTO_IO_WRITE : NTO_IO_READ;
  r->buf = o->region + j->off;
  r->len = bytes;
  r->offset = o->offset[j->t];
  r->user = j;
  j->t0 = now_ms();
  device_count(o, 1);
  nto_io_submit(io, r);
  return 1;
}

/* Complete job j with its request's result. A read is verified against
 * the checksum of its swap copy first, before the tensor is published
 * resident. */
static void finish(nto_offload *o, int writer, job *j, nto_io_req *r) {
  int res = r ? r->result : -EIO;
  uint64_t got = 0;
  if (!writer && res == 0 && j->check) {
    double t0 = now_ms();
    got = checksum(r->buf, r->len);
    j->sum_ms += now_ms() - t0;
    res = got == j->sum ? 0 : 1;
  }
  if (o->opts.trace && res == 0)
    o->opts.trace(o->opts.trace_user, writer ? NTO_TRACE_WRITE : NTO_TRACE_READ,
                  j->t, j->t0, now_ms());
  if (writer)
    complete_write(o, j, res);
  else
    complete_load(o, j, res, got);
}

/* The queue could not be created or failed: record why. Lock held. */
static void io_broken(nto_offload *o, const nto_err *e) {
  if (!o->failed)
    o->ferr = *e;
  o->failed = 1;
  o->io_dead = 1;
  pthread_cond_broadcast(&o->cv_exec);
}

/* Send queued requests and complete those done (waiting for one if
 * wait). Returns their number or a negative errno. */
static int reap(nto_offload *o, nto_io *io, int writer, int wait) {
  nto_io_req *done[BATCH];
  nto_io_flush(io);
  int nd = nto_io_reap(io, done, BATCH, wait);
  if (nd > 0)
    device_count(o, -nd);
  for (int i = 0; i < nd; i++)
    finish(o, writer, done[i]->user, done[i]);
  return nd;
}

/* Register the region with the thread's queue (jobs are queued, so the
 * region stays: it changes only while drained). Returns 0 when the kernel
 * refused (the thread then stops trying; the first reason is kept), else
 * 1. Lock held, dropped during the registration. */
static int fix(io_worker *w, nto_io *io) {
  nto_offload *o = w->o;
  char *base = o->region;
  size_t len = o->region_bytes;
  nto_err e = {0};
  pthread_mutex_unlock(&o->mu);
  int rc = nto_io_register_buffer(io, base, len, &e);
  pthread_mutex_lock(&o->mu);
  if (rc != 0 && !o->fixed_note[0])
    snprintf(o->fixed_note, sizeof o->fixed_note, "%.150s", e.msg);
  w->fixed = rc == 0 && nto_io_kind_of(io) == NTO_IO_URING;
  w->fixed_once |= w->fixed;
  w->reg_ack = o->reg_gen;
  return rc == 0;
}

/* Drop the thread's registration (drop_fixed_locked asked). Lock held,
 * dropped during the call. */
static void unfix(io_worker *w, nto_io *io) {
  nto_offload *o = w->o;
  if (w->fixed) {
    pthread_mutex_unlock(&o->mu);
    nto_io_register_buffer(io, NULL, 0, NULL);
    pthread_mutex_lock(&o->mu);
  }
  w->fixed = 0;
  w->reg_ack = o->reg_gen;
  pthread_cond_broadcast(&o->cv_exec);
}

/* One I/O thread: pop jobs, submit, reap, complete; until stop. */
static void *io_main(void *arg) {
  io_worker *w = arg;
  nto_offload *o = w->o;
  int writer = w->writer;
  fifo *q = &w->q;
  pthread_cond_t *cv = &w->cv;
  job *jobs = w->jobs; /* slot per tensor: one job in flight each */
  nto_io *io = NULL;
  nto_err e = {0};
  int rc =
      nto_io_create(&io, o->io_kind, nto_swap_fd(o->swap), o->opts.depth, &e);
  int pending = 0, try_fixed = rc == 0 && !o->opts.no_fixed &&
                               nto_io_kind_of(io) == NTO_IO_URING;
  pthread_mutex_lock(&o->mu);
  if (rc != 0)
    io_broken(o, &e);
  for (;;) {
    if (q->n == 0 && pending == 0 && w->busy_since >= 0) {
      w->busy_ms += now_ms() - w->busy_since;
      w->busy_since = -1;
    }
    while (!o->stop && q->n == 0 && pending == 0 && w->reg_ack == o->reg_gen)
      pthread_cond_wait(cv, &o->mu);
    if (w->reg_ack != o->reg_gen && pending == 0) {
      unfix(w, io);
      continue;
    }
    if (q->n == 0 && pending == 0)
      break; /* stop requested and nothing left */
    if (w->busy_since < 0)
      w->busy_since = now_ms();
    if (try_fixed && !w->fixed)
      try_fixed = fix(w, io);
    job batch[BATCH];
    int nb = fifo_pop(q, batch, BATCH), nd = 0;
    pthread_mutex_unlock(&o->mu);
    for (int i = 0; i < nb && nd >= 0; i++) {
      job *j = &jobs[batch[i].t];
      *j = batch[i];
      if (!io) {
        finish(o, writer, j, NULL);
        continue;
      }
      pending += start_job(o, io, j);
      /* send it now and take what is done: the next job may wait for
       * memory (claim), and this one may be the executor's */
      nd = reap(o, io, writer, 0);
      pending -= nd > 0 ? nd : 0;
    }
    if (pending > 0 && nd >= 0) {
      nd = reap(o, io, writer, nb == 0);
      pending -= nd > 0 ? nd : 0;
    }
    pthread_mutex_lock(&o->mu);
    if (nd < 0) {
      nto_err_set(&e, NTO_EIO, "swap %s queue failed: %s",
                  writer ? "write" : "read", strerror(-nd));
      io_broken(o, &e);
      break; /* requests in flight are abandoned with their buffers */
    }
  }
  w->fixed = 0; /* no more requests: drop_fixed_locked need not wait */
  pthread_cond_broadcast(&o->cv_exec);
  pthread_mutex_unlock(&o->mu);
  nto_io_destroy(io); /* drops the registration */
  return NULL;
}

/* ---- executor side ---- */

static int n_steps(const nto_offload *o) { return o->plans[o->mode]->n_steps; }

/* Are all tensors of step s resident and not being written? */
static int step_ready(const nto_offload *o, int s) {
  const nto_plan *p = o->plans[o->mode];
  for (int k = p->step_first[s]; k < p->step_first[s + 1]; k++) {
    int t = p->step_t[k];
    if (o->t[t].state != NTO_RES_RESIDENT || o->writing[t])
      return 0;
  }
  return 1;
}

/* Have the I/O threads drop their registrations of the region before its
 * pages are unmapped or released (nto_io_register_buffer: the kernel would
 * go on transferring into the old pages). Drained: no request pending.
 * Lock held; executor. */
static void drop_fixed_locked(nto_offload *o) {
  if (!o->io[0].fixed && !o->io[1].fixed)
    return;
  o->reg_gen++;
  pthread_cond_broadcast(&o->io[ONLOADER].cv);
  pthread_cond_broadcast(&o->io[OFFLOADER].cv);
  /* a thread that has left its loop cleared its fixed */
  while ((o->io[0].fixed && o->io[0].reg_ack != o->reg_gen) ||
         (o->io[1].fixed && o->io[1].reg_ack != o->reg_gen))
    pthread_cond_wait(&o->cv_exec, &o->mu);
}

/* Wait until no job of the given kind is queued or in flight. */
static void wait_idle(nto_offload *o, const int *inflight) {
  while (*inflight > 0 && !o->io_dead)
    pthread_cond_wait(&o->cv_exec, &o->mu);
}

/* Empty the window (see offload_drain). Lock held. */
static void drain_locked(nto_offload *o) {
  if (!o->primed)
    return;
  wait_idle(o, &o->io[ONLOADER].inflight);
  wait_idle(o, &o->io[OFFLOADER].inflight); /* kept buffers become writable */
  int S = n_steps(o);
  for (long g = o->executed; g < o->entered; g++) {
    int s = (int)(g % S);
    if (o->step_state[s] == NTO_STEP_WAIT_FOR_EXEC)
      set_state(o, s, NTO_STEP_READY_FOR_EXEC);
    if (o->step_state[s] == NTO_STEP_READY_FOR_EXEC)
      set_state(o, s, NTO_STEP_WAIT_FOR_OFF);
  }
  for (int t = 0; t < o->n_t && !o->failed; t++) {
    if (!o->t[t].data)
      continue;
    o->dirty[t] &= o->plans[o->mode]->persistent[t]; /* transients: dead */
    evict(o, t, 0, -1);
  }
  wait_idle(o, &o->io[OFFLOADER].inflight);
  for (int s = 0; s < S; s++) {
    o->step_writes[s] = 0;
    if (o->step_state[s] == NTO_STEP_WAIT_FOR_OFF)
      set_state(o, s, NTO_STEP_SWAPPED);
  }
  if (o->failed) { /* content is lost anyway: forget every buffer */
    for (int t = 0; t < o->n_t; t++)
      if (o->t[t].data && !o->writing[t]) {
        o->t[t].data = NULL;
        o->t[t].state = NTO_RES_NONE;
      }
    for (size_t p = 0; p < o->region_bytes / NTO_PAGE; p++)
      o->owner[p] = -1;
    o->in_use = 0;
  }
  o->primed = 0;
  o->entered = o->executed = 0;
}

/* At the start of step s (o->executed steps after the priming, which is
 * at the start of a pass): the steps up to the frontier enter (their
 * state), and s's begin actions bring them in (the priming brings steps
 * 0..n_lead-1). */
static void enter_upto(nto_offload *o, int s) {
  const nto_schedule *sc = &o->sched[o->mode];
  int S = n_steps(o);
  if (o->executed == 0)
    queue_loads(o, sc->prime, sc->n_prime);
  long upto = o->executed - s + sc->upto[s]; /* since the priming */
  for (; o->entered <= upto; o->entered++)
    set_state(o, (int)(o->entered % S), NTO_STEP_WAIT_FOR_EXEC);
  queue_loads(o, &sc->begin[sc->begin_first[s]],
              sc->begin_first[s + 1] - sc->begin_first[s]);
}

static int offload_begin(nto_offload *o, int mode, int s, nto_err *err) {
  pthread_mutex_lock(&o->mu);
  if (!o->failed && mode != o->mode) {
    drain_locked(o);
    o->mode = mode;
  }
  if (!o->failed) {
    o->primed = 1;
    int S = n_steps(o);
    assert(o->executed % S == s);
    int lead = o->sched[o->mode].n_lead;
    if (o->executed == 0)
      o->prime_t0 = now_ms();
    else if (o->executed == lead)
      o->prime_ms += now_ms() - o->prime_t0;
    enter_upto(o, s);
    if (!step_ready(o, s) && !o->failed) {
      double t0 = now_ms();
      while (!o->failed && !step_ready(o, s))
        pthread_cond_wait(&o->cv_exec, &o->mu);
      double waited = now_ms() - t0;
      o->stall_ms += waited;
      if (o->executed < lead) /* reads of the priming */
        o->prime_stall_ms += waited;
    }
    if (!o->failed)
      set_state(o, s, NTO_STEP_READY_FOR_EXEC);
    o->ready_t = now_ms();
  }
  int rc = o->failed ? failure(o, err) : 0;
  pthread_mutex_unlock(&o->mu);
  return rc;
}

static int offload_end(nto_offload *o, int s, nto_err *err) {
  int rc = 0;
  pthread_mutex_lock(&o->mu);
  if (o->failed) {
    rc = failure(o, err);
  } else {
    const nto_plan *p = o->plans[o->mode];
    for (int k = p->step_first[s]; k < p->step_first[s + 1]; k++)
      if (p->step_mode[k] & NTO_USE_WRITE) {
        o->dirty[p->step_t[k]] = 1;
        o->zero[p->step_t[k]] = 0;
      }
    const nto_schedule *sc = &o->sched[o->mode];
    if (o->mode == 0)
      o->step_ms[s] = now_ms() - o->ready_t;
    set_state(o, s, NTO_STEP_WAIT_FOR_OFF);
    apply_end(o, &sc->end[sc->end_first[s]],
              sc->end_first[s + 1] - sc->end_first[s], s);
    if (o->step_writes[s] == 0)
      set_state(o, s, NTO_STEP_SWAPPED);
    o->executed++;
  }
  pthread_mutex_unlock(&o->mu);
  return rc;
}

static int offload_drain(nto_offload *o, nto_err *err) {
  pthread_mutex_lock(&o->mu);
  drain_locked(o);
  int rc = o->failed ? failure(o, err) : 0;
  pthread_mutex_unlock(&o->mu);
  return rc;
}

/* One synchronous transfer of len bytes at off through a psync queue of
 * the I/O backend (its EINTR, short-transfer and fault handling). Returns
 * 0 or -errno. */
static int transfer_all(nto_offload *o, int writing, void *buf, size_t len,
                        int64_t off) {
  nto_io *io = NULL;
  nto_err e = {0};
  if (nto_io_create(&io, NTO_IO_PSYNC, nto_swap_fd(o->swap), 1, &e) != 0)
    return -ENOMEM;
  nto_io_req r = {.op = writing ? NTO_IO_WRITE : NTO_IO_READ,
                  .buf = buf,
                  .len = len,
                  .offset = off};
  nto_io_req *done = NULL;
  nto_io_submit(io, &r);
  int n = nto_io_reap(io, &done, 1, 1);
  nto_io_destroy(io);
  return n < 0 ? n : n == 1 ? r.result : -EIO;
}

/* Give the pages of the drained region past its first keep bytes back to
 * the kernel, so that a synchronous fetch or store (saving, loading,
 * initialising the weights) adds only its bounce buffer to the process's
 * memory instead of keeping the whole region's pages. Training faults
 * them in again on its first pass. */
static void release_region(nto_offload *o, size_t keep) {
  size_t from = (keep + NTO_PAGE - 1) / NTO_PAGE * NTO_PAGE;
  if (from >= o->region_bytes)
    return;
  pthread_mutex_lock(&o->mu);
  drop_fixed_locked(o);
  pthread_mutex_unlock(&o->mu);
  madvise(o->region + from, o->region_bytes - from, MADV_DONTNEED);
}

int nto_offload_release(nto_offload *o, nto_err *err) {
  int rc = offload_drain(o, err);
  if (rc == 0)
    release_region(o, 0);
  return rc;
}

/* Synchronous store (writing) or fetch of persistent tensor t, through
 * the start of the (drained, so empty) region as bounce buffer. */
static int sync_io(nto_offload *o, int t, int writing, float *data,
                   nto_err *err) {
  int rc = offload_drain(o, err);
  if (rc != 0)
    return rc;
  size_t bytes = o->t[t].bytes, n = nto_tensor_numel(&o->t[t]);
  if (o->offset[t] < 0)
    return nto_err_set(err, NTO_EINVAL, "tensor %s has no swap space",
                       o->t[t].name);
  if (!writing && o->zero[t]) {
    memset(data, 0, n * sizeof(float));
    return 0;
  }
  float *buf = (float *)o->region; /* >= every tensor, unused when drained */
  release_region(o, bytes);
  uint64_t sum = 0;
  double ms = 0, t0;
  if (writing) {
    memset(buf, 0, bytes);
    memcpy(buf, data, n * sizeof(float));
    if (o->checksum) {
      t0 = now_ms();
      sum = checksum(buf, bytes);
      ms = now_ms() - t0;
    }
  }
  pthread_mutex_lock(&o->mu); /* drained: no I/O thread touches t */
  int check = !writing && o->checksum && o->has_sum[t];
  uint64_t stored = o->sum[t];
  o->has_sum[t] = writing ? 0 : o->has_sum[t];
  pthread_mutex_unlock(&o->mu);
  int res = transfer_all(o, writing, buf, bytes, o->offset[t]);
  if (res == 0 && check) {
    t0 = now_ms();
    sum = checksum(buf, bytes);
    ms += now_ms() - t0;
  }
  pthread_mutex_lock(&o->mu);
  o->sum_ms += ms;
  if (res == 0 && writing) {
    o->zero[t] = 0;
    o->dirty[t] = 0;
    o->t[t].state = NTO_RES_SWAPPED;
    o->sum[t] = sum;
    o->has_sum[t] = (unsigned char)o->checksum;
  }
  pthread_mutex_unlock(&o->mu);
  if (res < 0)
    return io_error(o, err, t, writing ? "write" : "read", res);
  if (check && sum != stored)
    return sum_error(o, err, t, stored, sum);
  if (!writing)
    memcpy(data, buf, n * sizeof(float));
  return 0;
}

static int offload_store(nto_offload *o, int t, const float *src,
                         nto_err *err) {
  return sync_io(o, t, 1, (float *)src, err);
}

static int offload_fetch(nto_offload *o, int t, float *dst, nto_err *err) {
  return sync_io(o, t, 0, dst, err);
}

static int offload_zero(nto_offload *o, int t, nto_err *err) {
  int rc = offload_drain(o, err);
  if (rc != 0)
    return rc;
  pthread_mutex_lock(&o->mu);
  o->zero[t] = 1;
  o->dirty[t] = 0;
  o->t[t].state = NTO_RES_NONE;
  pthread_mutex_unlock(&o->mu);
  return 0;
}

/* ---- setup ---- */

/* Swap slots: every persistent tensor, and every transient one that the
 * schedules sc[0..1] write, gets a slot (once; slots never move), appended
 * at the end of the file. Returns the file size this needs; only with
 * apply are the slots recorded. */
static uint64_t assign_slots(nto_offload *o, const nto_schedule sc[2],
                             int apply) {
  uint64_t off = o->swap_bytes;
  for (int t = 0; t < o->n_t; t++) {
    if (o->offset[t] >= 0 ||
        !(o->plans[0]->persistent[t] || sc[0].written[t] || sc[1].written[t]))
      continue;
    if (apply) {
      o->offset[t] = (int64_t)off;
      o->t[t].swap_offset = (int64_t)off;
    }
    off += o->t[t].bytes;
  }
  if (apply)
    o->swap_bytes = off;
  return off;
}

/* (Re)map the tensor region at the larger of the schedules' regions.
 * Only while drained: no buffer lives in the old one. */
static int map_region(nto_offload *o, const nto_schedule sc[2], nto_err *err) {
  size_t bytes = sc[0].region > sc[1].region ? sc[0].region : sc[1].region;
  if (o->region && bytes == o->region_bytes)
    return 0;
  char *r = nto_map_buffers(bytes);
  int *owner = malloc((bytes / NTO_PAGE + 1) * sizeof *owner);
  if (!r || !owner) {
    nto_unmap_buffers(r, bytes);
    free(owner);
    return nto_err_set(err, NTO_ENOMEM,
                       "cannot reserve %zu bytes for resident tensors", bytes);
  }
  if (o->region) {
    drop_fixed_locked(o);
    nto_unmap_buffers(o->region, o->region_bytes);
  }
  free(o->owner);
  o->region = r;
  o->region_bytes = bytes;
  if (bytes > o->region_max)
    o->region_max = bytes;
  o->owner = owner;
  for (size_t p = 0; p < bytes / NTO_PAGE; p++)
    o->owner[p] = -1;
  return 0;
}

/* The schedules of both plans for the window; swap slots; the region.
 * At creation (no swap file yet: nto_offload_create sizes it from
 * swap_bytes) or while drained (the file grows for new slots). On error
 * the engine keeps its previous schedules and region. */
static int plan_engine(nto_offload *o, int window, const int *upto,
                       nto_err *err) {
  nto_schedule sc[2];
  memset(sc, 0, sizeof sc);
  int rc = 0;
  for (int k = 0; k < 2 && rc == 0; k++) {
    nto_schedule_req rq = {window, k ? NULL : upto, !o->opts.no_keep, 1};
    rc = nto_schedule_make(&sc[k], o->plans[k], &rq, err);
  }
  uint64_t size = rc == 0 ? assign_slots(o, sc, 0) : 0;
  if (rc == 0 && o->swap && size > o->swap_bytes)
    rc = nto_swap_grow(o->swap, size, err);
  if (rc == 0)
    rc = map_region(o, sc, err);
  if (rc != 0) {
    nto_schedule_free(&sc[0]);
    nto_schedule_free(&sc[1]);
    return rc;
  }
  assign_slots(o, sc, 1);
  nto_schedule_free(&o->sched[0]);
  nto_schedule_free(&o->sched[1]);
  o->sched[0] = sc[0];
  o->sched[1] = sc[1];
  o->opts.window = window;
  if (upto)
    memcpy(o->upto, upto, (size_t)o->plans[0]->n_steps * sizeof *upto);
  o->has_upto = upto != NULL;
  return 0;
}

/* Does the frontier upto (NULL: none) differ from the one in force? */
static int new_frontier(const nto_offload *o, const int *upto) {
  if (!upto || !o->has_upto)
    return upto || o->has_upto;
  return memcmp(upto, o->upto, (size_t)o->plans[0]->n_steps * sizeof *upto);
}

int nto_offload_set_frontier(nto_offload *o, int window, const int *upto,
                             nto_err *err) {
  if (window < 1)
    window = 1;
  pthread_mutex_lock(&o->mu);
  int rc = o->failed ? failure(o, err) : 0;
  if (rc == 0 && (window != o->opts.window || new_frontier(o, upto))) {
    drain_locked(o);
    rc = o->failed ? failure(o, err) : plan_engine(o, window, upto, err);
  }
  pthread_mutex_unlock(&o->mu);
  return rc;
}

int nto_offload_step_times(nto_offload *o, double *ms) {
  pthread_mutex_lock(&o->mu);
  int S = o->plans[0]->n_steps;
  memcpy(ms, o->step_ms, (size_t)S * sizeof *ms);
  pthread_mutex_unlock(&o->mu);
  return S;
}

/* Decide between io_uring and psync by creating a probe ring here. */
static int choose_io(nto_offload *o, nto_err *err) {
  o->io_kind = o->opts.io == NTO_IO_AUTO ? NTO_IO_URING : o->opts.io;
  if (o->io_kind == NTO_IO_PSYNC)
    return 0;
  nto_io *probe = NULL;
  nto_err e = {0};
  int rc = nto_io_create(&probe, NTO_IO_URING, nto_swap_fd(o->swap), 1, &e);
  nto_io_destroy(probe);
  if (rc == 0)
    return 0;
  if (rc != NTO_EUNSUPPORTED || o->opts.io == NTO_IO_URING)
    return nto_err_set(err, rc, "%s", e.msg);
  o->io_kind = NTO_IO_PSYNC;
  snprintf(o->note, sizeof o->note, "%.120s; using psync", e.msg);
  return 0;
}

/* Allocate the per-tensor and per-step arrays and queues. */
static int alloc_tables(nto_offload *o) {
  size_t nt = (size_t)o->n_t + 1;
  int S = o->plans[0]->n_steps > o->plans[1]->n_steps ? o->plans[0]->n_steps
                                                      : o->plans[1]->n_steps;
  o->req = calloc(nt, sizeof *o->req);
  o->offset = calloc(nt, sizeof *o->offset);
  o->dirty = calloc(nt, 1);
  o->zero = calloc(nt, 1);
  o->writing = calloc(nt, 1);
  o->loading = calloc(nt, 1);
  o->sum = calloc(nt, sizeof *o->sum);
  o->has_sum = calloc(nt, 1);
  o->step_state = calloc((size_t)S + 1, 1);
  o->step_writes = calloc((size_t)S + 1, sizeof *o->step_writes);
  o->upto = calloc((size_t)S + 1, sizeof *o->upto);
  o->step_ms = calloc((size_t)S + 1, sizeof *o->step_ms);
  if (!o->req || !o->offset || !o->dirty || !o->zero || !o->writing ||
      !o->loading || !o->sum || !o->has_sum || !o->step_state || !o->upto ||
      !o->step_ms || !o->step_writes)
    return NTO_ENOMEM;
  for (int k = 0; k < 2; k++)
    if (!(o->io[k].jobs = calloc(nt, sizeof(job))) ||
        fifo_init(&o->io[k].q, (int)nt) != 0)
      return NTO_ENOMEM;
  return 0;
}

/* The debugging and test hooks of the environment: NTO_SWAP_CHECKSUM=0|1
 * overrides opts.checksum; NTO_FAULT=OP:N:KIND sets the I/O fault
 * injection (nto_io_fault_parse) for the process, counting from here. */
static int env_hooks(nto_offload *o, nto_err *err) {
  o->checksum =
      o->opts.checksum ? o->opts.checksum > 0 : NTO_OFFLOAD_CHECKSUM_DEFAULT;
  const char *v = getenv("NTO_SWAP_CHECKSUM");
  if (v && v[0]) {
    if (strcmp(v, "0") != 0 && strcmp(v, "1") != 0)
      return nto_err_set(err, NTO_EINVAL,
                         "NTO_SWAP_CHECKSUM: expected 0 or 1, got '%s'", v);
    o->checksum = v[0] == '1';
  }
  v = getenv("NTO_FAULT");
  if (v && v[0]) {
    nto_io_fault f;
    int rc = nto_io_fault_parse(v, &f, err);
    if (rc != 0)
      return nto_err_prefix(err, rc, "NTO_FAULT: ");
    nto_io_fault_set(&f);
  }
  return 0;
}

/*
 * Stack of an I/O thread, set explicitly: the default comes from
 * RLIMIT_STACK, and `ulimit -s 64` then crashed the first I/O thread (its
 * 64 KiB also hold glibc's copy of the static TLS: 64 KiB here, 60 of them
 * OpenBLAS's). Measured with a painted stack (ResNet-18 and tiny_resnet at
 * window 1, io_uring and psync, an injected read error): 72-77 KiB used,
 * the TLS included, so 9-13 KiB of frames (io_main's batch of BATCH jobs,
 * the backend, snprintf for a message). 256 KiB leaves room for a larger
 * TLS and ASan's frames, and costs little address space under `ulimit -v`
 * (the default would be 8 MiB).
 */
#define IO_THREAD_STACK ((size_t)256 << 10)

/* Start the onloader and the offloader with every signal blocked, each
 * on a stack of IO_THREAD_STACK bytes. */
static int start_threads(nto_offload *o, nto_err *err) {
  static const char *const name[2] = {"nto-onload", "nto-offload"};
  pthread_attr_t attr;
  int rc = pthread_attr_init(&attr);
  if (rc != 0)
    return nto_err_set(err, NTO_ENOMEM, "cannot start I/O threads: %s",
                       strerror(rc));
  size_t stack = IO_THREAD_STACK;
  if (stack < (size_t)PTHREAD_STACK_MIN)
    stack = (size_t)PTHREAD_STACK_MIN;
  pthread_attr_setstacksize(&attr, stack);
  sigset_t all, old;
  sigfillset(&all);
  pthread_sigmask(SIG_BLOCK, &all, &old);
  for (int k = 0; k < 2 && rc == 0; k++) {
    rc = pthread_create(&o->io[k].th, &attr, io_main, &o->io[k]);
    if (rc == 0) {
      pthread_setname_np(o->io[k].th, name[k]);
      o->io[k].started = 1;
    }
  }
  pthread_sigmask(SIG_SETMASK, &old, NULL);
  pthread_attr_destroy(&attr);
  if (rc != 0)
    return nto_err_set(err, NTO_ENOMEM, "cannot start I/O threads: %s",
                       strerror(rc));
  return 0;
}

/* ---- the residency interface (residency.h) ---- */

static int res_begin(nto_residency *r, int pass, int s, nto_err *err) {
  return offload_begin((nto_offload *)r, pass, s, err);
}

static int res_end(nto_residency *r, int s, nto_err *err) {
  return offload_end((nto_offload *)r, s, err);
}

static int res_drain(nto_residency *r, nto_err *err) {
  return offload_drain((nto_offload *)r, err);
}

static int res_fetch(nto_residency *r, int t, float *dst, nto_err *err) {
  return offload_fetch((nto_offload *)r, t, dst, err);
}

static int res_store(nto_residency *r, int t, const float *src, nto_err *err) {
  return offload_store((nto_offload *)r, t, src, err);
}

static int res_zero(nto_residency *r, int t, nto_err *err) {
  return offload_zero((nto_offload *)r, t, err);
}

static void res_free(nto_residency *r) { nto_offload_free((nto_offload *)r); }

static const nto_residency_ops offload_ops = {
    res_begin, res_end, res_drain, res_fetch, res_store, res_zero, res_free,
};

nto_residency *nto_offload_residency(nto_offload *o) { return &o->res; }

int nto_offload_create(nto_offload **out, nto_tensor *t, int n_tensors,
                       const nto_plan *plans[2], const nto_offload_opts *opts,
                       nto_err *err) {
  *out = NULL;
  nto_offload *o = calloc(1, sizeof *o);
  if (!o)
    return nto_err_set(err, NTO_ENOMEM, "out of memory");
  o->res = (nto_residency){&offload_ops, 0};
  o->t = t;
  o->n_t = n_tensors;
  o->plans[0] = plans[0];
  o->plans[1] = plans[1];
  o->opts = *opts;
  if (o->opts.window < 1)
    o->opts.window = 1;
  if (o->opts.depth == 0)
    o->opts.depth = 16;
  pthread_mutex_init(&o->mu, NULL);
  pthread_mutex_init(&o->dev_mu, NULL);
  pthread_cond_init(&o->cv_exec, NULL);
  pthread_cond_init(&o->cv_mem, NULL);
  for (int k = 0; k < 2; k++) {
    o->io[k].o = o;
    o->io[k].writer = k;
    o->io[k].busy_since = -1;
    pthread_cond_init(&o->io[k].cv, NULL);
  }
  int rc = env_hooks(o, err);
  if (rc == 0 && alloc_tables(o) != 0)
    rc = nto_err_set(err, NTO_ENOMEM, "out of memory");
  for (int t = 0; rc == 0 && t < o->n_t; t++) {
    o->offset[t] = -1;
    o->zero[t] = plans[0]->persistent[t]; /* zeros until stored */
  }
  if (rc == 0)
    rc = plan_engine(o, o->opts.window, NULL, err);
  if (rc == 0) {
    nto_swap_opts so = {opts->swap_dir, o->swap_bytes, !opts->no_direct};
    rc = nto_swap_open(&o->swap, &so, err);
  }
  if (rc == 0)
    rc = choose_io(o, err);
  if (rc == 0)
    rc = start_threads(o, err);
  if (rc != 0) {
    nto_offload_free(o);
    return rc;
  }
  *out = o;
  return 0;
}

void nto_offload_free(nto_offload *o) {
  if (!o)
    return;
  pthread_mutex_lock(&o->mu);
  if (o->io[0].started && o->io[1].started)
    drain_locked(o);
  o->stop = 1;
  pthread_cond_broadcast(&o->io[ONLOADER].cv);
  pthread_cond_broadcast(&o->io[OFFLOADER].cv);
  pthread_mutex_unlock(&o->mu);
  for (int k = 0; k < 2; k++)
    if (o->io[k].started)
      pthread_join(o->io[k].th, NULL);
  for (int t = 0; t < o->n_t; t++)
    if (o->t[t].data) {
      o->t[t].data = NULL;
      o->t[t].state = NTO_RES_NONE;
    }
  nto_swap_close(o->swap);
  nto_unmap_buffers(o->region, o->region_bytes);
  free(o->owner);
  nto_schedule_free(&o->sched[0]);
  nto_schedule_free(&o->sched[1]);
  free(o->req);
  free(o->offset);
  free(o->dirty);
  free(o->zero);
  free(o->writing);
  free(o->loading);
  free(o->sum);
  free(o->has_sum);
  free(o->step_state);
  free(o->step_writes);
  free(o->upto);
  free(o->step_ms);
  for (int k = 0; k < 2; k++) {
    free(o->io[k].jobs);
    free(o->io[k].q.v);
    pthread_cond_destroy(&o->io[k].cv);
  }
  pthread_cond_destroy(&o->cv_exec);
  pthread_cond_destroy(&o->cv_mem);
  pthread_mutex_destroy(&o->mu);
  pthread_mutex_destroy(&o->dev_mu);
  free(o);
}

void nto_offload_get_stats(nto_offload *o, nto_offload_stats *st) {
  memset(st, 0, sizeof *st);
  pthread_mutex_lock(&o->mu);
  st->window = o->sched[0].window;
  st->ahead = 0;
  for (int s = 0; o->has_upto && s < o->sched[0].n_steps; s++) {
    int a = o->sched[0].upto[s] - s - o->sched[0].window;
    st->ahead = a > st->ahead ? a : st->ahead;
  }
  st->io = nto_io_kind_name(o->io_kind);
  st->fixed = o->io[0].fixed_once && o->io[1].fixed_once;
  snprintf(st->fixed_note, sizeof st->fixed_note, "%s", o->fixed_note);
  st->direct = nto_swap_is_direct(o->swap);
  st->swap_dir = nto_swap_dir(o->swap);
  st->swap_bytes = o->swap_bytes;
  st->stall_ms = o->stall_ms;
  st->prime_stall_ms = o->prime_stall_ms;
  st->prime_ms = o->prime_ms;
  double now = now_ms();
  for (int w = 0; w < 2; w++) {
    double b = o->io[w].busy_ms;
    if (o->io[w].busy_since >= 0) /* the open period, up to now */
      b += now - o->io[w].busy_since;
    *(w ? &st->write_busy_ms : &st->read_busy_ms) = b;
  }
  pthread_mutex_lock(&o->dev_mu);
  st->device_busy_ms =
      o->dev_ms + (o->dev_inflight > 0 ? now - o->dev_since : 0);
  pthread_mutex_unlock(&o->dev_mu);
  st->read_bytes = o->read_bytes;
  st->written_bytes = o->written_bytes;
  st->checksum = o->checksum;
  st->checksum_ms = o->sum_ms;
  st->planned_peak =
      o->sched[0].peak > o->sched[1].peak ? o->sched[0].peak : o->sched[1].peak;
  st->region = o->region_bytes;
  st->region_max = o->region_max;
  st->planned_read = o->sched[0].read_bytes;
  st->planned_written = o->sched[0].written_bytes;
  st->peak_resident = o->peak;
  st->relocated = o->relocated;
  snprintf(st->note, sizeof st->note, "%s", o->note);
  pthread_mutex_unlock(&o->mu);
}
