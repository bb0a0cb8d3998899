/*
 * arena.h - all tensors resident: the reference residency (residency.h).
 *
 * Weights and optimizer state (persistent) each get an allocation of
 * their own. Every transient tensor that the training pass uses lives in
 * one arena, from its first to its last step of the training pass, at an
 * offset given by the placer (place.h) that the offload schedule uses
 * too: tensors whose step intervals overlap never share bytes. The
 * inference pass uses a subset of the same tensors in the same order.
 */
#ifndef NTO_ARENA_H
#define NTO_ARENA_H

#include "plan.h"
#include "residency.h"
#include "tensors.h"

#include <stddef.h>

/*
 * Bytes of the arena for the training plan p over the table tt
 * (page-rounded tensors; the transient tensors the plan uses). Returns 0
 * or NTO_ENOMEM. Pure; any thread.
 */
int nto_arena_bytes(const nto_plan *p, const nto_tensors *tt, size_t *bytes,
                    nto_err *err);

/*
 * Allocate every tensor of tt (borrowed; must outlive the arena): set data
 * and state RESIDENT of the persistent tensors and of the transient ones
 * p uses (zero-filled). *out is released through its ops->free. Returns 0
 * or NTO_ENOMEM naming what could not be allocated.
 */
int nto_arena_create(nto_residency **out, const nto_plan *p, nto_tensors *tt,
                     nto_err *err);

/* Give persistent tensor t of the arena's table a zero-filled buffer of
 * its own after creation (an optimizer with more state, model.h
 * nto_model_set_optimizer). Returns 0 or NTO_ENOMEM. */
int nto_arena_add(nto_residency *r, int t, nto_err *err);

#endif /* NTO_ARENA_H */
