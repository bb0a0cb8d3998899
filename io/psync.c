/*
 * psync.c - the pread/pwrite backend of the request queue (iobackend.h,
 * io/iobackend-impl.h): requests wait in the queue's FIFO and are
 * performed synchronously, in order, when reaped; each is continued until
 * complete by the shared requeue rules (nto_io_advance). The fault
 * wrapper's flags: a failed request completes with its errno, without
 * I/O, when its turn comes; a shortened one's first pread/pwrite asks for
 * half of its bytes; every completion goes through nto_io_fault_complete.
 */
#include "iobackend-impl.h"

#include <errno.h>
#include <unistd.h>

/* One pread/pwrite of the rest of r. Returns bytes or a negative errno. */
static ssize_t once(const nto_io *io, const nto_io_req *r, int shorten) {
  char *buf = (char *)r->buf + r->done;
  off_t off = (off_t)(r->offset + (int64_t)r->done);
  size_t len = nto_io_chunk(io, r, shorten);
  ssize_t n = r->op == NTO_IO_READ ? pread(io->fd, buf, len, off)
                                   : pwrite(io->fd, buf, len, off);
  return n < 0 ? -errno : n;
}

/* Perform s completely; sets s.r->result. */
static void run(const nto_io *io, nto_io_slot s) {
  nto_io_req *r = s.r;
  if (s.fail) {
    r->result = s.fail;
    return;
  }
  ssize_t res = once(io, r, s.shorten);
  while (!nto_io_advance(r, res))
    res = once(io, r, 0);
  nto_io_fault_complete(r);
}

static int psync_submit(nto_io *io, nto_io_slot s) {
  return nto_io_fifo_push(&io->wait, s);
}

/* Performs up to max waiting requests now (wait is irrelevant: each one
 * performed is complete). */
static int psync_reap(nto_io *io, nto_io_req **done, int max, int wait) {
  (void)wait;
  int n = 0;
  while (n < max && io->wait.len > 0) {
    nto_io_slot s = nto_io_fifo_pop(&io->wait);
    run(io, s);
    done[n++] = s.r;
  }
  return n;
}

const nto_io_ops nto_io_psync_ops = {
    .kind = NTO_IO_PSYNC,
    .submit = psync_submit,
    .reap = psync_reap,
};
