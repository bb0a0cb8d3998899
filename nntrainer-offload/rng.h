/*
 * rng.h - small deterministic random number generator (xoshiro128+ style,
 * splitmix64 seeding) so that initial weights, dropout masks, shuffling and
 * synthetic data are reproducible for a seed on every platform.
 * Not thread-safe: each user owns its nto_rng.
 */
#ifndef NTO_RNG_H
#define NTO_RNG_H

#include <stdint.h>

typedef struct nto_rng {
  uint64_t s[2];
} nto_rng;

/* Seed the generator (any 64-bit value, including 0). */
void nto_rng_seed(nto_rng *r, uint64_t seed);
/* Next 64 random bits. */
uint64_t nto_rng_next(nto_rng *r);
/* Uniform float in [0, 1) with 24 random bits. */
float nto_rng_uniform(nto_rng *r);
/* Standard normal sample (Box-Muller), computed in double. */
double nto_rng_normal(nto_rng *r);
/* Uniform integer in [0, n); n >= 1. */
uint32_t nto_rng_below(nto_rng *r, uint32_t n);

#endif /* NTO_RNG_H */
