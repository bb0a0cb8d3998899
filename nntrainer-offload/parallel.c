/*
 * parallel.c - the executor's compute helpers. See parallel.h.
 *
 * DESIGN. A job of T threads is cut into R = min(units, NTO_PARALLEL_SPLIT
 * * T) fixed ranges (a unit: grain elements), and the caller and workers
 * 1..T-1 take ranges in order from a shared counter until none is left.
 * The scheduler preempts compute threads for the I/O threads on two cores;
 * a preempted thread then holds up only the range it is in while the others
 * take the rest, and the caller returns when every range is done, without
 * waiting for a worker that has not woken up yet. (Ranges fixed per thread
 * made every job wait for its slowest thread.) Which outputs a range
 * computes depends on n, grain and R only, so the results are the same
 * whichever thread takes it.
 *
 * A job is published under the pool's mutex: its parameters, `left` = R,
 * and `claim` = (generation << 32 | 0), then `gen` bumped and `start`
 * broadcast. A thread takes range k by a compare-and-swap of claim from
 * (its generation, k) to (generation, k + 1): a worker that read an older
 * job's parameters finds another generation there and takes nothing, so a
 * range is always run with its own job's fn and ctx. Whoever finishes the
 * last range (left reaches 0) signals `done`.
 *
 * Workers sleep on the condition variable between jobs (no spinning: the
 * I/O threads share the cores, and OpenBLAS's own threads, where a caller
 * runs them, spin after a GEMM). They block all signals (the CLI's
 * SIGINT/SIGTERM handling stays on its main thread) and are named
 * "nto-compute".
 */
#include "parallel.h"

#include <cblas.h>
#include <limits.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdint.h>
#include <string.h>

typedef struct pool {
  pthread_mutex_t mu;
  pthread_cond_t start, done;
  pthread_t tid[NTO_PARALLEL_MAX];      /* [1, threads): the workers */
  unsigned long born[NTO_PARALLEL_MAX]; /* gen when worker k was started */
  int threads;                          /* T, the caller included */
  int keep;                             /* workers with index >= keep exit */
  unsigned long gen;                    /* job generation */
  /* the job of generation gen */
  nto_range_fn fn;
  void *ctx;
  size_t n, grain;
  int job_threads;        /* T of the job */
  int job_ranges;         /* R of the job */
  _Atomic uint64_t claim; /* (gen << 32) | its first range not taken */
  atomic_int left;        /* its ranges not finished */
} pool;

static pool P = {.mu = PTHREAD_MUTEX_INITIALIZER,
                 .start = PTHREAD_COND_INITIALIZER,
                 .done = PTHREAD_COND_INITIALIZER,
                 .threads = 1,
                 .keep = 1};

/* First element of range k of r over n (see parallel.h); k == r: n. */
static size_t range_start(size_t n, size_t grain, int k, int r) {
  if (k >= r)
    return n;
  size_t s = (size_t)((unsigned long long)n * (unsigned)k / (unsigned)r);
  return s / grain * grain;
}

/* R for n elements on t threads: NTO_PARALLEL_SPLIT ranges per thread, at
 * most one per grain. */
static int job_ranges(size_t n, size_t grain, int t) {
  size_t units = n / grain + (n % grain != 0);
  size_t r = (size_t)t * NTO_PARALLEL_SPLIT;
  return (int)(units < r ? units : r);
}

/* The job a thread read under the mutex. */
typedef struct job {
  nto_range_fn fn;
  void *ctx;
  size_t n, grain;
  int ranges;
  uint64_t tag; /* generation << 32 */
} job;

/* Takes ranges of job j as slot `slot` until none is left or another job
 * has been published; signals `done` after the job's last range. */
static void take_ranges(const job *j, int slot) {
  uint64_t c = atomic_load_explicit(&P.claim, memory_order_acquire);
  for (;;) {
    if ((c & ~(uint64_t)UINT32_MAX) != j->tag ||
        (c & UINT32_MAX) >= (uint64_t)j->ranges)
      return;
    if (!atomic_compare_exchange_weak_explicit(
            &P.claim, &c, c + 1, memory_order_acq_rel, memory_order_acquire))
      continue; /* c now holds the current value */
    int k = (int)(c & UINT32_MAX);
    size_t a = range_start(j->n, j->grain, k, j->ranges);
    size_t b = range_start(j->n, j->grain, k + 1, j->ranges);
    if (a < b)
      j->fn(j->ctx, a, b, slot);
    if (atomic_fetch_sub_explicit(&P.left, 1, memory_order_acq_rel) == 1) {
      pthread_mutex_lock(&P.mu);
      pthread_cond_signal(&P.done);
      pthread_mutex_unlock(&P.mu);
    }
    c++;
  }
}

/* A worker: created with every signal blocked (nto_parallel_set_threads),
 * so SIGINT/SIGTERM reach the executor, not a compute thread. */
