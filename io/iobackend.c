/*
 * iobackend.c - the request queue of iobackend.h: its public functions,
 * dispatching to a backend's ops table (io/iobackend-impl.h: io/uring.c,
 * io/psync.c), and what the backends share.
 *
 * DESIGN
 * Queue. nto_io_submit() lets the fault wrapper (io/iofault.c) choose the
 * request's faults, then hands the slot to the backend, which appends it
 * to the FIFO `wait` (a growable ring of slots) and starts what it can:
 * uring moves requests from the head of the FIFO into SQEs while fewer
 * than `depth` are in flight; psync keeps them in the FIFO and performs
 * them, in order, inside nto_io_reap. `pending` counts submitted requests
 * not yet reaped, whichever backend holds them.
 *
 * Requeue rules (nto_io_advance, shared by both backends). An attempt
 * transfers the rest of the request, r->len - r->done bytes at r->offset +
 * r->done (capped at NTO_IO_MAX_CHUNK; the first attempt of a request the
 * fault wrapper chose to shorten asks for half only, so it returns short).
 * Its result res:
 *   -EAGAIN, -EINTR      the same rest is tried again;
 *   other res < 0        the request completes with result res;
 *   0 with bytes left    the request completes with -EIO (end of file);
 *   0 < res < rest       done += res and the new rest is tried again;
 *   res == rest          the request completes with result 0.
 *
 * Threads. A queue belongs to the thread that created it: io_uring rings
 * are not shared (a ring's SQ and CQ are single-producer/single-consumer
 * without locks), and the FIFO has no lock either. The only shared state
 * is the fault wrapper's, a set of atomics.
 */
#include "iobackend-impl.h"

#include "tensor.h"

#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>

#define IO_MAX_DEPTH 32768u /* IORING_MAX_ENTRIES */
#define IO_FIFO_MIN 64u     /* initial FIFO capacity */

/* ------------------------------------------------------------ the FIFO */

static int fifo_grow(nto_io_fifo *q) {
  if (q->cap > UINT32_MAX / 2 / sizeof(nto_io_slot))
    return -1;
  unsigned cap = q->cap ? q->cap * 2 : IO_FIFO_MIN;
  nto_io_slot *v = malloc(cap * sizeof *v);
  if (v == NULL)
    return -1;
  for (unsigned i = 0; i < q->len; i++)
    v[i] = q->v[(q->head + i) % q->cap];
  free(q->v);
  q->v = v;
  q->cap = cap;
  q->head = 0;
  return 0;
}

int nto_io_fifo_push(nto_io_fifo *q, nto_io_slot s) {
  if (q->len == q->cap && fifo_grow(q) != 0)
    return -1;
  q->v[(q->head + q->len) % q->cap] = s;
  q->len++;
  return 0;
}

nto_io_slot nto_io_fifo_pop(nto_io_fifo *q) {
  nto_io_slot s = q->v[q->head];
  q->head = (q->head + 1) % q->cap;
  q->len--;
  return s;
}

/* --------------------------------------------------------- requeue rules */

size_t nto_io_chunk(const nto_io *io, const nto_io_req *r, int shorten) {
  size_t rest = r->len - r->done;
  size_t c = rest > NTO_IO_MAX_CHUNK ? NTO_IO_MAX_CHUNK : rest;
  size_t half = r->len / 2;
  if (io->direct)
    half -= half % NTO_PAGE;
  if (!shorten || half == 0 || half >= c)
    return c;
  nto_io_fault_split(); /* really split */
  return half;
}

int nto_io_advance(nto_io_req *r, ssize_t res) {
  if (res == -EAGAIN || res == -EINTR)
    return 0;
  if (res < 0) {
    r->result = (int)res;
    return 1;
  }
  if (res == 0 && r->done < r->len) {
    r->result = -EIO;
    return 1;
  }
  r->done += (size_t)res;
  return r->done >= r->len;
}

