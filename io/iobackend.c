/*
 * iobackend.c - request queue over io_uring or pread/pwrite. See
 * iobackend.h.
 *
 * DESIGN
 * Queue. nto_io_submit() appends the request to a FIFO (`wait`, a growable
 * ring of slots). The uring backend then moves requests from the head of
 * the FIFO into SQEs while fewer than `depth` are in flight (`inflight`
 * counts SQEs prepared and not yet completed, whether or not they were
 * sent); nto_io_flush() sends the prepared SQEs with one io_uring_submit.
 * Because inflight <= depth <= SQ entries and the CQ ring has 2 * depth
 * entries, an SQE is always available for a request we start, and the CQ
 * never overflows. `user_data` is the request pointer. nto_io_reap()
 * drains the CQ in one batch (io_uring_for_each_cqe + io_uring_cq_advance)
 * and, when asked to wait and nothing completed, flushes (which also sends
 * retries prepared while draining) and blocks in io_uring_wait_cqe, then
 * drains again; before returning it refills the freed slots from the FIFO
 * and flushes. A request the fault hook fails never reaches the kernel: it
 * goes to a second FIFO, `ready`, reaped first. A read the flip fault
 * chose (r->fault_flip) gets one byte inverted when it completes without
 * error, in either backend, before it is reaped. The psync backend keeps
 * requests in `wait` and performs them, in order, inside nto_io_reap.
 * Invariant: pending == inflight + wait.len + ready.len.
 *
 * Requeue rules (advance(), shared by both backends). An attempt transfers
 * the rest of the request, r->len - r->done bytes at r->offset + r->done
 * (capped at IO_MAX_CHUNK; the first attempt of a request chosen by the
 * short_nth fault asks for half only, so it returns short). Its result res:
 *   -EAGAIN, -EINTR      the same rest is tried again;
 *   other res < 0        the request completes with result res;
 *   0 with bytes left    the request completes with -EIO (end of file);
 *   0 < res < rest       done += res and the new rest is tried again;
 *   res == rest          the request completes with result 0.
 * uring re-prepares a retried request at once, in the slot its completion
 * just freed, so retries go ahead of requests still waiting in the FIFO.
 *
 * Threads. A queue belongs to the thread that created it: io_uring rings
 * are not shared (a ring's SQ and CQ are single-producer/single-consumer
 * without locks), and the FIFO has no lock either. The only shared state is
 * the fault-injection hook, a set of atomics.
 */
#include "iobackend.h"

#include "tensor.h"

#include <errno.h>
#include <fcntl.h>
#include <liburing.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/types.h>
#include <time.h>
#include <unistd.h>

#define IO_MAX_DEPTH 32768u     /* IORING_MAX_ENTRIES */
#define IO_MAX_CHUNK (1u << 30) /* largest single transfer, page multiple */
#define IO_FIFO_MIN 64u         /* initial FIFO capacity */

/* A submitted request with the faults chosen for it at submit time. */
typedef struct io_slot {
  nto_io_req *r;
  int fail;    /* 0, or the negative errno to complete with, without I/O */
  int shorten; /* 1: the first attempt asks for half of the bytes */
} io_slot;

/* Growable ring of slots: v[(head + i) % cap] for i in 0..len. */
typedef struct slot_fifo {
  io_slot *v;
  unsigned cap, head, len;
} slot_fifo;

struct nto_io {
  nto_io_kind kind; /* NTO_IO_URING or NTO_IO_PSYNC */
  int fd;           /* not owned */
  int direct;       /* fd is O_DIRECT: split transfers on page bounds */
  unsigned depth;
  unsigned inflight; /* uring: SQEs prepared and not yet completed */
  unsigned pending;  /* submitted and not yet reaped */
  slot_fifo wait;    /* submitted and not yet started */
  slot_fifo ready;   /* uring: failed by the fault hook, not yet reaped */
  struct io_uring ring;
  char *fixed; /* uring: the registered buffer (nto_io_register_buffer), or
                  NULL; iovecs of NTO_IO_FIXED_SPAN bytes, the last one
                  shorter */
  size_t fixed_len;
};

