/*
 * probe.h - the swap directory's sequential write and read bandwidth,
 * measured through the I/O layer the offload engine uses: a swap file of
 * io/swap.h, driven by a queue of io/iobackend.h (`bench` prints it and
 * builds its floors and train's --floor-bandwidth from it).
 *
 * Method: a swap file of `bytes` bytes is written from start to end in
 * NTO_SWAP_PROBE_BLOCK requests, NTO_SWAP_PROBE_DEPTH in flight (at most a
 * quarter of the requests: 4 for train's 16 MiB), from one
 * buffer arena registered with the queue where the kernel allows it (as the
 * engine's tensor region), then read back the same way; each pass is
 * timed. bytes: the caller's (0: NTO_SWAP_PROBE_BYTES; at least
 * NTO_SWAP_PROBE_MIN_BYTES), or half the directory's free space when that
 * is less (whole requests). A buffered file's write is timed up to
 * fdatasync, and its pages are dropped from the cache before the read.
 */
#ifndef NTO_SWAP_PROBE_H
#define NTO_SWAP_PROBE_H

#include "error.h"
#include "iobackend.h"

#include <stddef.h>
#include <stdint.h>

#define NTO_SWAP_PROBE_DEPTH 16u               /* requests in flight */
#define NTO_SWAP_PROBE_BLOCK (1u << 20)        /* bytes per request */
#define NTO_SWAP_PROBE_BYTES (256ull << 20)    /* bytes written, then read */
#define NTO_SWAP_PROBE_MIN_BYTES (16ull << 20) /* fewer: refused */

/* What a probe found. */
typedef struct nto_swap_probe_result {
  double write_mib_s, read_mib_s; /* MiB (2^20 bytes) per second */
  uint64_t bytes;                 /* written, then read */
  unsigned depth;                 /* requests in flight (the buffers
                                     mapped: depth x block bytes) */
  size_t block;                   /* bytes per request */
  int direct;                     /* 1: O_DIRECT; 0: through the page cache */
  int fixed;                      /* 1: io_uring with the buffers registered */
  const char *io; /* the backend: "io_uring" or "psync" (static) */
} nto_swap_probe_result;

/*
 * Measure dir's bandwidth (see the top) into *out. kind: the backend
 * (NTO_IO_AUTO: io_uring where the kernel allows it, else psync); direct: 1 to
 * use O_DIRECT unless the file system refuses it (then buffered, out->direct
 * 0), 0 to go through the page cache. The swap file is anonymous: nothing is
 * left in dir.
 * Returns 0; NTO_EINVAL (dir NULL, an unknown kind; before any I/O); NTO_EIO
 * ("swap dir <dir>: only <size> free, too little to measure its bandwidth",
 * statvfs or fdatasync failures, "write at offset <o>: <reason>" for a request
 * that failed, "I/O queue failed"), the errors of nto_swap_open and
 * nto_io_create (NTO_EUNSUPPORTED: io_uring asked for and refused),
 * NTO_ENOMEM. Blocks for the whole measurement (2 x bytes of I/O). Any
 * one thread; the calling thread owns the queue it creates and destroys.
 */
int nto_swap_probe(const char *dir, nto_io_kind kind, int direct,
                   uint64_t bytes, nto_swap_probe_result *out, nto_err *err);

#endif /* NTO_SWAP_PROBE_H */
