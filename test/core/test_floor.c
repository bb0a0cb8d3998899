/*
 * test_floor.c - the region floor (floor.h): small plans worked out by
 * hand, and on real model plans the same floor as a direct transcription
 * of the definition (every phase's bytes counted from scratch).
 */
#include "config.h"
#include "floor.h"
#include "model.h"

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#define R NTO_USE_READ
#define W NTO_USE_WRITE
#define RW NTO_USE_RW
#define HOLD NTO_USE_HOLD

/* A finished plan of S steps over tensors of bytes[] / persistent[], with
 * the accesses acc[0..n) as (step, tensor, mode) triples. */
static void make_plan(nto_plan *p, int S, int T, const size_t *bytes,
                      const unsigned char *persistent, const int (*acc)[3],
                      int n) {
  nto_err err = {0};
  assert_int_equal(nto_plan_init(p, S, T, bytes, persistent, &err), 0);
  for (int i = 0; i < n; i++)
    assert_int_equal(nto_plan_use(p, acc[i][0], acc[i][1], acc[i][2]), 0);
  if (nto_plan_finish(p, &err) != 0)
    fail_msg("%s", err.msg);
}

static region_floor floor_of(const nto_plan *p, const double *ms, size_t region,
                             double rbw, double wbw, floor_channels ch) {
  region_floor f;
  nto_err err = {0};
  if (floor_compute(p, ms, region, rbw, wbw, ch, &f, &err) != 0)
    fail_msg("%s", err.msg);
  return f;
}

/* A 100-byte weight read by step 1 of 3 (1 ms each), a 40-byte region, 10
 * bytes/ms: step 1 alone must read 60 bytes (6 ms); its neighbours are
 * phases of their own (1 ms each): 8 ms. As one phase, 0..2 would bound
 * only 6 ms. A large region: the compute, 3 ms, nothing I/O-bound. */
static void test_read_bound(void **state) {
  (void)state;
  size_t bytes[] = {100};
  unsigned char pers[] = {1};
  const int acc[][3] = {{1, 0, R}};
  double ms[] = {1, 1, 1};
  nto_plan p;
  make_plan(&p, 3, 1, bytes, pers, acc, 1);
  region_floor f = floor_of(&p, ms, 40, 10, 10, FLOOR_SHARED);
  assert_float_equal(f.floor_ms, 8, 1e-9);
  assert_float_equal(f.compute_ms, 3, 1e-9);
  assert_int_equal(f.first, 1);
  assert_int_equal(f.last, 1);
  assert_float_equal(f.excess_ms, 5, 1e-9);
  assert_float_equal(f.read_bytes, 60, 1e-9);
  assert_float_equal(f.written_bytes, 0, 1e-9);
  f = floor_of(&p, ms, 100, 10, 10, FLOOR_SHARED);
  assert_float_equal(f.floor_ms, 3, 1e-9);
  assert_int_equal(f.first, -1);
  assert_float_equal(f.excess_ms, 0, 1e-9);
  nto_plan_free(&p);
}

/* The same weight updated in step 1 (read and written): 60 bytes in and
 * 60 out. Shared device: 6 + 6 ms; separate channels: max(6, 6). Faster
 * writes (20 bytes/ms) cost 3 ms on the shared device. */
static void test_update_shared_or_separate(void **state) {
  (void)state;
  size_t bytes[] = {100};
  unsigned char pers[] = {1};
  const int acc[][3] = {{1, 0, RW}};
  double ms[] = {1, 1, 1};
  nto_plan p;
  make_plan(&p, 3, 1, bytes, pers, acc, 1);
  assert_float_equal(floor_of(&p, ms, 40, 10, 10, FLOOR_SHARED).floor_ms,
                     1 + 12 + 1, 1e-9);
  assert_float_equal(floor_of(&p, ms, 40, 10, 10, FLOOR_SEPARATE).floor_ms,
                     1 + 6 + 1, 1e-9);
  region_floor f = floor_of(&p, ms, 40, 10, 20, FLOOR_SHARED);
  assert_float_equal(f.floor_ms, 1 + 9 + 1, 1e-9);
  assert_float_equal(f.written_bytes, 60, 1e-9);
  nto_plan_free(&p);
}