/* ------------------------------------------------------------ the queue */

const char *nto_io_kind_name(nto_io_kind k) {
  switch (k) {
  case NTO_IO_AUTO:
    return "auto";
  case NTO_IO_URING:
    return "io_uring";
  case NTO_IO_PSYNC:
    return "psync";
  }
  return "?";
}

int nto_io_kind_parse(const char *s) {
  if (s == NULL)
    return -1;
  if (strcmp(s, "uring") == 0 || strcmp(s, "io_uring") == 0)
    return NTO_IO_URING;
  if (strcmp(s, "psync") == 0)
    return NTO_IO_PSYNC;
  if (strcmp(s, "auto") == 0)
    return NTO_IO_AUTO;
  return -1;
}

/* Set io up with backend ops. Returns 0 or the backend's error. */
static int use_backend(nto_io *io, const nto_io_ops *ops, nto_err *err) {
  io->ops = ops;
  io->kind = ops->kind;
  return ops->init ? ops->init(io, err) : 0;
}

int nto_io_create(nto_io **out, nto_io_kind kind, int fd, unsigned depth,
                  nto_err *err) {
  if (out == NULL || depth == 0 || depth > IO_MAX_DEPTH ||
      (kind != NTO_IO_AUTO && kind != NTO_IO_URING && kind != NTO_IO_PSYNC))
    return nto_err_set(err, NTO_EINVAL,
                       "io: invalid arguments (kind %d, depth %u)", (int)kind,
                       depth);
  int fl = fd < 0 ? -1 : fcntl(fd, F_GETFL);
  if (fl < 0)
    return nto_err_set(err, NTO_EINVAL, "io: bad file descriptor %d", fd);
  nto_io *io = calloc(1, sizeof *io);
  if (io == NULL || fifo_grow(&io->wait) != 0) {
    free(io);
    return nto_err_set(err, NTO_ENOMEM, "io: out of memory");
  }
  io->fd = fd;
  io->direct = (fl & O_DIRECT) != 0;
  io->depth = depth;
  int rc = 0;
  if (kind != NTO_IO_PSYNC) /* AUTO: io_uring where it works, silently */
    rc = use_backend(io, &nto_io_uring_ops, kind == NTO_IO_URING ? err : NULL);
  if (kind == NTO_IO_PSYNC || (rc != 0 && kind == NTO_IO_AUTO))
    rc = use_backend(io, &nto_io_psync_ops, err);
  if (rc != 0) {
    free(io->wait.v);
    free(io);
    return rc;
  }
  *out = io;
  return 0;
}

nto_io_kind nto_io_kind_of(const nto_io *io) { return io->kind; }

int nto_io_register_buffer(nto_io *io, void *base, size_t len, nto_err *err) {
  return io->ops->register_buffer ? io->ops->register_buffer(io, base, len, err)
                                  : 0;
}

int nto_io_submit(nto_io *io, nto_io_req *r) {
  r->done = 0;
  r->result = 0;
  r->fault_flip = 0;
  if (io->ops->submit(io, nto_io_fault_plan(r)) != 0)
    return NTO_ENOMEM;
  io->pending++;
  return 0;
}

int nto_io_flush(nto_io *io) { return io->ops->flush ? io->ops->flush(io) : 0; }

int nto_io_reap(nto_io *io, nto_io_req **done, int max, int wait) {
  if (max <= 0)
    return 0;
  int n = io->ops->reap(io, done, max, wait);
  if (n > 0)
    io->pending -= (unsigned)n;
  return n;
}

unsigned nto_io_pending(const nto_io *io) { return io->pending; }

void nto_io_destroy(nto_io *io) {
  if (io == NULL)
    return;
  nto_io_req *sink[16];
  while (io->pending > 0 && nto_io_reap(io, sink, 16, 1) > 0)
    ;
  if (io->ops->fini)
    io->ops->fini(io);
  free(io->wait.v);
  free(io);
}