/* Bytes per registered iovec: the kernel takes at most 1 GiB each. */
#define NTO_IO_FIXED_SPAN ((size_t)1 << 30)

/* ------------------------------------------------------------ the FIFO */

static int fifo_grow(slot_fifo *q) {
  if (q->cap > UINT32_MAX / 2 / sizeof(io_slot))
    return -1;
  unsigned cap = q->cap ? q->cap * 2 : IO_FIFO_MIN;
  io_slot *v = malloc(cap * sizeof *v);
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

static int fifo_push(slot_fifo *q, io_slot s) {
  if (q->len == q->cap && fifo_grow(q) != 0)
    return -1;
  q->v[(q->head + q->len) % q->cap] = s;
  q->len++;
  return 0;
}

/* Remove and return the head; q must not be empty. */
static io_slot fifo_pop(slot_fifo *q) {
  io_slot s = q->v[q->head];
  q->head = (q->head + 1) % q->cap;
  q->len--;
  return s;
}

/* ------------------------------------------------------ fault injection */

static atomic_int fault_op, fault_fail, fault_errno, fault_short, fault_delay,
    fault_flip;
static atomic_size_t fault_flip_at;
static atomic_uint fault_count, fault_fired;

void nto_io_fault_set(const nto_io_fault *f) {
  atomic_store(&fault_fail, 0);
  atomic_store(&fault_short, 0);
  atomic_store(&fault_flip, 0);
  atomic_store(&fault_count, 0u);
  atomic_store(&fault_fired, 0u);
  atomic_store(&fault_delay, 0);
  if (f == NULL)
    return;
  atomic_store(&fault_op, (int)f->op);
  atomic_store(&fault_errno, f->errno_neg < 0 ? f->errno_neg : -EIO);
  atomic_store(&fault_flip_at, f->flip_at);
  atomic_store(&fault_short, f->short_nth < 0 ? -1 : f->short_nth);
  atomic_store(&fault_flip,
               f->flip_nth > 0 && f->op == NTO_IO_READ ? f->flip_nth : 0);
  atomic_store(&fault_fail, f->fail_nth > 0 ? f->fail_nth : 0);
  atomic_store(&fault_delay, f->delay_us > 0 ? f->delay_us : 0);
}

unsigned nto_io_fault_fired(void) { return atomic_load(&fault_fired); }

int nto_io_fault_parse(const char *s, nto_io_fault *f, nto_err *err) {
  static const char *const kinds[] = {"eio", "enospc", "short", "flip"};
  char op[8], kind[8];
  int n = 0, used = 0;
  memset(f, 0, sizeof *f);
  if (s == NULL ||
      sscanf(s, "%7[a-z]:%d:%7[a-z]%n", op, &n, kind, &used) != 3 ||
      s[used] != '\0' || n < 1 ||
      (strcmp(op, "read") != 0 && strcmp(op, "write") != 0))
    goto bad;
  f->op = op[0] == 'r' ? NTO_IO_READ : NTO_IO_WRITE;
  int k = 0;
  while (k < 4 && strcmp(kind, kinds[k]) != 0)
    k++;
  if (k == 4 || (k == 3 && f->op != NTO_IO_READ))
    goto bad;
  if (k <= 1) {
    f->fail_nth = n;
    f->errno_neg = k == 0 ? -EIO : -ENOSPC;
  } else if (k == 2) {
    f->short_nth = n;
  } else {
    f->flip_nth = n;
  }
  return 0;
bad:
  return nto_err_set(err, NTO_EINVAL,
                     "fault specification '%s': expected OP:N:KIND with OP "
                     "read or write, N >= 1, KIND eio, enospc, short or "
                     "flip (flip: reads only)",
                     s ? s : "(null)");
}

/* The slot for a newly submitted r, counting it for the fault hook. */
static io_slot slot_for(nto_io_req *r) {
  io_slot s = {r, 0, 0};
  int delay = atomic_load(&fault_delay);
  if (delay > 0 && (int)r->op == atomic_load(&fault_op)) {
    struct timespec ts = {delay / 1000000, (long)(delay % 1000000) * 1000};
    while (nanosleep(&ts, &ts) != 0 && errno == EINTR)
      ;
  }
  int fail = atomic_load(&fault_fail), sh = atomic_load(&fault_short);
  int flip = atomic_load(&fault_flip);
  if ((fail == 0 && sh == 0 && flip == 0) ||
      (int)r->op != atomic_load(&fault_op))
    return s;
  unsigned n = atomic_fetch_add(&fault_count, 1u) + 1u;
  if (n == (unsigned)fail) {
    s.fail = atomic_load(&fault_errno);
    atomic_fetch_add(&fault_fired, 1u);
  }
  s.shorten = sh < 0 || n == (unsigned)sh;
  r->fault_flip = n == (unsigned)flip && r->op == NTO_IO_READ;
  return s;
}

/* r completed: with the flip fault chosen for it and no error, invert
 * one byte of the data that arrived (media corruption). */
static void fault_complete(nto_io_req *r) {
  if (!r->fault_flip || r->result != 0 || r->len == 0)
    return;
  size_t at = atomic_load(&fault_flip_at);
  ((unsigned char *)r->buf)[at < r->len ? at : r->len - 1] ^= 0xff;
  r->fault_flip = 0;
  atomic_fetch_add(&fault_fired, 1u);
}

/* --------------------------------------------------------- requeue rules */

/*
 * Bytes of the next attempt of r: the rest, capped at IO_MAX_CHUNK; with
 * shorten (first attempt only), half of r instead (page-rounded on an
 * O_DIRECT file), unless that is 0.
 */
static size_t chunk(const nto_io *io, const nto_io_req *r, int shorten) {
  size_t rest = r->len - r->done;
  size_t c = rest > IO_MAX_CHUNK ? IO_MAX_CHUNK : rest;
  size_t half = r->len / 2;
  if (io->direct)
    half -= half % NTO_PAGE;
  if (!shorten || half == 0 || half >= c)
    return c;
  atomic_fetch_add(&fault_fired, 1u); /* really split */
  return half;
}

/*
 * Account one attempt of r that returned res (bytes, or a negative errno).
 * Returns 1 when r is complete (r->result set), 0 when the rest must be
 * tried again. See the requeue rules above.
 */
static int advance(nto_io_req *r, ssize_t res) {
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

/* ----------------------------------------------------------------- psync */

/* One pread/pwrite of the rest of r. Returns bytes or a negative errno. */
static ssize_t psync_once(const nto_io *io, const nto_io_req *r, int shorten) {
  char *buf = (char *)r->buf + r->done;
  off_t off = (off_t)(r->offset + (int64_t)r->done);
  size_t len = chunk(io, r, shorten);
  ssize_t n = r->op == NTO_IO_READ ? pread(io->fd, buf, len, off)
                                   : pwrite(io->fd, buf, len, off);
  return n < 0 ? -errno : n;
}

/* Perform s completely; sets s.r->result. */
static void psync_run(const nto_io *io, io_slot s) {
  nto_io_req *r = s.r;
  if (s.fail) {
    r->result = s.fail;
    return;
  }
  ssize_t res = psync_once(io, r, s.shorten);
  while (!advance(r, res))
    res = psync_once(io, r, 0);
  fault_complete(r);
}

static int psync_reap(nto_io *io, nto_io_req **done, int max) {
  int n = 0;
  while (n < max && io->wait.len > 0) {
    io_slot s = fifo_pop(&io->wait);
    psync_run(io, s);
    io->pending--;
    done[n++] = s.r;
  }
  return n;
}

/* -------------------------------------------------------------- io_uring */

/* The registered iovec that holds [buf, buf + len) whole, or -1. */
static int fixed_index(const nto_io *io, const char *buf, size_t len) {
  if (!io->fixed || buf < io->fixed || len > io->fixed_len ||
      (size_t)(buf - io->fixed) > io->fixed_len - len)
    return -1;
  size_t at = (size_t)(buf - io->fixed), k = at / NTO_IO_FIXED_SPAN;
  return (at + len - 1) / NTO_IO_FIXED_SPAN == k ? (int)k : -1;
}

/*
 * Prepare an SQE for the next attempt of r (see chunk() for shorten). An
 * SQE must be available (uring_has_slot): a registered buffer's request
 * goes out as READ_FIXED / WRITE_FIXED.
 */
static void uring_prep(nto_io *io, nto_io_req *r, int shorten) {
  struct io_uring_sqe *sqe = io_uring_get_sqe(&io->ring);
  char *buf = (char *)r->buf + r->done;
  uint64_t off = (uint64_t)r->offset + r->done;
  unsigned len = (unsigned)chunk(io, r, shorten);
  int idx = fixed_index(io, buf, len);
  if (idx >= 0 && r->op == NTO_IO_READ)
    io_uring_prep_read_fixed(sqe, io->fd, buf, len, off, idx);
  else if (idx >= 0)
    io_uring_prep_write_fixed(sqe, io->fd, buf, len, off, idx);
  else if (r->op == NTO_IO_READ)
    io_uring_prep_read(sqe, io->fd, buf, len, off);
  else
    io_uring_prep_write(sqe, io->fd, buf, len, off);
  io_uring_sqe_set_data(sqe, r);
  io->inflight++;
}

static int uring_has_slot(nto_io *io) {
  return io->inflight < io->depth && io_uring_sq_space_left(&io->ring) > 0;
}

/* Start waiting requests while slots are free. */
static void uring_fill(nto_io *io) {
  while (io->wait.len > 0 && uring_has_slot(io)) {
    io_slot s = fifo_pop(&io->wait);
    uring_prep(io, s.r, s.shorten);
  }
}

/* Fill, then send every prepared SQE. Returns 0 or a negative errno. */
static int uring_flush(nto_io *io) {
  uring_fill(io);
  while (io_uring_sq_ready(&io->ring) > 0) {
    int rc = io_uring_submit(&io->ring);
    if (rc == -EINTR)
      continue;
    if (rc < 0)
      return rc;
    if (rc == 0)
      break;
  }
  return 0;
}

/* Handle one completion. Returns 1 and sets *out when a request is
 * complete, 0 when it was prepared again. */
static int uring_cqe(nto_io *io, const struct io_uring_cqe *cqe,
                     nto_io_req **out) {
  nto_io_req *r = io_uring_cqe_get_data(cqe);
  io->inflight--;
  if (!advance(r, cqe->res)) {
    if (uring_has_slot(io)) {
      uring_prep(io, r, 0);
      return 0;
    }
    r->result = -EBUSY; /* cannot happen: this completion freed a slot */
  }
  fault_complete(r);
  io->pending--;
  *out = r;
  return 1;
}

/* Handle the completions already posted, up to max finished requests. */
static int uring_drain(nto_io *io, nto_io_req **done, int max) {
  struct io_uring_cqe *cqe;
  unsigned head, seen = 0;
  int n = 0;
  io_uring_for_each_cqe(&io->ring, head, cqe) {
    if (n == max)
      break;
    seen++;
    n += uring_cqe(io, cqe, &done[n]);
  }
  io_uring_cq_advance(&io->ring, seen);
  return n;
}

/* Reap requests failed by the fault hook, up to max. */
static int uring_ready(nto_io *io, nto_io_req **done, int max) {
  int n = 0;
  while (n < max && io->ready.len > 0) {
    io_slot s = fifo_pop(&io->ready);
    s.r->result = s.fail;
    io->pending--;
    done[n++] = s.r;
  }
  return n;
}

static int uring_reap(nto_io *io, nto_io_req **done, int max, int wait) {
  int n;
  for (;;) {
    n = uring_ready(io, done, max);
    n += uring_drain(io, done + n, max - n);
    if (n > 0 || !wait || io->pending == 0)
      break;
    /* Flush right before waiting: draining may have prepared retries. */
    int rc = uring_flush(io);
    if (rc < 0)
      return rc;
    struct io_uring_cqe *cqe;
    rc = io_uring_wait_cqe(&io->ring, &cqe);
    if (rc < 0 && rc != -EINTR)
      return rc;
  }
  int rc = uring_flush(io); /* start what the reaped requests freed room for */
  return n > 0 || rc >= 0 ? n : rc;
}

/* Set up the ring; NTO_EUNSUPPORTED "io_uring unavailable: ..." if the
 * kernel refuses it or lacks the read/write opcodes. */
static int uring_init(nto_io *io, nto_err *err) {
  int rc = io_uring_queue_init(io->depth, &io->ring, 0);
  if (rc < 0)
    return nto_err_set(err, NTO_EUNSUPPORTED, "io_uring unavailable: %s",
                       strerror(-rc));
  struct io_uring_probe *p = io_uring_get_probe_ring(&io->ring);
  int ok = p != NULL && io_uring_opcode_supported(p, IORING_OP_READ) &&
           io_uring_opcode_supported(p, IORING_OP_WRITE);
  io_uring_free_probe(p);
  if (ok)
    return 0;
  io_uring_queue_exit(&io->ring);
  return nto_err_set(err, NTO_EUNSUPPORTED,
                     "io_uring unavailable: the kernel lacks IORING_OP_READ "
                     "and IORING_OP_WRITE (Linux 5.6 or later needed)");
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
  io->kind = NTO_IO_PSYNC;
  if (kind != NTO_IO_PSYNC) {
    int rc = uring_init(io, kind == NTO_IO_URING ? err : NULL);
    if (rc == 0)
      io->kind = NTO_IO_URING;
    else if (kind == NTO_IO_URING) {
      free(io->wait.v);
      free(io);
      return rc;
    }
  }
  *out = io;
  return 0;
}

nto_io_kind nto_io_kind_of(const nto_io *io) { return io->kind; }

int nto_io_register_buffer(nto_io *io, void *base, size_t len, nto_err *err) {
  if (io->kind != NTO_IO_URING)
    return 0;
  if (io->fixed)
    io_uring_unregister_buffers(&io->ring);
  io->fixed = NULL;
  io->fixed_len = 0;
  if (!base || len == 0)
    return 0;
  unsigned n = (unsigned)((len + NTO_IO_FIXED_SPAN - 1) / NTO_IO_FIXED_SPAN);
  struct iovec *v = calloc(n, sizeof *v);
  if (!v)
    return nto_err_set(err, NTO_ENOMEM, "out of memory");
  for (unsigned k = 0; k < n; k++) {
    v[k].iov_base = (char *)base + k * NTO_IO_FIXED_SPAN;
    v[k].iov_len = k + 1 < n ? NTO_IO_FIXED_SPAN : len - k * NTO_IO_FIXED_SPAN;
  }
  int rc = io_uring_register_buffers(&io->ring, v, n);
  free(v);
  if (rc < 0)
    return nto_err_set(
        err, NTO_EUNSUPPORTED, "registering %zu bytes of buffers: %s%s", len,
        strerror(-rc), rc == -ENOMEM ? " (RLIMIT_MEMLOCK, ulimit -l)" : "");
  io->fixed = base;
  io->fixed_len = len;
  return 0;
}

int nto_io_submit(nto_io *io, nto_io_req *r) {
  r->done = 0;
  r->result = 0;
  r->fault_flip = 0;
  io_slot s = slot_for(r);
  int failed = s.fail != 0 && io->kind == NTO_IO_URING;
  if (fifo_push(failed ? &io->ready : &io->wait, s) != 0)
    return NTO_ENOMEM;
  io->pending++;
  if (io->kind == NTO_IO_URING)
    uring_fill(io);
  return 0;
}

int nto_io_flush(nto_io *io) {
  return io->kind == NTO_IO_URING ? uring_flush(io) : 0;
}

int nto_io_reap(nto_io *io, nto_io_req **done, int max, int wait) {
  if (max <= 0)
    return 0;
  if (io->kind == NTO_IO_URING)
    return uring_reap(io, done, max, wait);
  return psync_reap(io, done, max);
}

unsigned nto_io_pending(const nto_io *io) { return io->pending; }

void nto_io_destroy(nto_io *io) {
  if (io == NULL)
    return;
  nto_io_req *sink[16];
  while (io->pending > 0 && nto_io_reap(io, sink, 16, 1) > 0)
    ;
  if (io->kind == NTO_IO_URING)
    io_uring_queue_exit(&io->ring);
  free(io->wait.v);
  free(io->ready.v);
  free(io);
}
