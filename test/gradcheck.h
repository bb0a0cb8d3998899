/*
 * gradcheck.h - generic finite-difference gradient check for one layer.
 *
 * Builds a layer from its ops table and INI-style properties, plans it for
 * the given input shapes, fills inputs and weights with seeded random values
 * and checks backward against central differences of the scalar
 *     L(x, w) = sum_i r_i * out_i(x, w)        (accumulated in double)
 * with fixed random r (so dL/dout = r). Forward runs in float32 (the
 * kernels' precision); the perturbation, differences and comparison are
 * done in double. Every input element and every trainable weight element
 * is checked (or a strided sample of at most max_checks per tensor).
 * Test-only; single thread.
 */
#ifndef NTO_TEST_GRADCHECK_H
#define NTO_TEST_GRADCHECK_H

#include "layer.h"

/* Perturbation and tolerance of a case that gives none (float32 forward,
 * double loss). */
#define GC_DEFAULT_H 1e-2
#define GC_DEFAULT_TOL 1e-2

typedef struct gc_case {
  const nto_layer_ops *ops;
  const char *const *props; /* NULL-terminated key, value pairs */
  int n_in;
  nto_shape in_shape[NTO_MAX_INPUTS]; /* n = batch */
  int training;                       /* forward mode */
  double h;                           /* perturbation; 0: GC_DEFAULT_H */
  double tol; /* |a-n| <= tol * max(1, |a|, |n|); 0: GC_DEFAULT_TOL */
  int max_checks;                     /* per tensor, 0 = all */
  unsigned seed;
  int positive_inputs; /* inputs in [0.5, 1.5] instead of [-1, 1] */
} gc_case;

/*
 * Runs the check. Returns 0 when every checked element is within tol;
 * otherwise prints the first mismatches to stderr and returns -1.
 * Also fails if set_prop or plan fails (message printed).
 */
int gc_run(const gc_case *c);

/*
 * Builds and plans a layer for tests (props applied, in_shape set).
 * Returns 0 or -1 (message printed). Free with gc_layer_free.
 */
int gc_layer_make(nto_layer *l, const nto_layer_ops *ops,
                  const char *const *props, int n_in, const nto_shape *in);
void gc_layer_free(nto_layer *l);

#endif
