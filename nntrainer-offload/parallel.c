/*
 * parallel.c - the executor's compute helpers. See parallel.h.
 *
 * DESIGN. Workers 1..T-1 each run one range of every job; the caller runs
 * range 0. A job is published under the pool's mutex by bumping `gen` and
 * broadcasting `start`; each worker runs its range once per generation it
 * sees, then decrements `pending`, and the last one signals `done`. Ranges
 * are fixed by the worker's index, so which thread computes which outputs
 * is the same in every run. Workers sleep on the condition variable between
 * jobs (no spinning: the I/O threads share the cores, and OpenBLAS's own
 * threads, where a caller runs them, spin after a GEMM). They block all
 * signals (the CLI's SIGINT/SIGTERM handling stays on its main thread) and
 * are named "nto-compute".
 */
#include "parallel.h"

#include <cblas.h>
#include <pthread.h>
#include <signal.h>
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
  int job_threads; /* T of the job */
  int pending;     /* its ranges not finished yet, the caller's excluded */
} pool;

static pool P = {.mu = PTHREAD_MUTEX_INITIALIZER,
                 .start = PTHREAD_COND_INITIALIZER,
                 .done = PTHREAD_COND_INITIALIZER,
                 .threads = 1,
                 .keep = 1};

/* First element of range k of t over n (see parallel.h); k == t: n. */
static size_t range_start(size_t n, size_t grain, int k, int t) {
  if (k >= t)
    return n;
  size_t r = (size_t)((unsigned long long)n * (unsigned)k / (unsigned)t);
  return r / grain * grain;
}

static void run_range(nto_range_fn fn, void *ctx, size_t n, size_t grain, int k,
                      int t) {
  size_t a = range_start(n, grain, k, t), b = range_start(n, grain, k + 1, t);
  if (a < b)
    fn(ctx, a, b, k);
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
    nto_range_fn fn = P.fn;
    void *ctx = P.ctx;
    size_t n = P.n, grain = P.grain;
    int t = P.job_threads;
    pthread_mutex_unlock(&P.mu);
    if (k < t)
      run_range(fn, ctx, n, grain, k, t);
    pthread_mutex_lock(&P.mu);
    if (k < t && --P.pending == 0)
      pthread_cond_signal(&P.done);
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

int nto_parallel_set_threads(int t, nto_err *err) {
  if (t < 1 || t > NTO_PARALLEL_MAX)
    return nto_err_set(err, NTO_EINVAL, "threads: expected 1 to %d, got %d",
                       NTO_PARALLEL_MAX, t);
  if (t < P.threads) {
    shrink(t);
    return 0;
  }
  pthread_mutex_lock(&P.mu);
  P.keep = t;
  pthread_mutex_unlock(&P.mu);
  /* workers inherit a mask with every signal blocked (as offload.c's I/O
   * threads), from their first instruction on */
  sigset_t all, old;
  sigfillset(&all);
  pthread_sigmask(SIG_BLOCK, &all, &old);
  int rc = 0;
  while (rc == 0 && P.threads < t) {
    int k = P.threads;
    P.born[k] = P.gen; /* no job runs now: gen is stable */
    rc = pthread_create(&P.tid[k], NULL, worker, (void *)(size_t)k);
    if (rc == 0) {
      pthread_setname_np(P.tid[k], "nto-compute");
      P.threads = k + 1;
    }
  }
  pthread_sigmask(SIG_SETMASK, &old, NULL);
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
  P.pending = t - 1;
  P.gen++;
  pthread_cond_broadcast(&P.start);
  pthread_mutex_unlock(&P.mu);
  run_range(fn, ctx, n, grain, 0, t);
  pthread_mutex_lock(&P.mu);
  while (P.pending > 0)
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
