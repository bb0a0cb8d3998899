/*
 * pool.h - page-aligned tensor buffers for the offload engine, with an
 * honest byte count.
 *
 * Buffers come from mmap (page-aligned, so O_DIRECT can use them) and are
 * recycled by exact size: a released buffer is kept for reuse only while
 * the bytes in use plus the bytes kept stay within the peak of bytes in
 * use, else it is unmapped. Tensor sizes repeat every iteration, so after
 * the first iteration almost every request is served without a page fault,
 * and the process never holds more buffer memory than its in-use peak.
 *
 * Threads: all functions may be called from any thread (internal mutex).
 */
#ifndef NTO_POOL_H
#define NTO_POOL_H

#include <stddef.h>

typedef struct nto_pool nto_pool;

/* Create an empty pool. Returns NULL when out of memory. */
nto_pool *nto_pool_create(void);

/* Unmap every buffer, in use or kept. NULL is ignored. */
void nto_pool_destroy(nto_pool *p);

/*
 * A buffer of `bytes` (rounded up to 4096), page-aligned, with undefined
 * content. Returns NULL if mmap fails. The bytes count as in use until
 * nto_pool_put.
 */
void *nto_pool_get(nto_pool *p, size_t bytes);

/* Return a buffer obtained with the same `bytes`. NULL is ignored. */
void nto_pool_put(nto_pool *p, void *buf, size_t bytes);

/* Bytes handed out now, their peak since creation (or the last
 * nto_pool_reset_peak), and bytes kept for reuse. */
size_t nto_pool_in_use(nto_pool *p);
size_t nto_pool_peak(nto_pool *p);
size_t nto_pool_kept(nto_pool *p);
void nto_pool_reset_peak(nto_pool *p);

#endif /* NTO_POOL_H */