/* A transient 100-byte activation written by step 0 and read by step 2:
 * step 0 must write 60 bytes of it out (6 ms), step 2 read them back (6
 * ms), step 1 does not touch it: 13 ms. A phase 0..2 costs no I/O (the
 * activation is born and dies inside it), which the partition into single
 * steps beats. A hold (step 1) is no use. A second activation written by
 * step 1 and overwritten whole by step 2 is never needed: no I/O. */
static void test_transient(void **state) {
  (void)state;
  size_t bytes[] = {100, 500};
  unsigned char pers[] = {0, 0};
  const int acc[][3] = {
      {0, 0, W}, {1, 0, HOLD}, {2, 0, R}, {1, 1, W}, {2, 1, W}};
  double ms[] = {1, 1, 1};
  nto_plan p;
  make_plan(&p, 3, 2, bytes, pers, acc, 5);
  region_floor f = floor_of(&p, ms, 40, 10, 10, FLOOR_SHARED);
  assert_float_equal(f.floor_ms, 6 + 1 + 6, 1e-9);
  assert_float_equal(f.excess_ms, 5, 1e-9);
  nto_plan_free(&p);
}

/* Bad bandwidths and step times are refused. */
static void test_bad_input(void **state) {
  (void)state;
  size_t bytes[] = {100};
  unsigned char pers[] = {1};
  const int acc[][3] = {{0, 0, R}};
  double ms[] = {1}, bad[] = {-1};
  nto_plan p;
  make_plan(&p, 1, 1, bytes, pers, acc, 1);
  region_floor f;
  nto_err err = {0};
  assert_int_equal(floor_compute(&p, ms, 0, 0, 1, FLOOR_SHARED, &f, &err),
                   NTO_EINVAL);
  assert_non_null(strstr(err.msg, "bandwidth"));
  assert_int_equal(floor_compute(&p, bad, 0, 1, 1, FLOOR_SHARED, &f, &err),
                   NTO_EINVAL);
  assert_non_null(strstr(err.msg, "step 0"));
  nto_plan_free(&p);
}

/* ---- the definition, transcribed --------------------------------------- */

/* Bytes phase s..e must have in RAM from before it (*need: tensors whose
 * first access in the phase, holds aside, reads them) and must leave
 * behind (*dirty: written in the phase, content needed after e). */
static void phase_bytes(const nto_plan *p, int s, int e, double *need,
                        double *dirty) {
  *need = *dirty = 0;
  for (int t = 0; t < p->n_tensors; t++) {
    int first = -1, written = 0;
    for (int k = p->use_first[t]; k < p->use_first[t + 1]; k++) {
      int u = p->use_step[k], mode = p->use_mode[k];
      if (u < s || u > e || !(mode & RW))
        continue;
      if (first < 0)
        first = mode;
      written |= mode & W;
    }
    if (first >= 0 && (first & R))
      *need += (double)p->bytes[t];
    if (written && nto_plan_needed_after(p, t, e))
      *dirty += (double)p->bytes[t];
  }
}

/* The floor by the definition: every partition's bound, by dynamic
 * programming over phase ends, each phase's bytes counted from scratch. */
