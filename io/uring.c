/*
 * uring.c - the io_uring backend of the request queue (iobackend.h,
 * io/iobackend-impl.h).
 *
 * DESIGN
 * Requests move from the head of the queue's FIFO into SQEs while fewer
 * than `depth` are in flight (`inflight` counts SQEs prepared and not yet
 * completed, whether or not they were sent); nto_io_flush() sends the
 * prepared SQEs with one io_uring_submit. Because inflight <= depth <= SQ
 * entries and the CQ ring has 2 * depth entries, an SQE is always
 * available for a request we start, and the CQ never overflows.
 * `user_data` is the request pointer. Reaping drains the CQ in one batch
 * (io_uring_for_each_cqe + io_uring_cq_advance) and, when asked to wait
 * and nothing completed, flushes (which also sends retries prepared while
 * draining) and blocks in io_uring_wait_cqe, then drains again; before
 * returning it refills the freed slots from the FIFO and flushes. A
 * completion that leaves bytes to transfer (nto_io_advance) is prepared
 * again at once, in the slot it just freed, so retries go ahead of
 * requests still waiting in the FIFO.
 *
 * The fault wrapper's flags: a request it fails never reaches the kernel:
 * it goes to a second FIFO, `ready`, reaped first; a shortened one's
 * first SQE asks for half of its bytes (nto_io_chunk); every completion
 * goes through nto_io_fault_complete (the byte flip).
 *
 * A registered buffer (nto_io_register_buffer) is one iovec per GiB;
 * requests whose buffer lies within one of them go out as READ_FIXED /
 * WRITE_FIXED. Invariant: pending == inflight + wait.len + ready.len.
 */
#include "iobackend-impl.h"

#include <errno.h>
#include <liburing.h>
#include <stdlib.h>
#include <string.h>

/* Bytes per registered iovec: the kernel takes at most 1 GiB each. */
#define FIXED_SPAN ((size_t)1 << 30)

typedef struct uring {
  struct io_uring ring;
  unsigned inflight; /* SQEs prepared and not yet completed */
  nto_io_fifo ready; /* failed by the fault wrapper, not yet reaped */
  char *fixed;       /* the registered buffer, or NULL; iovecs of
                        FIXED_SPAN bytes, the last one shorter */
  size_t fixed_len;
} uring;

/* The registered iovec that holds [buf, buf + len) whole, or -1. */
static int fixed_index(const uring *u, const char *buf, size_t len) {
  if (!u->fixed || buf < u->fixed || len > u->fixed_len ||
      (size_t)(buf - u->fixed) > u->fixed_len - len)
    return -1;
  size_t at = (size_t)(buf - u->fixed), k = at / FIXED_SPAN;
  return (at + len - 1) / FIXED_SPAN == k ? (int)k : -1;
}

/*
 * Prepare an SQE for the next attempt of r (see nto_io_chunk for
 * shorten). An SQE must be available (has_slot): a registered buffer's
 * request goes out as READ_FIXED / WRITE_FIXED.
 */
static void prep(nto_io *io, nto_io_req *r, int shorten) {
  uring *u = io->be;
  struct io_uring_sqe *sqe = io_uring_get_sqe(&u->ring);
  char *buf = (char *)r->buf + r->done;
  uint64_t off = (uint64_t)r->offset + r->done;
  unsigned len = (unsigned)nto_io_chunk(io, r, shorten);
  int idx = fixed_index(u, buf, len);
  if (idx >= 0 && r->op == NTO_IO_READ)
    io_uring_prep_read_fixed(sqe, io->fd, buf, len, off, idx);
  else if (idx >= 0)
    io_uring_prep_write_fixed(sqe, io->fd, buf, len, off, idx);
  else if (r->op == NTO_IO_READ)
    io_uring_prep_read(sqe, io->fd, buf, len, off);
  else
    io_uring_prep_write(sqe, io->fd, buf, len, off);
  io_uring_sqe_set_data(sqe, r);
  u->inflight++;
}

static int has_slot(nto_io *io) {
  uring *u = io->be;
  return u->inflight < io->depth && io_uring_sq_space_left(&u->ring) > 0;
}

/* Start waiting requests while slots are free. */
static void fill(nto_io *io) {
  while (io->wait.len > 0 && has_slot(io)) {
    nto_io_slot s = nto_io_fifo_pop(&io->wait);
    prep(io, s.r, s.shorten);
  }
}

/* Fill, then send every prepared SQE. Returns 0 or a negative errno. */
static int uring_flush(nto_io *io) {
  uring *u = io->be;
  fill(io);
  while (io_uring_sq_ready(&u->ring) > 0) {
    int rc = io_uring_submit(&u->ring);
    if (rc == -EINTR)
      continue;
    if (rc < 0)
      return rc;
    if (rc == 0)
      break;
  }
  return 0;
}

static int uring_submit(nto_io *io, nto_io_slot s) {
  uring *u = io->be;
  if (nto_io_fifo_push(s.fail ? &u->ready : &io->wait, s) != 0)
    return -1;
  fill(io);
  return 0;
}

/* Handle one completion. Returns 1 and sets *out when a request is
 * complete, 0 when it was prepared again. */
