/*
 * iofault.c - fault injection of the request queue (iobackend.h), a
 * wrapper around the backends: nto_io_fault_set / fired / parse, and the
 * hooks of io/iobackend-impl.h.
 *
 * DESIGN
 * The wrapper decides, the backends honour. At nto_io_submit the wrapper
 * (nto_io_fault_plan) sleeps the delay, counts the request among those of
 * its operation, and chooses its faults: fail (the slot's errno: the
 * backend completes the request with it, without I/O), shorten (the
 * backend's first attempt asks for half of the bytes: the backend's own
 * continuation of short transfers then does the rest) and flip (the
 * request's fault_flip: when it completes without error, the backend
 * calls nto_io_fault_complete, which inverts one byte of the data that
 * arrived). So the continuation of short transfers that tests exercise is
 * the backends' real one.
 *
 * Threads. The state is process-global and shared by every queue of
 * every thread: a set of atomics, set by nto_io_fault_set, counted with
 * fetch-add. Counting is exact when the hook is set while no other thread
 * submits.
 */
#include "iobackend-impl.h"

#include <errno.h>
#include <stdatomic.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

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

nto_io_slot nto_io_fault_plan(nto_io_req *r) {
  nto_io_slot s = {r, 0, 0};
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

void nto_io_fault_split(void) { atomic_fetch_add(&fault_fired, 1u); }

void nto_io_fault_complete(nto_io_req *r) {
  if (!r->fault_flip || r->result != 0 || r->len == 0)
    return;
  size_t at = atomic_load(&fault_flip_at);
  ((unsigned char *)r->buf)[at < r->len ? at : r->len - 1] ^= 0xff;
  r->fault_flip = 0;
  atomic_fetch_add(&fault_fired, 1u);
}