static double floor_by_definition(const nto_plan *p, const double *ms,
                                  size_t region, double rbw, double wbw,
                                  floor_channels ch) {
  int S = p->n_steps;
  double *best = calloc((size_t)S + 1, sizeof *best);
  assert_non_null(best);
  for (int e = 0; e < S; e++) {
    best[e + 1] = -1;
    for (int s = 0; s <= e; s++) {
      double need, dirty, compute = 0;
      phase_bytes(p, s, e, &need, &dirty);
      for (int k = s; k <= e; k++)
        compute += ms[k];
      double rd = need > (double)region ? (need - (double)region) / rbw : 0;
      double wr = dirty > (double)region ? (dirty - (double)region) / wbw : 0;
      double io = ch == FLOOR_SHARED ? rd + wr : (rd > wr ? rd : wr);
      double b = best[s] + (io > compute ? io : compute);
      if (b > best[e + 1])
        best[e + 1] = b;
    }
  }
  double f = best[S];
  free(best);
  return f;
}

/* On real plans (a residual net, an inverted-residual block, ResNet-18 at
 * batch 10 with its chunked updates and recomputed activations), with
 * uneven step times: the same floor as the definition at regions from
 * nothing to everything, for both device models; never below the compute,
 * never rising with the region, the compute once the region holds every
 * tensor. */
static void test_real_plans(void **state) {
  (void)state;
  const struct {
    const char *ini;
    int batch;
  } nets[] = {{"test/data/nets/plan_net.ini", 2},
              {"test/data/nets/tiny_resnet.ini", 4},
              {"test/data/nets/mobile_block.ini", 2},
              {"res/resnet18.ini", 10}};
  for (size_t n = 0; n < sizeof nets / sizeof *nets; n++) {
    nto_config c;
    nto_model *m;
    nto_err err = {0};
    nto_model_opts o = {.batch = nets[n].batch, .plan_only = 1};
    assert_int_equal(nto_config_load(&c, nets[n].ini, &err), 0);
    if (nto_model_create(&m, &c, &o, &err) != 0)
      fail_msg("%s", err.msg);
    const nto_plan *p = nto_model_plan(m, NTO_PASS_TRAIN);
    int S = p->n_steps;
    double *ms = malloc((size_t)S * sizeof *ms), compute = 0, total = 0;
    assert_non_null(ms);
    for (int s = 0; s < S; s++) { /* uneven: 0.1 .. 5 ms */
      ms[s] = 0.1 + (double)((s * 7919 + 13) % 50) / 10.0;
      compute += ms[s];
    }
    for (int t = 0; t < p->n_tensors; t++)
      total += (double)p->bytes[t];
    /* bandwidths that make some phases I/O-bound: a pass's bytes in about
     * its compute time */
    double bw = total / compute;
    double prev = 1e300;
    for (int k = 0; k <= 8; k++) {
      size_t region = (size_t)(total * k / 8);
      for (int ch = 0; ch < 2; ch++) {
        region_floor f = floor_of(p, ms, region, bw, 2 * bw, ch);
        double want = floor_by_definition(p, ms, region, bw, 2 * bw, ch);
        if (f.floor_ms < want - 1e-6 * want || f.floor_ms > want + 1e-6 * want)
          fail_msg("%s region %zu channels %d: floor %.6f ms, the definition "
                   "%.6f ms",
                   nets[n].ini, region, ch, f.floor_ms, want);
        assert_true(f.floor_ms >= compute - 1e-9 * compute);
        assert_float_equal(f.compute_ms, compute, 1e-9 * compute);
        if (ch == FLOOR_SHARED) {
          assert_true(f.floor_ms <= prev + 1e-9 * prev);
          prev = f.floor_ms;
        }
        if (k == 0 && ch == FLOOR_SHARED && f.floor_ms <= compute * 1.01)
          fail_msg("%s: no I/O-bound phase without a region", nets[n].ini);
        if (k == 8)
          assert_float_equal(f.floor_ms, compute, 1e-9 * compute);
      }
    }
    free(ms);
    nto_model_free(m);
    nto_config_free(&c);
  }
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_read_bound),
      cmocka_unit_test(test_update_shared_or_separate),
      cmocka_unit_test(test_transient),
      cmocka_unit_test(test_bad_input),
      cmocka_unit_test(test_real_plans),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
