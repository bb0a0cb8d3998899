/*
 * iobackend.h - asynchronous reads and writes of a file (the swap file):
 * one request queue with two backends, io_uring (liburing, io/uring.c)
 * and psync (pread/pwrite performed synchronously when reaping,
 * io/psync.c), and fault injection for tests (io/iofault.c).
 *
 * Threads: a queue is owned by one thread: created, used and destroyed on
 * it (io_uring rings are not shared). Different threads may each own a
 * queue on the same file descriptor. Only nto_io_fault_set and the name
 * functions may be called from any thread.
 *
 * Usage: fill nto_io_req records, nto_io_submit each, nto_io_flush once,
 * then nto_io_reap until every request came back. A request is owned by
 * the caller but must not be touched (nor freed) between submit and reap.
 */
#ifndef NTO_IOBACKEND_H
#define NTO_IOBACKEND_H

#include "error.h"

#include <stddef.h>
#include <stdint.h>

typedef enum { NTO_IO_AUTO, NTO_IO_URING, NTO_IO_PSYNC } nto_io_kind;
typedef enum { NTO_IO_READ, NTO_IO_WRITE } nto_io_op;

typedef struct nto_io_req {
  nto_io_op op;
  void *buf;      /* len bytes; NTO_PAGE-aligned when the file is O_DIRECT */
  size_t len;     /* bytes; a multiple of NTO_PAGE for O_DIRECT */
  int64_t offset; /* file offset in bytes; NTO_PAGE-aligned for O_DIRECT */
  void *user;     /* caller's cookie, untouched */
  int result;     /* on completion: 0, or a negative errno (-EIO, -ENOSPC) */
  size_t done;    /* bytes transferred so far (backend-internal progress) */
  int fault_flip; /* backend-internal: the fault hook flips a byte of this
                     read when it completes (nto_io_fault.flip_nth) */
} nto_io_req;     /* owned by the caller; must stay valid until reaped */

typedef struct nto_io nto_io;

/* "auto", "io_uring" or "psync"; "?" for other values. Any thread. */
const char *nto_io_kind_name(nto_io_kind k);

/* "uring" or "io_uring", "psync", "auto" -> the kind; -1 if unknown or
 * NULL. Any thread. */
int nto_io_kind_parse(const char *s);

/*
 * Create a queue with up to depth (1..32768) requests in flight on fd
 * (not owned: the caller closes it after nto_io_destroy).
 * NTO_IO_URING: io_uring_queue_init(depth). Any failure there (ENOSYS: no
 *   kernel support; EPERM/EACCES: disabled by sysctl, seccomp or group;
 *   ENOMEM: RLIMIT_MEMLOCK on older kernels; EINVAL: unsupported setup) and
 *   a kernel lacking IORING_OP_READ/WRITE (before 5.6) return
 *   NTO_EUNSUPPORTED, "io_uring unavailable: <reason>": psync still works
 *   in every such case, so the caller can fall back to it.
 * NTO_IO_PSYNC: pread/pwrite.
 * NTO_IO_AUTO: io_uring, else psync without an error; see nto_io_kind_of.
 * Other errors: NTO_EINVAL (bad fd, depth or kind), NTO_ENOMEM.
 * Calling thread becomes the owner.
 */
int nto_io_create(nto_io **out, nto_io_kind kind, int fd, unsigned depth,
                  nto_err *err);

/* The backend in use: NTO_IO_URING or NTO_IO_PSYNC (never AUTO). */
nto_io_kind nto_io_kind_of(const nto_io *io);

/*
 * Queue r; sets r->done = 0 and r->result = 0. Never blocks. Up to depth
 * requests are handed to the kernel (uring: an SQE prepared, sent by the
 * next nto_io_flush or nto_io_reap); the others wait in a FIFO inside the
 * queue and are started, in order, as slots free up.
 * Returns 0, or NTO_ENOMEM if the FIFO could not grow (r not queued).
 */
int nto_io_submit(nto_io *io, nto_io_req *r);

/*
 * Send prepared requests to the kernel (uring: one io_uring_submit for the
 * batch). psync: no-op. Returns 0, or the negative errno of
 * io_uring_submit (the queue is then broken: destroy it).
 */
int nto_io_flush(nto_io *io);