static int on_cqe(nto_io *io, const struct io_uring_cqe *cqe,
                  nto_io_req **out) {
  uring *u = io->be;
  nto_io_req *r = io_uring_cqe_get_data(cqe);
  u->inflight--;
  if (!nto_io_advance(r, cqe->res)) {
    if (has_slot(io)) {
      prep(io, r, 0);
      return 0;
    }
    r->result = -EBUSY; /* cannot happen: this completion freed a slot */
  }
  nto_io_fault_complete(r);
  *out = r;
  return 1;
}

/* Handle the completions already posted, up to max finished requests. */
static int drain(nto_io *io, nto_io_req **done, int max) {
  uring *u = io->be;
  struct io_uring_cqe *cqe;
  unsigned head, seen = 0;
  int n = 0;
  io_uring_for_each_cqe(&u->ring, head, cqe) {
    if (n == max)
      break;
    seen++;
    n += on_cqe(io, cqe, &done[n]);
  }
  io_uring_cq_advance(&u->ring, seen);
  return n;
}

/* Reap requests failed by the fault wrapper, up to max. */
static int reap_ready(uring *u, nto_io_req **done, int max) {
  int n = 0;
  while (n < max && u->ready.len > 0) {
    nto_io_slot s = nto_io_fifo_pop(&u->ready);
    s.r->result = s.fail;
    done[n++] = s.r;
  }
  return n;
}

static int uring_reap(nto_io *io, nto_io_req **done, int max, int wait) {
  uring *u = io->be;
  int n;
  for (;;) {
    n = reap_ready(u, done, max);
    n += drain(io, done + n, max - n);
    if (n > 0 || !wait || io->pending == 0)
      break;
    /* Flush right before waiting: draining may have prepared retries. */
    int rc = uring_flush(io);
    if (rc < 0)
      return rc;
    struct io_uring_cqe *cqe;
    rc = io_uring_wait_cqe(&u->ring, &cqe);
    if (rc < 0 && rc != -EINTR)
      return rc;
  }
  int rc = uring_flush(io); /* start what the reaped requests freed room for */
  return n > 0 || rc >= 0 ? n : rc;
}

static int uring_register(nto_io *io, void *base, size_t len, nto_err *err) {
  uring *u = io->be;
  if (u->fixed)
    io_uring_unregister_buffers(&u->ring);
  u->fixed = NULL;
  u->fixed_len = 0;
  if (!base || len == 0)
    return 0;
  unsigned n = (unsigned)((len + FIXED_SPAN - 1) / FIXED_SPAN);
  struct iovec *v = calloc(n, sizeof *v);
  if (!v)
    return nto_err_set(err, NTO_ENOMEM, "out of memory");
  for (unsigned k = 0; k < n; k++) {
    v[k].iov_base = (char *)base + k * FIXED_SPAN;
    v[k].iov_len = k + 1 < n ? FIXED_SPAN : len - k * FIXED_SPAN;
  }
  int rc = io_uring_register_buffers(&u->ring, v, n);
  free(v);
  if (rc < 0)
    return nto_err_set(
        err, NTO_EUNSUPPORTED, "registering %zu bytes of buffers: %s%s", len,
        strerror(-rc), rc == -ENOMEM ? " (RLIMIT_MEMLOCK, ulimit -l)" : "");
  u->fixed = base;
  u->fixed_len = len;
  return 0;
}

/* Set up the ring; NTO_EUNSUPPORTED "io_uring unavailable: ..." if the
 * kernel refuses it or lacks the read/write opcodes. */
static int uring_init(nto_io *io, nto_err *err) {
  uring *u = calloc(1, sizeof *u);
  if (!u)
    return nto_err_set(err, NTO_ENOMEM, "io: out of memory");
  int rc = io_uring_queue_init(io->depth, &u->ring, 0);
  if (rc < 0) {
    free(u);
    return nto_err_set(err, NTO_EUNSUPPORTED, "io_uring unavailable: %s",
                       strerror(-rc));
  }
  struct io_uring_probe *p = io_uring_get_probe_ring(&u->ring);
  int ok = p != NULL && io_uring_opcode_supported(p, IORING_OP_READ) &&
           io_uring_opcode_supported(p, IORING_OP_WRITE);
  io_uring_free_probe(p);
  if (ok) {
    io->be = u;
    return 0;
  }
  io_uring_queue_exit(&u->ring);
  free(u);
  return nto_err_set(err, NTO_EUNSUPPORTED,
                     "io_uring unavailable: the kernel lacks IORING_OP_READ "
                     "and IORING_OP_WRITE (Linux 5.6 or later needed)");
}

static void uring_fini(nto_io *io) {
  uring *u = io->be;
  io_uring_queue_exit(&u->ring);
  free(u->ready.v);
  free(u);
  io->be = NULL;
}

const nto_io_ops nto_io_uring_ops = {
    .kind = NTO_IO_URING,
    .init = uring_init,
    .fini = uring_fini,
    .submit = uring_submit,
    .flush = uring_flush,
    .reap = uring_reap,
    .register_buffer = uring_register,
};
