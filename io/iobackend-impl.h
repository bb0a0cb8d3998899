/*
 * iobackend-impl.h - inside the request queue of iobackend.h: the queue
 * itself, the ops table a backend fills (io/uring.c, io/psync.c), what
 * both share (the FIFO of waiting requests, the requeue rules of a short
 * transfer) and the fault-injection wrapper's hooks (io/iofault.c).
 * Private to io/iobackend.c, io/uring.c, io/psync.c and io/iofault.c.
 *
 * Threads: as iobackend.h: a queue and everything in it belong to the
 * thread that created it; only the fault wrapper's state is shared
 * (atomics, io/iofault.c).
 */
#ifndef NTO_IOBACKEND_IMPL_H
#define NTO_IOBACKEND_IMPL_H

#include "iobackend.h"

#include <sys/types.h>

#define NTO_IO_MAX_CHUNK (1u << 30) /* largest single transfer, bytes */

/* A submitted request and what the fault wrapper chose for it at submit
 * time; the backends honour these flags. */
typedef struct nto_io_slot {
  nto_io_req *r;
  int fail;    /* 0, or the negative errno to complete with, without I/O */
  int shorten; /* 1: the first attempt asks for half of the bytes */
} nto_io_slot;

/* A growable ring of slots: v[(head + i) % cap] for i in 0..len. */
typedef struct nto_io_fifo {
  nto_io_slot *v;
  unsigned cap, head, len;
} nto_io_fifo;

typedef struct nto_io_ops nto_io_ops;

struct nto_io {
  const nto_io_ops *ops;
  nto_io_kind kind; /* NTO_IO_URING or NTO_IO_PSYNC */
  int fd;           /* not owned */
  int direct;       /* fd is O_DIRECT: split transfers on page bounds */
  unsigned depth;   /* requests in flight at most (1..32768) */
  unsigned pending; /* submitted and not yet reaped */
  nto_io_fifo wait; /* submitted and not yet started, in order */
  void *be;         /* the backend's own state (ops->init), or NULL */
};

/*
 * A backend. Every function runs on the queue's owner thread; a NULL
 * entry means "nothing to do" (returns 0). The shared code keeps
 * io->pending: +1 after submit succeeds, -n after reap returned n.
 */
struct nto_io_ops {
  nto_io_kind kind;
  /* Set up io->be. Returns 0 or NTO_EUNSUPPORTED / NTO_ENOMEM with err. */
  int (*init)(nto_io *io, nto_err *err);
  /* Free io->be; nothing is pending any more. */
  void (*fini)(nto_io *io);
  /* Queue s (never blocks). Returns 0, or -1 if out of memory (s not
   * queued). */
  int (*submit)(nto_io *io, nto_io_slot s);
  /* Send prepared requests. Returns 0 or a negative errno. */
  int (*flush)(nto_io *io);
  /* Complete up to max (>= 1) requests into done, as nto_io_reap. */
  int (*reap)(nto_io *io, nto_io_req **done, int max, int wait);
  /* As nto_io_register_buffer. */
  int (*register_buffer)(nto_io *io, void *base, size_t len, nto_err *err);
};

extern const nto_io_ops nto_io_uring_ops;
extern const nto_io_ops nto_io_psync_ops;

/* ------------------------------------------- shared (io/iobackend.c) */

/* Append s. Returns 0, or -1 if the FIFO could not grow. */
int nto_io_fifo_push(nto_io_fifo *q, nto_io_slot s);

/* Remove and return the head; q must not be empty. */
nto_io_slot nto_io_fifo_pop(nto_io_fifo *q);

/*
 * Bytes of the next attempt of r: the rest, r->len - r->done, capped at
 * NTO_IO_MAX_CHUNK; with shorten (a first attempt the wrapper chose),
 * half of r instead (page-rounded on an O_DIRECT file), unless that is
 * 0: then the split is counted as fired (nto_io_fault_fired).
 */
size_t nto_io_chunk(const nto_io *io, const nto_io_req *r, int shorten);

/*
 * Account one attempt of r that returned res (bytes, or a negative
 * errno). Returns 1 when r is complete (r->result set), 0 when the rest
 * must be tried again. See the requeue rules in io/iobackend.c.
 */
int nto_io_advance(nto_io_req *r, ssize_t res);

/* -------------------------------------- the fault wrapper (io/iofault.c) */

/* The slot of a newly submitted r: sleeps the delay, counts r and decides
 * its faults (fail, shorten; sets r->fault_flip). Any thread. */
nto_io_slot nto_io_fault_plan(nto_io_req *r);

/* A first attempt was really shortened: counts it as fired. */
void nto_io_fault_split(void);

/* r completed: if the wrapper chose to flip a byte of it (r->fault_flip)
 * and it succeeded, invert that byte of its buffer and count it. The
 * backends call this on every completion. */
void nto_io_fault_complete(nto_io_req *r);

#endif /* NTO_IOBACKEND_IMPL_H */