/*
 * Reap completed requests into done[0..max). Flushes first. If wait and
 * nothing has completed yet while requests are pending, blocks until at
 * least one completes. A request completes when all len bytes are
 * transferred or on its first error; r->result is then 0 or a negative
 * errno. Short transfers are continued and -EAGAIN/-EINTR retried, both
 * invisibly; a transfer of 0 bytes before len (read past end of file)
 * completes with -EIO.
 * psync: performs up to max queued requests now, in FIFO order (wait is
 * irrelevant: every performed request is complete).
 * Returns the number of requests placed in done (0..max), or a negative
 * errno if the ring itself fails (the queue is then broken: destroy it).
 */
int nto_io_reap(nto_io *io, nto_io_req **done, int max, int wait);

/*
 * Register [base, base + len) (base NTO_PAGE-aligned) as the queue's fixed
 * buffer, replacing an earlier registration; base NULL or len 0 only drops
 * it. io_uring: IORING_REGISTER_BUFFERS, one iovec per GiB; requests whose
 * buffer lies within one of them go out as READ_FIXED / WRITE_FIXED, so
 * the kernel pins those pages once, here, instead of for every request
 * (hundreds of 1 MiB O_DIRECT requests per iteration). The pages
 * stay pinned, and for users without CAP_IPC_LOCK charged to
 * RLIMIT_MEMLOCK, until the registration is dropped or the queue
 * destroyed: unmap or madvise(MADV_DONTNEED) them only after dropping it,
 * or the kernel keeps transferring into the old pages. No request may be
 * pending. psync: nothing to do, returns 0.
 * Returns 0, or NTO_EUNSUPPORTED naming the reason (ENOMEM: RLIMIT_MEMLOCK;
 * nothing is registered then and requests go out as before), or
 * NTO_ENOMEM. Owner thread.
 */
int nto_io_register_buffer(nto_io *io, void *base, size_t len, nto_err *err);

/* Requests submitted and not yet reaped. */
unsigned nto_io_pending(const nto_io *io);

/*
 * Destroy the queue; requests still pending are waited for (psync:
 * performed) and dropped without being reported. NULL ok. Owner thread.
 */
void nto_io_destroy(nto_io *io);

/*
 * Fault injection for tests. Process-global, thread-safe (atomics).
 * Requests of operation op are counted from 1 at nto_io_submit, across all
 * queues, since the last nto_io_fault_set. fail_nth: that request completes
 * with result errno_neg (-EIO if errno_neg >= 0; -ENOSPC models a full
 * disk) without any I/O. short_nth: that request's first attempt transfers
 * only half of its bytes (rounded down to NTO_PAGE on an O_DIRECT file;
 * not split when that is 0), so the backend continues it with the rest;
 * short_nth < 0 does this to every request of op.
 * flip_nth (reads only; ignored when op is NTO_IO_WRITE): that request
 * completes normally, but with the byte at flip_at of its buffer (clamped
 * to len - 1) inverted after the data arrived: media corruption, which
 * the offload engine's checksums must catch. 0 = off. Counting is exact
 * when the hook is set while no other thread submits.
 */
typedef struct nto_io_fault {
  nto_io_op op;
  int fail_nth;
  int errno_neg;
  int short_nth;
  int delay_us; /* every request of op: the submitting thread sleeps this
                   long first (a slow device; tests of the adaptive
                   window) */
  int flip_nth;
  size_t flip_at;
} nto_io_fault;

/* Set the fault injection (a copy is taken); NULL clears it. */
void nto_io_fault_set(const nto_io_fault *f);

/* Faults actually applied since the last nto_io_fault_set: failed
 * requests, requests really split, bytes flipped. Lets a test check that
 * its fault hit. Any thread. */
unsigned nto_io_fault_fired(void);

/*
 * Parse a fault specification "OP:N:KIND" (the NTO_FAULT test hook of the
 * offload engine): OP is read or write; N >= 1 is the request to hit,
 * counted as above; KIND is eio (fail with EIO), enospc (fail with
 * ENOSPC), short (a short transfer) or flip (a byte of the buffer flipped;
 * reads only). Fills *f (flip_at 0). Returns 0, or NTO_EINVAL with a
 * message quoting s. Any thread.
 */
int nto_io_fault_parse(const char *s, nto_io_fault *f, nto_err *err);

#endif /* NTO_IOBACKEND_H */