static void *worker(void *arg) {
  int k = (int)(size_t)arg;
  pthread_mutex_lock(&P.mu);
  unsigned long seen = P.born[k]; /* jobs after it are this worker's */
  for (;;) {
    while (P.gen == seen && k < P.keep)
      pthread_cond_wait(&P.start, &P.mu);
    if (k >= P.keep)
      break;
    seen = P.gen;
    job j = {P.fn, P.ctx, P.n, P.grain, P.job_ranges, (uint64_t)seen << 32};
    int t = P.job_threads;
    pthread_mutex_unlock(&P.mu);
    if (k < t)
      take_ranges(&j, k);
    pthread_mutex_lock(&P.mu);
  }
  pthread_mutex_unlock(&P.mu);
  return NULL;
}

/* Stops workers [t, threads). */
static void shrink(int t) {
  pthread_mutex_lock(&P.mu);
  int old = P.threads;
  P.keep = t;
  pthread_cond_broadcast(&P.start);
  pthread_mutex_unlock(&P.mu);
  for (int k = t; k < old; k++)
    pthread_join(P.tid[k], NULL);
  P.threads = t;
}

/*
 * Stack of a compute worker, set explicitly: the default comes from
 * RLIMIT_STACK (64 KiB under `ulimit -s 64`, which also holds glibc's copy
 * of the static TLS: 64 KiB here, 60 of them OpenBLAS's). Measured with a
 * painted stack (ResNet-18 and MobileNetV2 training and evaluation): 69-87
 * KiB used, the TLS included, so up to 23 KiB of kernel frames (Winograd's
 * row buffers, layers/winograd.c, are 20 KiB; OpenBLAS's GEMM packs into
 * its own buffer, not the stack). 1 MiB leaves room for a larger TLS,
 * ASan's frames and kernels to come, and costs little address space under
 * `ulimit -v` (the default would be 8 MiB).
 */
#define WORKER_STACK ((size_t)1 << 20)

int nto_parallel_set_threads(int t, nto_err *err) {
  if (t < 1 || t > NTO_PARALLEL_MAX)
    return nto_err_set(err, NTO_EINVAL, "threads: expected 1 to %d, got %d",
                       NTO_PARALLEL_MAX, t);
  if (t < P.threads) {
    shrink(t);
    return 0;
  }
  pthread_attr_t attr;
  int rc = pthread_attr_init(&attr);
  if (rc != 0)
    return nto_err_set(err, NTO_ENOMEM, "cannot start compute threads: %s",
                       strerror(rc));
  size_t stack = WORKER_STACK;
  if (stack < (size_t)PTHREAD_STACK_MIN)
    stack = (size_t)PTHREAD_STACK_MIN;
  pthread_attr_setstacksize(&attr, stack);
  pthread_mutex_lock(&P.mu);
  P.keep = t;
  pthread_mutex_unlock(&P.mu);
  /* workers inherit a mask with every signal blocked (as offload.c's I/O
   * threads), from their first instruction on */
  sigset_t all, old;
  sigfillset(&all);
  pthread_sigmask(SIG_BLOCK, &all, &old);
  while (rc == 0 && P.threads < t) {
    int k = P.threads;
    P.born[k] = P.gen; /* no job runs now: gen is stable */
    rc = pthread_create(&P.tid[k], &attr, worker, (void *)(size_t)k);
    if (rc == 0) {
      pthread_setname_np(P.tid[k], "nto-compute");
      P.threads = k + 1;
    }
  }
  pthread_sigmask(SIG_SETMASK, &old, NULL);
  pthread_attr_destroy(&attr);
  if (rc != 0) {
    int k = P.threads;
    shrink(k);
    return nto_err_set(err, NTO_ENOMEM,
                       "cannot start compute thread %d of %d: %s", k + 1, t,
                       strerror(rc));
  }
  return 0;
}

int nto_parallel_threads(void) { return P.threads; }

void nto_parallel_for(size_t n, size_t grain, int max_threads, nto_range_fn fn,
                      void *ctx) {
  int t = P.threads;
  if (max_threads > 0 && t > max_threads)
    t = max_threads;
  if (grain == 0)
    grain = 1;
  if (t == 1 || n <= grain) {
    if (n > 0)
      fn(ctx, 0, n, 0);
    return;
  }
  pthread_mutex_lock(&P.mu);
  P.fn = fn;
  P.ctx = ctx;
  P.n = n;
  P.grain = grain;
  P.job_threads = t;
  P.job_ranges = job_ranges(n, grain, t);
  P.gen++;
  job j = {fn, ctx, n, grain, P.job_ranges, (uint64_t)P.gen << 32};
  atomic_store_explicit(&P.left, j.ranges, memory_order_relaxed);
  atomic_store_explicit(&P.claim, j.tag, memory_order_release);
  pthread_cond_broadcast(&P.start);
  pthread_mutex_unlock(&P.mu);
  take_ranges(&j, 0);
  pthread_mutex_lock(&P.mu);
  while (atomic_load_explicit(&P.left, memory_order_acquire) > 0)
    pthread_cond_wait(&P.done, &P.mu);
  pthread_mutex_unlock(&P.mu);
}

void nto_parallel_for_blas(size_t n, size_t grain, int max_threads,
                           nto_range_fn fn, void *ctx) {
  int blas = openblas_get_num_threads();
  if (blas != 1)
    openblas_set_num_threads(1);
  nto_parallel_for(n, grain, max_threads, fn, ctx);
  if (blas != 1)
    openblas_set_num_threads(blas);
}

void nto_parallel_free(void) {
  if (P.threads > 1)
    shrink(1);
}
