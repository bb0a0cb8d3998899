/*
 * parallel.h - the executor's compute helpers: a loop over [0, n) split
 * into contiguous ranges run by the executor thread and T-1 worker
 * threads, for the kernels (element-wise layers, batch normalization,
 * convolutions, fully connected layers, optimizer updates).
 *
 * GEMMs run here too, through nto_parallel_for_blas: each range's GEMMs
 * single-threaded, side by side with the range's im2col or col2im, in
 * chunks of images or fixed blocks of rows or columns (layers/conv2d.c,
 * layers/fully_connected.c). OpenBLAS's own threads would split only the
 * GEMMs, leave the rest on the executor, and round differently with
 * another thread count; the CLI holds OpenBLAS at one thread. A step's
 * kernels run one after the other on the executor, which waits for each.
 *
 * Results do not depend on the thread count: callers split work only where
 * every output is computed by one range with the same operations in the
 * same order (independent elements, features, channels, images, fixed
 * blocks of a GEMM), never a sum across ranges.
 *
 * One process-wide pool, like OpenBLAS's. Its size is set once, before
 * training, by the thread that owns the model (the CLI's --threads);
 * nto_parallel_for is called by one thread at a time (the executor).
 */
#ifndef NTO_PARALLEL_H
#define NTO_PARALLEL_H

#include <stddef.h>

#include "error.h"

#define NTO_PARALLEL_MAX 64 /* threads, the caller included */

/* Ranges per thread of a job: enough that a thread the scheduler preempts
 * (the I/O threads share the cores) holds up a small share of the job,
 * few enough that a range's fixed costs (a GEMM's packing) stay small. */
#define NTO_PARALLEL_SPLIT 4

/* Body of a parallel loop: elements [begin, end) of the loop; ctx is the
 * caller's; slot: the index of the thread running it, < the job's thread
 * count, 0 on the caller (for per-thread scratch: a slot runs one range at
 * a time, but may run several of a job). Runs on the calling thread or a
 * worker; must not call nto_parallel_for. */
typedef void (*nto_range_fn)(void *ctx, size_t begin, size_t end, int slot);

/*
 * Use t threads (the caller included, 1 <= t <= NTO_PARALLEL_MAX): starts
 * or stops workers. Returns 0, NTO_EINVAL (t out of range), or NTO_ENOMEM
 * when a worker cannot be started (the pool then keeps the workers it
 * has). Not while nto_parallel_for runs.
 */
int nto_parallel_set_threads(int t, nto_err *err);

/* Threads nto_parallel_for uses (1 when never set). */
int nto_parallel_threads(void);

/*
 * fn over [0, n): with T = min(nto_parallel_threads(), max_threads)
 * threads (max_threads <= 0: no cap), R = min(ceil(n / grain),
 * NTO_PARALLEL_SPLIT * T) ranges [r_k, r_{k+1}) with r_k = round_down(n * k
 * / R, grain) (r_R = n), so every range but the last is a multiple of grain
 * long (grain >= 1; alignment for vector loops); empty ranges are skipped.
 * The caller and T-1 workers take the ranges in order, each the next one
 * not taken, until none is left: which thread runs a range varies from run
 * to run, its bounds do not. Returns when every range has run. With T == 1
 * or n <= grain: fn(ctx, 0, n, 0) on the caller.
 */
void nto_parallel_for(size_t n, size_t grain, int max_threads, nto_range_fn fn,
                      void *ctx);

/*
 * nto_parallel_for for ranges that call BLAS: every range calls it with
 * OpenBLAS held at one thread (openblas_set_num_threads(1) before the job,
 * the previous count restored after it), so the ranges' GEMMs run side by
 * side on the pool's threads instead of each waking OpenBLAS's threads,
 * and a GEMM's result does not depend on the thread count. Work that is
 * serial outside BLAS (im2col, col2im, scatter) then runs in parallel too.
 * Same ranges and caller rules as nto_parallel_for; executor thread only
 * (OpenBLAS's thread count is process-wide).
 */
void nto_parallel_for_blas(size_t n, size_t grain, int max_threads,
                           nto_range_fn fn, void *ctx);

/* Stops the workers (back to 1 thread). */
void nto_parallel_free(void);

#endif /* NTO_PARALLEL_H */
