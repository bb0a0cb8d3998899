/* rng.c - xoroshiro128+ with splitmix64 seeding. See rng.h.
 * Algorithms: Blackman & Vigna, "Scrambled linear pseudorandom number
 * generators" (2018); splitmix64 from Steele et al. (2014). */
#include "rng.h"

#include <math.h>

static uint64_t splitmix64(uint64_t *x) {
  uint64_t z = (*x += 0x9E3779B97F4A7C15ull);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

void nto_rng_seed(nto_rng *r, uint64_t seed) {
  uint64_t x = seed;
  r->s[0] = splitmix64(&x);
  r->s[1] = splitmix64(&x);
}

static inline uint64_t rotl(uint64_t x, int k) {
  return (x << k) | (x >> (64 - k));
}

uint64_t nto_rng_next(nto_rng *r) {
  uint64_t s0 = r->s[0], s1 = r->s[1];
  uint64_t result = s0 + s1;
  s1 ^= s0;
  r->s[0] = rotl(s0, 24) ^ s1 ^ (s1 << 16);
  r->s[1] = rotl(s1, 37);
  return result;
}

float nto_rng_uniform(nto_rng *r) {
  return (float)(nto_rng_next(r) >> 40) * (1.0f / 16777216.0f);
}

double nto_rng_normal(nto_rng *r) {
  double u1 = ((double)(nto_rng_next(r) >> 11) + 0.5) * (1.0 / 9007199254740992.0);
  double u2 = (double)(nto_rng_next(r) >> 11) * (1.0 / 9007199254740992.0);
  return sqrt(-2.0 * log(u1)) * cos(2.0 * M_PI * u2);
}

uint32_t nto_rng_below(nto_rng *r, uint32_t n) {
  return (uint32_t)(((nto_rng_next(r) >> 32) * (uint64_t)n) >> 32);
}
