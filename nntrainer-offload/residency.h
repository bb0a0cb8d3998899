/*
 * residency.h - where a pass's tensors are while the executor runs it:
 * the interface the executor (exec.h) runs against, with two
 * implementations: the all-resident arena (arena.h) and the offload
 * engine (offload.h, nto_offload_residency).
 *
 * A pass is driven as
 *   for s in 0..S-1: begin(pass, s); run step s; end(s)
 * Between begin and end, every tensor step s uses (plan.h) is resident:
 * its nto_tensor.data is valid. Elsewhere no tensor's data may be kept.
 *
 * Calls: the executor's thread, one at a time; every function returns 0
 * or a negative nto code with a message (the offload engine's NTO_EIO
 * names the tensor).
 */
#ifndef NTO_RESIDENCY_H
#define NTO_RESIDENCY_H

#include "error.h"

typedef struct nto_residency nto_residency;

typedef struct nto_residency_ops {
  /* Before step s of pass `pass` (steps.h NTO_PASS_*): waits until step
   * s's tensors are resident. */
  int (*begin)(nto_residency *r, int pass, int s, nto_err *err);
  /* After step s ran: what no longer needs to be resident may leave. */
  int (*end)(nto_residency *r, int s, nto_err *err);
  /* Empty what is in flight: after a pass abandoned midway, before
   * synchronous access. */
  int (*drain)(nto_residency *r, nto_err *err);
  /* Synchronous access to persistent tensor t (weights, optimizer state)
   * between passes: copy its content (the tensor's element count of
   * floats) out to dst, in from src, or make it zeros. */
  int (*fetch)(nto_residency *r, int t, float *dst, nto_err *err);
  int (*store)(nto_residency *r, int t, const float *src, nto_err *err);
  int (*zero)(nto_residency *r, int t, nto_err *err);
  /* Release every buffer (and for the engine its threads and swap file). */
  void (*free)(nto_residency *r);
} nto_residency_ops;

struct nto_residency {
  const nto_residency_ops *ops;
  int always_resident; /* 1: every tensor's data is valid at all times
                          (the arena); persistent tensors may be read and
                          written in place between passes */
};

#endif /* NTO_RESIDENCY_H */
