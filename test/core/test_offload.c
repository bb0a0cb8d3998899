/*
 * test_offload.c - the offload engine gives bit-identical results.
 *
 * For each network, K training steps (and one inference pass) run with
 * everything resident (the reference), then with the offload engine at
 * windows 1, 2, 3 and one larger than the pass, over both I/O backends.
 * Losses, outputs and every weight must be equal bit for bit, and no swap
 * file may be left in the swap directory. Window 2 runs with checksums of
 * the swapped tensors on (the others with the default). Injected I/O
 * faults (EIO, ENOSPC, a flipped byte, short transfers) either stop
 * training with a clear error or change nothing. With NTO_TEST_QUICK=1 (the
 * ThreadSanitizer run) only the small nets run. This is the test that catches a
 * lost update or a stale buffer anywhere in the scheduler.
 */
#include "config.h"
#include "model.h"
#include "optimizer.h"
#include "parallel.h"
#include "schedule.h"
#include "tmpdir.h"

#include <dirent.h>
#include <errno.h>
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#define MAX_STEPS 8

typedef struct result {
  double loss[MAX_STEPS + 1]; /* K training losses, then the eval loss */
  float *out;                 /* eval output, N x K */
  float *w;                   /* all weights, concatenated */
  size_t n_out, n_w;
} result;

typedef struct net_case {
  const char *ini;
  int batch;
  int steps;
  size_t chunk; /* update chunk bytes, 0: default */
} net_case;

/* The optimizer state format of the models run_faulted creates (fp32 but
 * in test_state_formats). */
static nto_opt_state_format run_state = NTO_OPT_STATE_FP32;

/* Deterministic inputs in [0, 1) and one-hot targets for step `step`. */
static void make_batch(float *x, size_t nx, float *y, int n, int k, int step) {
  uint64_t s = 0x9e3779b97f4a7c15ull * (uint64_t)(step + 1);
  for (size_t i = 0; i < nx; i++) {
    s = s * 6364136223846793005ull + 1442695040888963407ull;
    x[i] = (float)((s >> 40) & 0xffffff) / 16777216.0f;
  }
  memset(y, 0, sizeof(float) * (size_t)n * (size_t)k);
  for (int i = 0; i < n; i++)
    y[(size_t)i * k + (size_t)((i * 7 + step) % k)] = 1.0f;
}

/* Copy all weights of m into r->w (fetching from the swap file when the
 * model offloads). */
static void collect_weights(nto_model *m, result *r) {
  nto_named_tensor *ts;
  int n;
  nto_err err = {0};
  assert_int_equal(nto_model_weights(m, &ts, &n, &err), 0);
  size_t total = 0;
  for (int i = 0; i < n; i++)
    total += nto_named_numel(&ts[i]);
  r->w = malloc(total * sizeof(float));
  r->n_w = total;
  size_t off = 0;
  for (int i = 0; i < n; i++) {
    size_t c = nto_named_numel(&ts[i]);
    if (ts[i].data)
      memcpy(r->w + off, ts[i].data, c * sizeof(float));
    else if (ts[i].fetch(ts[i].ctx, ts[i].index, r->w + off, &err) != 0)
      fail_msg("fetch %s: %s", ts[i].name, err.msg);
    off += c;
  }
  nto_model_weights_free(ts, n);
}

/* A model built from an INI file, with a batch buffer. */
typedef struct session {
  nto_config c;
  nto_model *m;
  float *x, *y; /* n x sample, n x k */
  size_t nx;
  int n, k;
} session;

/* Where the temporary directory's filesystem refuses O_DIRECT (tmpfs on
 * older kernels), the tests swap through the page cache instead: they
 * check results, not page-cache behaviour. */
static void session_open_as(session *ss, const char *ini,
                            const nto_model_opts *opts,
                            nto_opt_state_format state) {
  nto_err err = {0};
  nto_model_opts o = *opts;
  memset(ss, 0, sizeof *ss);
  if (nto_config_load(&ss->c, ini, &err) != 0)
    fail_msg("%s", err.msg);
  ss->c.opt.state_format = state;
  int rc = nto_model_create(&ss->m, &ss->c, &o, &err);
  if (rc == NTO_EUNSUPPORTED && strstr(err.msg, "O_DIRECT")) {
    fprintf(stderr, "note: %s; testing with buffered I/O\n", err.msg);
    o.offload.no_direct = 1;
    rc = nto_model_create(&ss->m, &ss->c, &o, &err);
  }
  if (rc != 0)
    fail_msg("%s (window %d): %s", ini, o.offload.window, err.msg);
  ss->n = nto_model_batch(ss->m);
  ss->k = nto_model_output_size(ss->m);
  ss->nx = (size_t)ss->n * nto_shape_sample(nto_model_input_shape(ss->m));
  ss->x = malloc(ss->nx * sizeof(float));
  ss->y = malloc((size_t)ss->n * ss->k * sizeof(float));
}

/* session_open_as with fp32 optimizer state. */
static void session_open(session *ss, const char *ini,
                         const nto_model_opts *opts) {
  session_open_as(ss, ini, opts, NTO_OPT_STATE_FP32);
}

/* One training step and the tuner's turn after it (eval: an inference
 * pass) on the batch of `step`. */
static int session_step(session *ss, int step, int eval, nto_step_stats *st,
                        nto_err *err) {
  make_batch(ss->x, ss->nx, ss->y, ss->n, ss->k, step);
  if (eval)
    return nto_model_eval_step(ss->m, ss->x, ss->y, ss->n, st, err);
  int rc = nto_model_train_step(ss->m, ss->x, ss->y, st, err);
  return rc == 0 ? nto_model_tune(ss->m, NULL, err) : rc;
}

static void session_close(session *ss) {
  nto_model_free(ss->m);
  nto_config_free(&ss->c);
  free(ss->x);
  free(ss->y);
}

/* A frontier for window n over S steps, s + n + (7s mod 5): ragged, not
 * monotone (the engine makes it valid). */
static int *ragged_frontier(int S, int n) {
  int *upto = malloc((size_t)S * sizeof *upto);
  for (int s = 0; s < S; s++)
    upto[s] = s + n + (7 * s) % 5;
  return upto;
}

/* nto_model_room_declined, nto_model_convs_kept,
 * nto_model_recomputed_convs and nto_model_recompute of the last
 * run_faulted's model. */
static int last_room_declined, last_convs_kept, last_recomputed_convs;
static int last_chains;
static nto_recompute last_recompute;

/* Train nc->steps steps and evaluate once with the model options o; swap
 * files go to dir. switch_to (NULL: none): before training step s, change
 * the window to switch_to[s] when that is > 0, or to -switch_to[s] with
 * ragged_frontier when < 0. fault (NULL: none): set
 * after the model is created (its weights stored), cleared at the end;
 * the faults it fired go to *fired. The engine's counters at the end go to
 * *st when it offloads (else st->window = 0). */
static void run_faulted(const net_case *nc, nto_model_opts o, const char *dir,
                        const int *switch_to, const nto_io_fault *fault,
                        unsigned *fired, result *r, nto_offload_stats *st) {
  session ss;
  nto_err err = {0};
  o.batch = nc->batch;
  o.seed = 7;
  o.update_chunk = nc->chunk;
  o.offload.swap_dir = dir;
  session_open_as(&ss, nc->ini, &o, run_state);
  if (fault)
    nto_io_fault_set(fault);
  nto_step_stats sst;
  for (int s = 0; s <= nc->steps; s++) {
    int eval = s == nc->steps; /* then one inference pass */
    if (!eval && switch_to && switch_to[s] > 0 &&
        nto_tuner_set_frontier(nto_model_tuner(ss.m), switch_to[s], NULL,
                               &err) != 0)
      fail_msg("%s: window %d before step %d: %s", nc->ini, switch_to[s], s,
               err.msg);
    if (!eval && switch_to && switch_to[s] < 0) {
      int *upto = ragged_frontier(nto_model_pass_steps(ss.m, NTO_PASS_TRAIN),
                                  -switch_to[s]);
      if (nto_tuner_set_frontier(nto_model_tuner(ss.m), -switch_to[s], upto,
                                 &err) != 0)
        fail_msg("%s: frontier %d before step %d: %s", nc->ini, -switch_to[s],
                 s, err.msg);
      free(upto);
    }
    if (session_step(&ss, eval ? 99 : s, eval, &sst, &err) != 0)
      fail_msg("%s window %d step %d: %s", nc->ini, o.offload.window, s,
               err.msg);
    r->loss[s] = sst.loss;
  }
  r->n_out = (size_t)ss.n * ss.k;
  r->out = malloc(r->n_out * sizeof(float));
  memcpy(r->out, nto_model_output(ss.m), r->n_out * sizeof(float));
  collect_weights(ss.m, r);
  if (fault) {
    *fired = nto_io_fault_fired();
    nto_io_fault_set(NULL);
  }
  if (st && nto_model_offload_stats(ss.m, st) != 0)
    st->window = 0;
  last_room_declined = nto_tuner_room_declined(nto_model_tuner(ss.m));
  last_convs_kept = nto_model_convs_kept(ss.m);
  last_recomputed_convs = nto_model_recomputed_convs(ss.m);
  last_recompute = nto_model_recompute(ss.m);
  last_chains = nto_model_chains(ss.m, NULL);
  session_close(&ss);
}

static void run_with(const net_case *nc, nto_model_opts o, const char *dir,
                     const int *switch_to, result *r, nto_offload_stats *st) {
  run_faulted(nc, o, dir, switch_to, NULL, NULL, r, st);
}

/* Train and evaluate with a fixed window (0: all resident) and backend. */
static void run(const net_case *nc, int window, nto_io_kind io, const char *dir,
                result *r) {
  nto_model_opts o = {0};
  o.offload.window = window;
  o.offload.io = io;
  run_with(nc, o, dir, NULL, r, NULL);
}

static void result_free(result *r) {
  free(r->out);
  free(r->w);
}

/* Number of entries in dir other than . and .. */
static int dir_entries(const char *dir) {
  DIR *d = opendir(dir);
  int n = 0;
  struct dirent *e;
  while (d && (e = readdir(d)))
    n += strcmp(e->d_name, ".") != 0 && strcmp(e->d_name, "..") != 0;
  if (d)
    closedir(d);
  return n;
}

static void check_equal(const net_case *nc, const result *ref, const result *r,
                        int window, nto_io_kind io) {
  for (int s = 0; s <= nc->steps; s++)
    if (memcmp(&ref->loss[s], &r->loss[s], sizeof(double)) != 0)
      fail_msg("%s window %d %s: loss %d differs: %.9g vs %.9g", nc->ini,
               window, nto_io_kind_name(io), s, r->loss[s], ref->loss[s]);
  assert_int_equal(ref->n_w, r->n_w);
  for (size_t i = 0; i < ref->n_w; i++)
    if (memcmp(&ref->w[i], &r->w[i], sizeof(float)) != 0)
      fail_msg("%s window %d %s: weight value %zu differs: %.9g vs %.9g",
               nc->ini, window, nto_io_kind_name(io), i, r->w[i], ref->w[i]);
  if (memcmp(ref->out, r->out, ref->n_out * sizeof(float)) != 0)
    fail_msg("%s window %d %s: eval output differs", nc->ini, window,
             nto_io_kind_name(io));
}

/* Windows 1, 2, 3 and the whole pass over both backends give the bits of
 * everything resident; base: the model options besides those. */
static void check_net_opts(const net_case *nc, nto_model_opts base) {
  char dir[256];
  assert_int_equal(tmpdir_make(dir, sizeof dir, "offload"), 0);
  result ref = {0};
  run_with(nc, base, dir, NULL, &ref, NULL);
  const int windows[] = {1, 2, 3, 100000};
  const nto_io_kind ios[] = {NTO_IO_PSYNC, NTO_IO_AUTO};
  for (size_t w = 0; w < sizeof windows / sizeof *windows; w++) {
    for (size_t i = 0; i < 2; i++) {
      result r = {0};
      nto_model_opts o = base;
      o.offload.window = windows[w];
      o.offload.io = ios[i];
      o.offload.checksum = windows[w] == 2 ? 1 : 0; /* 2: with checksums */
      /* 1 and 3: frontiers from measured times (timing-dependent: any
       * frontier must give the same results) */
      o.prefetch = w % 2 ? NTO_PREFETCH_STEPS : NTO_PREFETCH_TIME;
      run_with(nc, o, dir, NULL, &r, NULL);
      check_equal(nc, &ref, &r, windows[w], ios[i]);
      result_free(&r);
      if (dir_entries(dir) != 0)
        fail_msg("%s window %d: files left in %s", nc->ini, windows[w], dir);
    }
  }
  result_free(&ref);
  tmpdir_remove(dir);
}

static void check_net(const net_case *nc) {
  nto_model_opts o = {0};
  check_net_opts(nc, o);
}

/* Losses and weights of r within rel (normwise) of ref's. */
static void check_close(const net_case *nc, const result *ref, const result *r,
                        double rel) {
  for (int s = 0; s <= nc->steps; s++)
    if (fabs(r->loss[s] - ref->loss[s]) > rel * fabs(ref->loss[s]))
      fail_msg("%s: loss %d: %.9g vs %.9g", nc->ini, s, r->loss[s],
               ref->loss[s]);
  assert_int_equal(ref->n_w, r->n_w);
  double num = 0, den = 0;
  for (size_t i = 0; i < ref->n_w; i++) {
    num = fmax(num, fabs((double)r->w[i] - ref->w[i]));
    den = fmax(den, fabs((double)ref->w[i]));
  }
  if (num > rel * den)
    fail_msg("%s: weights differ by %g (max |w| %g)", nc->ini, num, den);
}

/* Tensors of the model of nc with options o whose name contains what. */
static int count_tensors(const net_case *nc, nto_model_opts o,
                         const char *what) {
  session ss;
  o.batch = nc->batch;
  o.update_chunk = nc->chunk;
  session_open(&ss, nc->ini, &o);
  int n = 0;
  for (int t = 0; t < nto_model_tensor_count(ss.m); t++)
    n += strstr(nto_model_tensor(ss.m, t)->name, what) != NULL;
  session_close(&ss);
  return n;
}

/* Optimizer updates split into chunks of 1 KiB (U steps) give the same
 * weights, bit for bit, as whole-weight updates, resident or offloaded
 * (chunk_grads off). With chunk_grads on the convolution weight gradients
 * are computed by rows in the U steps (layer.h weight_row), which BLAS may
 * round differently from the whole gradient: close to whole-weight updates
 * (1e-5), and bit for bit the same resident or offloaded. narrow_deep's
 * two 2x2 convolutions take their rows' column matrices from a cache
 * (smaller than their weights), and so does lenet's conv2 (a cache of
 * 54 x 8 floats, as large as its 8 x 54 weight), so auto computes them
 * by rows too; tiny_resnet's recompute them per chunk (their caches
 * would be 16 times their weights), and auto leaves them whole; so do
 * l2_net's, whose weight regularizers add C * W to each chunk's rows (and
 * to the whole gradients before their chunked updates). */
static void test_chunked_update(void **state) {
  (void)state;
  char dir[256];
  assert_int_equal(tmpdir_make(dir, sizeof dir, "chunks"), 0);
  const char *nets[] = {
      "test/data/nets/lenet.ini", "test/data/nets/tiny_resnet.ini",
      "test/data/nets/narrow_deep.ini", "test/data/nets/l2_net.ini"};
  for (int i = 0; i < 4; i++) {
    net_case whole = {nets[i], 2, 3, 0}, chunked = {nets[i], 2, 3, 1024};
    nto_model_opts on = {.chunk_grads = NTO_CHUNK_GRADS_ON};
    nto_model_opts off = {.chunk_grads = NTO_CHUNK_GRADS_OFF};
    nto_model_opts aut = {.chunk_grads = NTO_CHUNK_GRADS_AUTO};
    const int caches[] = {1, 0, 2, 0};
    assert_int_equal(count_tensors(&chunked, on, "rows_cache"), caches[i]);
    assert_int_equal(count_tensors(&chunked, aut, "rows_cache"), caches[i]);
    assert_int_equal(count_tensors(&chunked, off, "rows_cache"), 0);
    /* per-chunk gradient tensors ("dweight.0"): on everywhere, auto only
     * with a cache */
    assert_true(count_tensors(&chunked, on, "dweight.0") > 0);
    assert_int_equal(count_tensors(&chunked, aut, "dweight.0") > 0,
                     caches[i] > 0);
    assert_int_equal(count_tensors(&chunked, off, "dweight.0"), 0);
    result ref = {0}, r = {0}, ro = {0}, rg = {0};
    run_with(&whole, off, dir, NULL, &ref, NULL);
    run_with(&chunked, off, dir, NULL, &r, NULL);
    check_equal(&whole, &ref, &r, 0, NTO_IO_AUTO);
    off.offload.window = 1;
    run_with(&chunked, off, dir, NULL, &ro, NULL);
    check_equal(&whole, &ref, &ro, 1, NTO_IO_AUTO);
    result_free(&ro);
    run_with(&chunked, on, dir, NULL, &rg, NULL);
    check_close(&whole, &ref, &rg, 1e-5);
    for (int w = 1; w <= 2; w++) {
      nto_model_opts go = on;
      go.offload.window = w;
      run_with(&chunked, go, dir, NULL, &ro, NULL);
      check_equal(&chunked, &rg, &ro, w, NTO_IO_AUTO);
      result_free(&ro);
    }
    if (caches[i] > 0) { /* auto computes the same rows as on here */
      run_with(&chunked, aut, dir, NULL, &ro, NULL);
      check_equal(&chunked, &rg, &ro, 0, NTO_IO_AUTO);
      result_free(&ro);
    }
    result_free(&ref);
    result_free(&r);
    result_free(&rg);
  }
  tmpdir_remove(dir);
}

/* The step table of nc's model under spread placement (options o with
 * NTO_UPDATES_SPREAD): each U step lies after its layer's B step, a
 * weight's chunks in order, and some U steps come after a later B step
 * than their own. */
static void check_spread_steps(const net_case *nc, nto_model_opts o) {
  session ss;
  o.batch = nc->batch;
  o.update_chunk = nc->chunk;
  session_open(&ss, nc->ini, &o);
  const nto_steps *st = nto_model_steps(ss.m);
  int moved = 0, last_w = -1, last_l = -1, last_k = -1;
  for (int s = 0; s < st->n; s++) {
    const nto_step *d = &st->v[s];
    if (d->kind != 'U')
      continue;
    assert_true(st->b_step[d->layer] >= 0 && st->b_step[d->layer] < s);
    if (d->layer == last_l && d->w == last_w)
      assert_int_equal(d->chunk, last_k + 1);
    last_l = d->layer, last_w = d->w, last_k = d->chunk;
    int prev = s - 1;
    while (st->v[prev].kind == 'U')
      prev--;
    moved += prev != st->b_step[d->layer];
  }
  if (moved == 0)
    fail_msg("%s: no U step moved by spread placement", nc->ini);
  session_close(&ss);
}

/* U steps spread over the rest of the backward pass (steps.h
 * NTO_UPDATES_SPREAD) instead of right after their B step: the step
 * table (check_spread_steps); the losses, outputs and weights are the bits
 * of right-after placement, all resident and at windows 1, 2, 3 and all
 * over both backends; with whole and with row-computed gradients. */
static void test_update_placement(void **state) {
  (void)state;
  char dir[256];
  assert_int_equal(tmpdir_make(dir, sizeof dir, "place"), 0);
  const char *nets[] = {"test/data/nets/tiny_resnet.ini",
                        "test/data/nets/narrow_deep.ini",
                        "test/data/nets/opt_state_net.ini"};
  const nto_chunk_grads grads[] = {NTO_CHUNK_GRADS_OFF, NTO_CHUNK_GRADS_ON};
  for (int i = 0; i < 3; i++)
    for (int gi = 0; gi < 2; gi++) {
      net_case nc = {nets[i], 2, 3, 1024};
      nto_model_opts after = {.chunk_grads = grads[gi]};
      nto_model_opts spread = after;
      spread.update_placement = NTO_UPDATES_SPREAD;
      check_spread_steps(&nc, spread);
      result ref = {0}, r = {0};
      run_with(&nc, after, dir, NULL, &ref, NULL);
      run_with(&nc, spread, dir, NULL, &r, NULL);
      check_equal(&nc, &ref, &r, 0, NTO_IO_AUTO);
      result_free(&r);
      result_free(&ref);
      check_net_opts(&nc, spread);
    }
  tmpdir_remove(dir);
}

/* The named weights of m (copies; fetched when swapped), n of them. */
static nto_named_tensor *weights_copy(nto_model *m, int *n) {
  nto_named_tensor *ts;
  nto_err err = {0};
  assert_int_equal(nto_model_weights(m, &ts, n, &err), 0);
  for (int i = 0; i < *n; i++) {
    size_t c = nto_named_numel(&ts[i]);
    float *d = malloc(c * sizeof(float));
    if (ts[i].data)
      memcpy(d, ts[i].data, c * sizeof(float));
    else if (ts[i].fetch(ts[i].ctx, ts[i].index, d, &err) != 0)
      fail_msg("fetch %s: %s", ts[i].name, err.msg);
    ts[i].data = d;
    ts[i].fetch = NULL;
  }
  return ts;
}

static void weights_copy_free(nto_named_tensor *ts, int n) {
  for (int i = 0; i < n; i++)
    free((void *)ts[i].data);
  nto_model_weights_free(ts, n);
}

/* Frozen layers (model.h freeze_until): the same bits at every window and
 * backend as everything resident; after training at window 1 the frozen
 * layers' weights and batch-norm running statistics are as initialized,
 * while every trainable weight has moved. */
static void test_frozen_layers(void **state) {
  (void)state;
  const struct {
    net_case nc;
    const char *until;
  } cases[] = {{{"test/data/nets/tiny_resnet.ini", 2, 3, 0}, "bn_add"},
               {{"test/data/nets/tiny_resnet.ini", 2, 3, 0}, "res_bn1"},
               {{"test/data/nets/mobile_block.ini", 2, 3, 0}, "dw_bn"},
               {{"test/data/nets/lenet.ini", 3, 3, 0}, "conv1"}};
  char dir[256];
  assert_int_equal(tmpdir_make(dir, sizeof dir, "frozen"), 0);
  for (size_t c = 0; c < sizeof cases / sizeof *cases; c++) {
    const net_case *nc = &cases[c].nc;
    nto_model_opts o = {.freeze_until = cases[c].until};
    check_net_opts(nc, o);
    session ss;
    nto_err err = {0};
    nto_step_stats sst;
    o.batch = nc->batch;
    o.offload.window = 1;
    o.offload.swap_dir = dir;
    session_open(&ss, nc->ini, &o);
    int n0, n1;
    nto_named_tensor *w0 = weights_copy(ss.m, &n0);
    for (int s = 0; s < nc->steps; s++)
      if (session_step(&ss, s, 0, &sst, &err) != 0)
        fail_msg("%s: %s", nc->ini, err.msg);
    nto_named_tensor *w1 = weights_copy(ss.m, &n1);
    assert_int_equal(n0, n1);
    const nto_graph *g = nto_model_graph(ss.m);
    int until = nto_graph_find(g, cases[c].until), frozen = 0, moved = 0;
    for (int i = 0; i < n0; i++) {
      char layer[NTO_NAME_MAX + 1];
      snprintf(layer, sizeof layer, "%.*s",
               (int)(strrchr(w0[i].name, '.') - w0[i].name), w0[i].name);
      int li = nto_graph_find(g, layer);
      int same = !memcmp(w0[i].data, w1[i].data,
                         nto_named_numel(&w0[i]) * sizeof(float));
      if (li <= until && !same)
        fail_msg("%s frozen until %s: %s changed", nc->ini, cases[c].until,
                 w0[i].name);
      frozen += li <= until;
      moved += li > until && !same;
    }
    assert_true(frozen > 0);
    assert_true(moved > 0);
    weights_copy_free(w0, n0);
    weights_copy_free(w1, n1);
    session_close(&ss);
  }
  tmpdir_remove(dir);
}

/* Frozen batch normalization on batch statistics (frozen_bn = batch): the
 * running statistics of frozen layers are written by their forward, also
 * below the first trainable layer; the same bits at every window and
 * backend as everything resident. */
static void test_frozen_batch_stats(void **state) {
  (void)state;
  const struct {
    net_case nc;
    const char *until;
  } cases[] = {{{"test/data/nets/tiny_resnet.ini", 2, 3, 0}, "bn_add"},
               {{"test/data/nets/tiny_resnet.ini", 2, 3, 0}, "res_bn1"},
               {{"test/data/nets/mobile_block.ini", 2, 3, 0}, "dw_bn"}};
  for (size_t c = 0; c < sizeof cases / sizeof *cases; c++) {
    nto_model_opts o = {.freeze_until = cases[c].until,
                        .frozen_bn = NTO_FROZEN_BN_BATCH};
    check_net_opts(&cases[c].nc, o);
  }
}

/* An inference model (model.h opts.inference: evaluate, predict) plans no
 * backward, gradient or optimizer state, and its forward pass gives the
 * same bits at every window and backend as the eval pass of the trained
 * model whose weights it was given. */
static void test_inference_model(void **state) {
  (void)state;
  const net_case nets[] = {{"test/data/nets/tiny_resnet.ini", 2, 3, 0},
                           {"test/data/nets/mobile_block.ini", 2, 3, 0},
                           {"test/data/nets/lenet.ini", 3, 3, 0}};
  const nto_io_kind ios[] = {NTO_IO_AUTO, NTO_IO_PSYNC};
  char dir[256];
  assert_int_equal(tmpdir_make(dir, sizeof dir, "inference"), 0);
  for (size_t c = 0; c < sizeof nets / sizeof *nets; c++) {
    const net_case *nc = &nets[c];
    nto_err err = {0};
    nto_step_stats st, sb;
    session a, b;
    session_open(&a, nc->ini, &(nto_model_opts){.batch = nc->batch});
    for (int s = 0; s < nc->steps; s++)
      if (session_step(&a, s, 0, &st, &err) != 0)
        fail_msg("%s: %s", nc->ini, err.msg);
    assert_int_equal(session_step(&a, 9, 1, &st, &err), 0);
    size_t n_out = (size_t)a.n * a.k;
    int nw;
    nto_named_tensor *w = weights_copy(a.m, &nw);
    for (int window = 0; window <= 2; window++)
      for (size_t io = 0; io < (window ? 2 : 1); io++) {
        nto_model_opts o = {.batch = nc->batch, .inference = 1};
        o.offload.window = window;
        o.offload.io = ios[io];
        o.offload.swap_dir = dir;
        session_open(&b, nc->ini, &o);
        assert_int_equal(nto_model_param_count(b.m), 0);
        assert_int_equal(nto_model_mem_plan(b.m).opt_state, 0);
        assert_true(nto_model_mem_plan(b.m).arena <
                    nto_model_mem_plan(a.m).arena);
        for (int i = 0; i < nto_model_graph(b.m)->n_layers; i++)
          assert_int_equal(nto_model_backward(b.m, i), 0);
        nto_named_tensor *ts;
        int n;
        assert_int_equal(nto_model_weights(b.m, &ts, &n, &err), 0);
        assert_int_equal(n, nw);
        for (int i = 0; i < n; i++) {
          assert_string_equal(ts[i].name, w[i].name);
          size_t bytes = nto_named_numel(&ts[i]) * sizeof(float);
          if (ts[i].data)
            memcpy(ts[i].data, w[i].data, bytes);
          else if (ts[i].store(ts[i].ctx, ts[i].index, w[i].data, &err) != 0)
            fail_msg("store %s: %s", ts[i].name, err.msg);
        }
        nto_model_weights_free(ts, n);
        assert_int_equal(session_step(&b, 9, 1, &sb, &err), 0);
        if (memcmp(nto_model_output(a.m), nto_model_output(b.m),
                   n_out * sizeof(float)) != 0 ||
            sb.loss != st.loss)
          fail_msg("%s: inference at window %d (io %zu) differs", nc->ini,
                   window, io);
        session_close(&b);
      }
    weights_copy_free(w, nw);
    session_close(&a);
  }
  tmpdir_remove(dir);
}

static void test_small_nets(void **state) {
  (void)state;
  const net_case nets[] = {
      {"test/data/nets/mlp.ini", 4, 3, 0},
      {"test/data/nets/lenet.ini", 3, 3, 0},
      {"test/data/nets/tiny_resnet.ini", 2, 3, 0},
      {"test/data/nets/mobile_block.ini", 2, 3, 0},
      {"test/data/nets/mse_net.ini", 3, 3, 0},
      {"test/data/nets/l2_net.ini", 2, 3, 0}, /* weight regularizers */
  };
  for (size_t i = 0; i < sizeof nets / sizeof *nets; i++)
    check_net(&nets[i]);
}

/* Teardown: the other tests' models have fp32 state (also after a
 * failure of test_state_formats). */
static int fp32_state(void **state) {
  (void)state;
  run_state = NTO_OPT_STATE_FP32;
  return 0;
}

/* Bytes of the state tensor named `name` of nc's model in format f. */
static size_t state_bytes(const net_case *nc, nto_opt_state_format f,
                          const char *name) {
  session ss;
  nto_model_opts o = {.batch = nc->batch, .update_chunk = nc->chunk};
  session_open_as(&ss, nc->ini, &o, f);
  size_t bytes = 0;
  for (int t = 0; t < nto_model_tensor_count(ss.m); t++)
    if (!strcmp(nto_model_tensor(ss.m, t)->name, name))
      bytes = nto_model_tensor(ss.m, t)->bytes;
  session_close(&ss);
  return bytes;
}

/* Optimizer state stored as bf16 or block-wise int8 (optimizer.h), on a
 * net whose conv2 and fc have quantized state: windows 1, 2, 3 and the
 * whole pass over both backends give the bits of everything resident in
 * the same format; int8 updates in chunks of 4096 elements (two blocks
 * each) the bits of whole-weight updates (the same blocks); the state
 * tensors hold the format's bytes; and the losses and weights differ
 * from fp32's, but not by much. */
static void test_state_formats(void **state) {
  (void)state;
  const nto_opt_state_format fs[] = {NTO_OPT_STATE_BF16, NTO_OPT_STATE_INT8};
  const double tol[] = {1e-2, 1e-2}; /* int8 with v rounded to zero: 2.6 */
  net_case nc = {"test/data/nets/opt_state_net.ini", 4, 4, 0};
  char dir[256];
  assert_int_equal(tmpdir_make(dir, sizeof dir, "opt_state"), 0);
  result ref = {0};
  run_state = NTO_OPT_STATE_FP32;
  run_with(&nc, (nto_model_opts){0}, dir, NULL, &ref, NULL);
  for (int f = 0; f < 2; f++) {
    run_state = fs[f];
    check_net(&nc);
    result r = {0};
    run_with(&nc, (nto_model_opts){0}, dir, NULL, &r, NULL);
    check_close(&nc, &ref, &r, tol[f]);
    assert_true(memcmp(ref.w, r.w, ref.n_w * sizeof(float)) != 0);
    result_free(&r);
    assert_int_equal(state_bytes(&nc, fs[f], "fc:weight:opt1"),
                     nto_round_page(nto_opt_state_bytes(fs[f], 10240)));
  }
  assert_int_equal(state_bytes(&nc, NTO_OPT_STATE_FP32, "fc:weight:opt1"),
                   40960);
  assert_int_equal(state_bytes(&nc, NTO_OPT_STATE_INT8, "fc:bias:opt1"),
                   4096); /* 10 elements: fp32 */
  net_case chunked = {nc.ini, 4, 4, 16384};
  nto_model_opts off = {.chunk_grads = NTO_CHUNK_GRADS_OFF};
  result whole = {0}, parts = {0};
  run_state = NTO_OPT_STATE_INT8;
  run_with(&nc, off, dir, NULL, &whole, NULL);
  run_with(&chunked, off, dir, NULL, &parts, NULL);
  assert_true(state_bytes(&chunked, NTO_OPT_STATE_INT8, "fc:weight:opt0.2") >
              0);
  check_equal(&nc, &whole, &parts, 0, NTO_IO_AUTO);
  off.offload.window = 1;
  result_free(&parts);
  run_with(&chunked, off, dir, NULL, &parts, NULL);
  check_equal(&nc, &whole, &parts, 1, NTO_IO_AUTO);
  run_state = NTO_OPT_STATE_FP32;
  result_free(&whole);
  result_free(&parts);
  result_free(&ref);
  tmpdir_remove(dir);
}

/* Keeping tensors in the window's spare room until their next use
 * (schedule.h keep, the default) against evicting them at once
 * (no_keep): the same losses, weights and outputs as everything resident,
 * fewer bytes read and written, both measured and as the schedule planned. */
static void test_keep_resident(void **state) {
  (void)state;
  const net_case nets[] = {
      {"test/data/nets/tiny_resnet.ini", 2, 3, 0},
      {"test/data/nets/narrow_deep.ini", 2, 3, 0},
  };
  char dir[256];
  assert_int_equal(tmpdir_make(dir, sizeof dir, "keep"), 0);
  for (size_t i = 0; i < sizeof nets / sizeof *nets; i++) {
    result ref = {0};
    run(&nets[i], 0, NTO_IO_AUTO, dir, &ref);
    for (int window = 1; window <= 2; window++) {
      nto_offload_stats st[2];
      for (int no_keep = 0; no_keep < 2; no_keep++) {
        result r = {0};
        nto_model_opts o = {0};
        o.offload.window = window;
        o.offload.no_keep = no_keep;
        run_with(&nets[i], o, dir, NULL, &r, &st[no_keep]);
        check_equal(&nets[i], &ref, &r, window, NTO_IO_AUTO);
        result_free(&r);
      }
      uint64_t kept = st[0].read_bytes + st[0].written_bytes,
               evicted = st[1].read_bytes + st[1].written_bytes;
      if (kept >= evicted)
        fail_msg("%s window %d: %llu bytes moved keeping, %llu evicting",
                 nets[i].ini, window, (unsigned long long)kept,
                 (unsigned long long)evicted);
      assert_true(st[0].planned_read < st[1].planned_read ||
                  st[0].planned_written < st[1].planned_written);
    }
    result_free(&ref);
  }
  assert_int_equal(dir_entries(dir), 0);
  tmpdir_remove(dir);
}

/* Recomputing the activations after batch normalization in backward, and
 * cheap convolutions' outputs before it (tensors.h nto_recompute), and
 * segments of convolutions (segments: tiny_resnet's block recomputes its
 * first convolution from an input recomputed from the stem's, itself
 * recomputed twice), gives the same bits as keeping them, resident and at
 * windows 1, 2 and 3; on, activations and off each move fewer bytes than
 * the next (mobile_block's 1x1 expansion is recomputed with `on`;
 * tiny_resnet has no convolution within NTO_RECOMPUTE_SPAN). */
static void test_recompute(void **state) {
  (void)state;
  const struct {
    net_case net;
    int conv; /* `on` recomputes a convolution */
  } nets[] = {
      {{"test/data/nets/tiny_resnet.ini", 2, 3, 0}, 0},
      {{"test/data/nets/mobile_block.ini", 2, 3, 0}, 1},
  };
  const nto_recompute modes[] = {NTO_RECOMPUTE_ON, NTO_RECOMPUTE_ACTIVATIONS,
                                 NTO_RECOMPUTE_OFF, NTO_RECOMPUTE_SEGMENTS};
  char dir[256];
  assert_int_equal(tmpdir_make(dir, sizeof dir, "recompute"), 0);
  for (size_t i = 0; i < sizeof nets / sizeof *nets; i++) {
    const net_case *nc = &nets[i].net;
    result ref = {0};
    nto_model_opts kept = {.recompute = NTO_RECOMPUTE_OFF};
    run_with(nc, kept, dir, NULL, &ref, NULL);
    for (int window = 0; window <= 3; window++) {
      nto_offload_stats st[4] = {{0}};
      /* resident with recompute off is the reference run itself */
      for (int k = 0; k < 4; k++) {
        if (window == 0 && modes[k] == NTO_RECOMPUTE_OFF)
          continue;
        result r = {0};
        /* the plain window's bytes: read-ahead in the region's room
         * (the default) may move more */
        nto_model_opts o = {.recompute = modes[k],
                            .prefetch = NTO_PREFETCH_STEPS};
        o.offload.window = window;
        run_with(nc, o, dir, NULL, &r, &st[k]);
        check_equal(nc, &ref, &r, window, NTO_IO_AUTO);
        result_free(&r);
      }
      for (int k = 0; window > 0 && k < 2; k++) {
        uint64_t a = st[k].planned_read + st[k].planned_written;
        uint64_t b = st[k + 1].planned_read + st[k + 1].planned_written;
        int fewer = k == 1 || nets[i].conv;
        if (fewer ? a >= b : a > b)
          fail_msg("%s window %d: recompute mode %d plans %llu bytes, "
                   "mode %d %llu",
                   nc->ini, window, (int)modes[k], (unsigned long long)a,
                   (int)modes[k + 1], (unsigned long long)b);
      }
    }
    result_free(&ref);
  }
  assert_int_equal(dir_entries(dir), 0);
  tmpdir_remove(dir);
}

/* The compute threads (parallel.h) split batch normalization, depthwise
 * convolution, activations and optimizer updates by features, channels
 * and elements: the same bits with 1 and 3 threads, resident and with a
 * window (under ThreadSanitizer too). */
static void test_compute_threads(void **state) {
  (void)state;
  char dir[256];
  assert_int_equal(tmpdir_make(dir, sizeof dir, "threads"), 0);
  nto_err err = {0};
  const net_case nets[] = {{"test/data/nets/mobile_block.ini", 4, 3, 0},
                           {"test/data/nets/tiny_resnet.ini", 4, 3, 0}};
  for (size_t i = 0; i < sizeof nets / sizeof *nets; i++) {
    result ref = {0};
    assert_int_equal(nto_parallel_set_threads(1, &err), 0);
    run(&nets[i], 0, NTO_IO_AUTO, dir, &ref);
    assert_int_equal(nto_parallel_set_threads(3, &err), 0);
    for (int w = 0; w <= 2; w += 2) {
      result r = {0};
      run(&nets[i], w, NTO_IO_AUTO, dir, &r);
      check_equal(&nets[i], &ref, &r, w, NTO_IO_AUTO);
      result_free(&r);
    }
    result_free(&ref);
  }
  nto_parallel_free();
  tmpdir_remove(dir);
}

/* Transitions seen by the state log, per pass kind and step. */
typedef struct state_log {
  int last[2][512]; /* last state entered, -1 before any */
  int transitions, illegal, cycles;
} state_log;

static void on_state(void *user, int mode, int step, nto_step_state from,
                     nto_step_state to) {
  state_log *l = user;
  int legal =
      (from == NTO_STEP_SWAPPED && to == NTO_STEP_WAIT_FOR_EXEC) ||
      (from == NTO_STEP_WAIT_FOR_EXEC && to == NTO_STEP_READY_FOR_EXEC) ||
      (from == NTO_STEP_READY_FOR_EXEC && to == NTO_STEP_WAIT_FOR_OFF) ||
      (from == NTO_STEP_WAIT_FOR_OFF && to == NTO_STEP_SWAPPED) ||
      (from == NTO_STEP_WAIT_FOR_OFF && to == NTO_STEP_WAIT_FOR_EXEC);
  int prev = l->last[mode][step];
  if (!legal || (prev >= 0 && prev != (int)from) ||
      (prev < 0 && from != NTO_STEP_SWAPPED))
    l->illegal++;
  l->last[mode][step] = (int)to;
  l->transitions++;
  l->cycles += to == NTO_STEP_SWAPPED;
}

/* Only legal transitions, each continuing the step's previous state, and
 * after the run (drained) every step that ran is SWAPPED again; the
 * resident bytes never exceed the planned tensor region; the device's busy
 * time lies within the I/O threads'. */
static void test_state_machine(void **state) {
  (void)state;
  char dir[256];
  assert_int_equal(tmpdir_make(dir, sizeof dir, "states"), 0);
  state_log log;
  memset(&log, 0, sizeof log);
  memset(log.last, 0xff, sizeof log.last);
  session ss;
  nto_err err = {0};
  nto_model_opts o = {.batch = 2, .seed = 3};
  o.offload = (nto_offload_opts){
      .window = 2, .swap_dir = dir, .log_state = on_state, .log_user = &log};
  session_open(&ss, "test/data/nets/tiny_resnet.ini", &o);
  nto_step_stats st;
  for (int s = 0; s < 4; s++) /* 3 training steps, then an inference */
    assert_int_equal(session_step(&ss, s, s == 3, &st, &err), 0);
  result r = {0};
  collect_weights(ss.m, &r); /* drains the window */
  nto_offload_stats os;
  assert_int_equal(nto_model_offload_stats(ss.m, &os), 0);
  assert_int_equal(log.illegal, 0);
  int S = nto_model_pass_steps(ss.m, NTO_PASS_TRAIN);
  for (int s = 0; s < S; s++)
    assert_int_equal(log.last[NTO_PASS_TRAIN][s], NTO_STEP_SWAPPED);
  for (int s = 0; s < nto_model_pass_steps(ss.m, NTO_PASS_EVAL); s++)
    assert_int_equal(log.last[NTO_PASS_EVAL][s], NTO_STEP_SWAPPED);
  assert_true(log.cycles >= 3 * S); /* every step ran 3 times */
  assert_true(os.read_bytes > 0 && os.written_bytes > 0);
  /* the device was busy while bytes moved, and only while an I/O thread
   * had a request queued or in flight */
  assert_true(os.device_busy_ms > 0);
  if (os.device_busy_ms > os.read_busy_ms + os.write_busy_ms + 1e-6)
    fail_msg("device busy %g ms, I/O threads %g + %g ms", os.device_busy_ms,
             os.read_busy_ms, os.write_busy_ms);
  assert_true(os.peak_resident <= os.region_max); /* frontier changes */
  assert_true(os.planned_peak <= os.region);
  result_free(&r);
  session_close(&ss);
  assert_int_equal(dir_entries(dir), 0);
  tmpdir_remove(dir);
}

/* An injected I/O error (the k-th write, then the k-th read, fails with
 * EIO) stops training at the next step boundary with NTO_EIO and a
 * message naming the tensor; freeing the model afterwards does not hang
 * and leaves no file behind. */
static void test_io_error_surfaces(void **state) {
  (void)state;
  for (int op = 0; op < 2; op++) {
    char dir[256];
    assert_int_equal(tmpdir_make(dir, sizeof dir, "ioerr"), 0);
    session ss;
    nto_err err = {0};
    nto_model_opts o = {.batch = 2, .seed = 3};
    o.offload = (nto_offload_opts){.window = 1, .swap_dir = dir};
    session_open(&ss, "test/data/nets/tiny_resnet.ini", &o);
    nto_io_fault f = {.op = op ? NTO_IO_READ : NTO_IO_WRITE,
                      .fail_nth = 5,
                      .errno_neg = -EIO};
    nto_io_fault_set(&f);
    nto_step_stats st;
    int rc = 0;
    for (int s = 0; s < 5 && rc == 0; s++)
      rc = session_step(&ss, s, 0, &st, &err);
    nto_io_fault_set(NULL);
    assert_int_equal(rc, NTO_EIO);
    if (!strstr(err.msg, op ? "swap read of tensor" : "swap write of tensor"))
      fail_msg("unexpected message: %s", err.msg);
    session_close(&ss);
    assert_int_equal(dir_entries(dir), 0);
    tmpdir_remove(dir);
  }
}

/* The message of an I/O error names a tensor "L:W" and its layer L:
 * "... tensor L:W (layer L, ...". */
static void check_names_tensor(const char *msg) {
  const char *t = strstr(msg, " of tensor ");
  const char *l = strstr(msg, " (layer ");
  if (!t || !l || l < t)
    fail_msg("no tensor and layer named: %s", msg);
  t += strlen(" of tensor ");
  l += strlen(" (layer ");
  size_t n = strcspn(l, ",");
  if (strncmp(t, l, n) != 0 || t[n] != ':')
    fail_msg("the layer is not the tensor's: %s", msg);
}

/* Train up to `steps` steps of tiny_resnet at window 1 over backend io
 * with fault f set after model creation (checksums 1 on, 0 off). Returns the
 * first error (0 if none), its message in *err; the faults fired in *fired. The
 * model is freed (must not hang) and the swap directory must be empty
 * afterwards. */
static int faulty_run(nto_io_kind io, int checksum, const nto_io_fault *f,
                      int steps, nto_err *err, unsigned *fired) {
  char dir[256];
  assert_int_equal(tmpdir_make(dir, sizeof dir, "fault"), 0);
  session ss;
  nto_model_opts o = {.batch = 2, .seed = 3};
  o.offload = (nto_offload_opts){
      .window = 1, .swap_dir = dir, .io = io, .checksum = checksum ? 1 : -1};
  session_open(&ss, "test/data/nets/tiny_resnet.ini", &o);
  nto_offload_stats st;
  assert_int_equal(nto_model_offload_stats(ss.m, &st), 0);
  assert_int_equal(st.checksum, checksum);
  nto_io_fault_set(f);
  nto_step_stats sst;
  int rc = 0;
  for (int s = 0; s < steps && rc == 0; s++)
    rc = session_step(&ss, s, 0, &sst, err);
  if (rc == 0) { /* the fault may hit the writes of the final drain */
    nto_named_tensor *ts;
    int n;
    if (nto_model_weights(ss.m, &ts, &n, err) == 0) {
      float *buf = malloc(nto_named_numel(&ts[0]) * sizeof(float));
      rc = ts[0].fetch(ts[0].ctx, ts[0].index, buf, err);
      free(buf);
      nto_model_weights_free(ts, n);
    }
  }
  *fired = nto_io_fault_fired();
  nto_io_fault_set(NULL);
  session_close(&ss);
  assert_int_equal(dir_entries(dir), 0);
  tmpdir_remove(dir);
  return rc;
}

static const nto_io_kind both_ios[] = {NTO_IO_PSYNC, NTO_IO_AUTO};

/* A byte flipped in the k-th read (media corruption) is caught by the
 * checksum: NTO_EIO naming the tensor and its layer, "checksum mismatch",
 * at the next step boundary; freeing the model does not hang and leaves
 * no file. Without checksums the same flip goes unnoticed. Both backends,
 * several k. */
static void test_checksum_flip(void **state) {
  (void)state;
  for (int i = 0; i < 2; i++) {
    for (int k = 1; k <= 9; k += 4) {
      nto_io_fault f = {.op = NTO_IO_READ, .flip_nth = k};
      nto_err err = {0};
      unsigned fired = 0;
      int rc = faulty_run(both_ios[i], 1, &f, 5, &err, &fired);
      assert_int_equal(fired, 1);
      if (rc != NTO_EIO || !strstr(err.msg, "swap read of tensor ") ||
          !strstr(err.msg, ": checksum mismatch (stored 0x"))
        fail_msg("%s, flip of read %d: %d %s", nto_io_kind_name(both_ios[i]), k,
                 rc, err.msg);
      check_names_tensor(err.msg);
      if (i == 0 && k == 1)
        print_message("%s\n", err.msg);
      rc = faulty_run(both_ios[i], 0, &f, 5, &err, &fired);
      assert_int_equal(fired, 1);
      if (rc != 0)
        fail_msg("without checksums: %s", err.msg);
    }
  }
}

/* The synchronous path: a weight stored through the residency and
 * fetched with a byte flipped is refused the same way. */
static void test_checksum_fetch(void **state) {
  (void)state;
  char dir[256];
  assert_int_equal(tmpdir_make(dir, sizeof dir, "fetch"), 0);
  session ss;
  nto_err err = {0};
  nto_model_opts o = {.batch = 2, .seed = 3};
  o.offload = (nto_offload_opts){.window = 1, .swap_dir = dir, .checksum = 1};
  session_open(&ss, "test/data/nets/lenet.ini", &o);
  nto_named_tensor *ts;
  int n;
  assert_int_equal(nto_model_weights(ss.m, &ts, &n, &err), 0);
  float *buf = malloc(nto_named_numel(&ts[n - 1]) * sizeof(float));
  assert_int_equal(ts[n - 1].fetch(ts[n - 1].ctx, ts[n - 1].index, buf, &err),
                   0);
  nto_io_fault f = {.op = NTO_IO_READ, .flip_nth = 1, .flip_at = 8};
  nto_io_fault_set(&f);
  int rc = ts[n - 1].fetch(ts[n - 1].ctx, ts[n - 1].index, buf, &err);
  assert_int_equal(nto_io_fault_fired(), 1);
  nto_io_fault_set(NULL);
  if (rc != NTO_EIO || !strstr(err.msg, "checksum mismatch"))
    fail_msg("fetch with a flipped byte: %d %s", rc, err.msg);
  check_names_tensor(err.msg);
  /* The swap copy itself is intact: fetching again works. */
  assert_int_equal(ts[n - 1].fetch(ts[n - 1].ctx, ts[n - 1].index, buf, &err),
                   0);
  free(buf);
  nto_model_weights_free(ts, n);
  session_close(&ss);
  assert_int_equal(dir_entries(dir), 0);
  tmpdir_remove(dir);
}

/* A full disk on the k-th write (ENOSPC): NTO_EIO with "No space left on
 * device", naming the tensor, its layer and the swap directory; no hang,
 * no file left. Both backends. */
static void test_enospc_write(void **state) {
  (void)state;
  for (int i = 0; i < 2; i++) {
    for (int k = 2; k <= 10; k += 4) {
      nto_io_fault f = {
          .op = NTO_IO_WRITE, .fail_nth = k, .errno_neg = -ENOSPC};
      nto_err err = {0};
      unsigned fired = 0;
      int rc = faulty_run(both_ios[i], 1, &f, 5, &err, &fired);
      assert_int_equal(fired, 1);
      if (rc != NTO_EIO || !strstr(err.msg, "swap write of tensor ") ||
          !strstr(err.msg, "No space left on device") ||
          !strstr(err.msg, "--swap-dir"))
        fail_msg("%s, write %d: %d %s", nto_io_kind_name(both_ios[i]), k, rc,
                 err.msg);
      check_names_tensor(err.msg);
      if (i == 0 && k == 2)
        print_message("%s\n", err.msg);
    }
  }
}

/* Short transfers (every read, or every write, returns half its bytes
 * at first and the backend continues it) change nothing: weights, losses
 * and outputs stay bit-identical to the all-resident run, over both
 * backends, with checksums on. */
static void test_short_transfers(void **state) {
  (void)state;
  char dir[256];
  assert_int_equal(tmpdir_make(dir, sizeof dir, "short"), 0);
  const net_case nc = {"test/data/nets/tiny_resnet.ini", 4, 3, 0};
  result ref = {0};
  run(&nc, 0, NTO_IO_AUTO, dir, &ref);
  for (int i = 0; i < 2; i++) {
    for (int op = 0; op < 2; op++) {
      nto_io_fault f = {.op = op ? NTO_IO_READ : NTO_IO_WRITE, .short_nth = -1};
      nto_model_opts o = {0};
      o.offload.window = 1;
      o.offload.io = both_ios[i];
      o.offload.checksum = 1;
      result r = {0};
      unsigned fired = 0;
      run_faulted(&nc, o, dir, NULL, &f, &fired, &r, NULL);
      check_equal(&nc, &ref, &r, 1, both_ios[i]);
      result_free(&r);
      if (fired == 0) /* some requests were large enough to be split */
        fail_msg("%s %s: no transfer was split", nto_io_kind_name(both_ios[i]),
                 op ? "reads" : "writes");
    }
  }
  result_free(&ref);
  assert_int_equal(dir_entries(dir), 0);
  tmpdir_remove(dir);
}

/* Checksums on and off give the same bit-identical results as the
 * all-resident run, over both backends and two windows; with them on
 * the engine reports time spent computing them. */
static void test_checksum_identical(void **state) {
  (void)state;
  char dir[256];
  assert_int_equal(tmpdir_make(dir, sizeof dir, "sums"), 0);
  const net_case nc = {"test/data/nets/tiny_resnet.ini", 2, 3, 0};
  result ref = {0};
  run(&nc, 0, NTO_IO_AUTO, dir, &ref);
  for (int i = 0; i < 2; i++)
    for (int w = 1; w <= 2; w++)
      for (int sum = 0; sum <= 1; sum++) {
        nto_model_opts o = {0};
        o.offload.window = w;
        o.offload.io = both_ios[i];
        o.offload.checksum = sum ? 1 : -1;
        result r = {0};
        nto_offload_stats st;
        run_with(&nc, o, dir, NULL, &r, &st);
        assert_int_equal(st.checksum, sum);
        assert_true(sum ? st.checksum_ms > 0 : st.checksum_ms == 0);
        check_equal(&nc, &ref, &r, w, both_ios[i]);
        result_free(&r);
      }
  result_free(&ref);
  assert_int_equal(dir_entries(dir), 0);
  tmpdir_remove(dir);
}

/* NTO_TEST_QUICK=1 (the ThreadSanitizer run) keeps to the small nets. */
static int quick(void) {
  const char *q = getenv("NTO_TEST_QUICK");
  return q && q[0] == '1';
}

/* A plan-only model of nc (options o, with nc's batch and update chunk),
 * for its schedules and byte counts; the caller frees it and *c. */
static nto_model *plan_model(const net_case *nc, nto_model_opts o,
                             nto_config *c) {
  nto_model *m;
  nto_err err = {0};
  o.batch = nc->batch;
  o.plan_only = 1;
  o.update_chunk = nc->chunk;
  assert_int_equal(nto_config_load(c, nc->ini, &err), 0);
  if (nto_model_create(&m, c, &o, &err) != 0)
    fail_msg("%s", err.msg);
  return m;
}

/* A plan-only model of nc with recompute r and window mode w (auto and
 * budget offload: model.h nto_recompute): what window 1 needs (region +
 * workspace), what everything resident needs, the workspace (outputs may
 * be NULL). */
static void plan_needs(const net_case *nc, nto_recompute r, nto_window_mode w,
                       size_t *need1, size_t *total, size_t *ws) {
  nto_config c;
  nto_err err = {0};
  size_t need = 0;
  nto_model *m =
      plan_model(nc, (nto_model_opts){.recompute = r, .window_mode = w}, &c);
  assert_int_equal(nto_tuner_need(nto_model_tuner(m), 1, NULL, &need, &err), 0);
  if (need1)
    *need1 = need;
  if (total)
    *total = nto_model_mem_plan(m).total;
  if (ws)
    *ws = nto_model_mem_plan(m).workspace;
  nto_model_free(m);
  nto_config_free(&c);
}

/* plan_needs with the defaults: recompute auto, a fixed window. */
static void needs(const net_case *nc, size_t *need1, size_t *total,
                  size_t *ws) {
  plan_needs(nc, NTO_RECOMPUTE_AUTO, NTO_WINDOW_FIXED, need1, total, ws);
}

/* Bytes read + written per pass by the kept schedule of window n with
 * frontier upto (NULL: s + n) on m's training plan. */
static uint64_t kept_bytes(const nto_model *m, int n, const int *upto) {
  nto_schedule sc;
  nto_err err = {0};
  nto_schedule_req rq = {n, upto, 1, 0};
  if (nto_schedule_make(&sc, nto_model_plan(m, NTO_PASS_TRAIN), &rq, &err) != 0)
    fail_msg("%s", err.msg);
  uint64_t b = sc.read_bytes + sc.written_bytes;
  nto_schedule_free(&sc);
  return b;
}

/* A run of nc at window n that declined room (last_room_declined) has the
 * plain window in force: nothing read ahead, and plans the kept plain
 * window's bytes, plain. */
static void check_declined(const net_case *nc, int n, uint64_t plain,
                           const nto_offload_stats *st) {
  uint64_t planned = st->planned_read + st->planned_written;
  if (last_room_declined && (st->ahead != 0 || planned != plain))
    fail_msg("%s window %d: room declined, yet reads %d steps ahead and "
             "plans %llu bytes, the plain window %llu",
             nc->ini, n, st->ahead, (unsigned long long)planned,
             (unsigned long long)plain);
}

/* --prefetch room: frontiers from measured times fitted into the plain
 * window's own region (lookahead.h nto_lookahead_fit), used only where
 * they pay (model.h nto_model_room_pays). Every region of the run
 * (region_max, frontiers included) + workspace stays within what the plain
 * window needs, and results are the same bits as everything resident, at
 * windows 1 and 2. Where room declines its read-ahead (it depends on the
 * device's idle time in the run; test_room_declined_slow_device forces
 * it), the run moves the kept plain window's bytes (check_declined). The
 * same fitted frontier without the check (read-ahead by time within a
 * budget of exactly the plain window's need) is used, and must keep the
 * bits too. ResNet-18 (batch 2) unless quick. */
static void test_prefetch_room(void **state) {
  (void)state;
  char dir[256];
  assert_int_equal(tmpdir_make(dir, sizeof dir, "room"), 0);
  const net_case nets[] = {{"test/data/nets/tiny_resnet.ini", 2, 3, 0},
                           {"test/data/nets/mobile_block.ini", 2, 3, 0},
                           {"res/resnet18.ini", 2, 3, 0}};
  int ahead = 0; /* runs that read ahead */
  for (size_t k = 0; k < sizeof nets / sizeof *nets && !(k == 2 && quick());
       k++) {
    const net_case *nc = &nets[k];
    result ref = {0};
    run(nc, 0, NTO_IO_AUTO, dir, &ref);
    for (int window = 1; window <= 2; window++) {
      nto_config c;
      nto_err err = {0};
      nto_model_opts po = {0};
      po.offload.window = window; /* the offloaded plan (nto_recompute) */
      nto_model *m = plan_model(nc, po, &c);
      size_t need = 0, ws = 0;
      assert_int_equal(
          nto_tuner_need(nto_model_tuner(m), window, NULL, &need, &err), 0);
      ws = nto_model_mem_plan(m).workspace;
      uint64_t plain = kept_bytes(m, window, NULL);
      nto_model_free(m);
      nto_config_free(&c);
      for (int fit = 0; fit < 2; fit++) {
        nto_model_opts o = {.prefetch =
                                fit ? NTO_PREFETCH_TIME : NTO_PREFETCH_ROOM,
                            .memory_budget = fit ? need : 0};
        o.offload.window = window;
        result r = {0};
        nto_offload_stats st;
        run_with(nc, o, dir, NULL, &r, &st);
        check_equal(nc, &ref, &r, window, NTO_IO_AUTO);
        if (st.region_max + ws > need)
          fail_msg("%s window %d: region %zu + workspace %zu above the "
                   "plain window's %zu",
                   nc->ini, window, st.region_max, ws, need);
        assert_true(st.peak_resident <= st.region_max);
        if (!fit)
          check_declined(nc, window, plain, &st);
        ahead += st.ahead > 0;
        result_free(&r);
      }
    }
    result_free(&ref);
  }
  if (ahead == 0)
    fail_msg("no run read ahead: the fitted frontiers went untested");
  assert_int_equal(dir_entries(dir), 0);
  tmpdir_remove(dir);
}

/* upto[0..S) is a frontier of window n: s + n <= upto[s] <= s + S - 1,
 * nondecreasing across the wrap (lookahead.h). */
static void check_frontier(const int *upto, int S, int n) {
  for (int s = 0; s < S; s++) {
    if (upto[s] < s + n || upto[s] > s + S - 1)
      fail_msg("window %d: upto[%d] = %d out of [%d, %d]", n, s, upto[s], s + n,
               s + S - 1);
    if (s > 0 && upto[s] < upto[s - 1])
      fail_msg("window %d: upto[%d] = %d < upto[%d] = %d", n, s, upto[s], s - 1,
               upto[s - 1]);
  }
  assert_true(upto[S - 1] - S <= upto[0]);
}

/* A plan-only ResNet-18 at batch 32 (c: its loaded config, to free),
 * its S training steps at 4 ms each into *step_ms, and room for a
 * frontier in *upto (both malloc'd). */
static nto_model *resnet18_b32_plan(nto_config *c, int *S, double **step_ms,
                                    int **upto) {
  nto_model *m;
  nto_err err = {0};
  nto_model_opts o = {.batch = 32, .plan_only = 1};
  assert_int_equal(nto_config_load(c, "res/resnet18.ini", &err), 0);
  if (nto_model_create(&m, c, &o, &err) != 0)
    fail_msg("%s", err.msg);
  *S = nto_model_plan(m, NTO_PASS_TRAIN)->n_steps;
  *step_ms = malloc((size_t)*S * sizeof **step_ms);
  *upto = malloc((size_t)*S * sizeof **upto);
  assert_non_null(*step_ms);
  assert_non_null(*upto);
  for (int s = 0; s < *S; s++)
    (*step_ms)[s] = 4.0;
  return m;
}

/* nto_model_frontier on ResNet-18 at batch 32 (plan only), windows 1 and
 * 2, every step 4 ms at 500 MiB/s: reads of the layer-4 weights and Adam
 * state take several steps, so steps move ahead. Fitted within the plain
 * window's own region (room) and within a budget 12 MiB above it, the
 * frontier moves steps and the schedule built from it stays within the
 * limit. At batch 32 the first fit, placed, exceeds the plain region by
 * more than the retries with lower targets recover, so this needs the
 * fit with fewer steps moved (before it, room moved nothing here), and
 * room must move at least a third as many steps as the budget does. */
static void test_frontier_fit(void **state) {
  (void)state;
  nto_config c;
  nto_err err = {0};
  int S, *upto;
  double *step_ms;
  nto_model *m = resnet18_b32_plan(&c, &S, &step_ms, &upto);
  const double bw = 500.0 * 1048576 / 1000; /* bytes per ms */
  for (int n = 1; n <= 2; n++) {
    size_t plain = 0, need = 0;
    int moved = 0, moved_at[2] = {0, 0};
    assert_int_equal(nto_tuner_need(nto_model_tuner(m), n, NULL, &plain, &err),
                     0);
    const size_t limits[] = {0, plain + (12u << 20)};
    for (int k = 0; k < 2; k++) {
      size_t limit = k ? limits[k] : plain;
      if (nto_tuner_frontier(nto_model_tuner(m), n, step_ms, bw, k == 0,
                             limits[k], upto, &moved, &err) != 0)
        fail_msg("%s", err.msg);
      if (moved <= 0)
        fail_msg("window %d, limit %zu: no step moved ahead", n, limit);
      moved_at[k] = moved;
      check_frontier(upto, S, n);
      assert_int_equal(nto_tuner_need(nto_model_tuner(m), n, upto, &need, &err),
                       0);
      if (need > limit)
        fail_msg("window %d: frontier needs %zu bytes, above the limit %zu", n,
                 need, limit);
    }
    /* room is not starved: the steps with the largest stalls (layer 4's)
     * find no room in a region sized by layer 4's backward, others do
     * (when only a prefix of the largest moved, window 1 moved 49 steps
     * against the budget's 203) */
    if (3 * moved_at[0] < moved_at[1])
      fail_msg("window %d: room moved %d steps, a budget 12 MiB larger %d", n,
               moved_at[0], moved_at[1]);
  }
  int moved = 1;
  assert_int_equal(nto_tuner_frontier(nto_model_tuner(m), 0, step_ms, bw, 1, 0,
                                      upto, &moved, &err),
                   NTO_EINVAL);
  assert_int_equal(moved, 0);
  assert_int_equal(nto_tuner_frontier(nto_model_tuner(m), 1, step_ms, 0, 1, 0,
                                      upto, &moved, &err),
                   NTO_EINVAL);
  free(step_ms);
  free(upto);
  nto_model_free(m);
  nto_config_free(&c);
}

/* nto_model_room_pays on ResNet-18 b32 window 1 (plan only), every step
 * 4 ms: the room frontier at 500 MiB/s moves more bytes than the plain
 * window (keeping loses room to the read-ahead). It pays when, at the
 * device's rate measured in a pass, its bytes keep the device busy for at
 * most NTO_ROOM_DEVICE_SHARE of that pass (just below and above the
 * boundary), and not on a saturated device or with nothing measured; a
 * frontier that moves no more bytes always pays. */
static void test_room_pays(void **state) {
  (void)state;
  nto_config c;
  nto_err err = {0};
  int S, *upto, moved = 0, pays = -1;
  double *step_ms;
  nto_model *m = resnet18_b32_plan(&c, &S, &step_ms, &upto);
  if (nto_tuner_frontier(nto_model_tuner(m), 1, step_ms, 500.0 * 1048576 / 1000,
                         1, 0, upto, &moved, &err) != 0)
    fail_msg("%s", err.msg);
  assert_true(moved > 0);
  uint64_t plain = kept_bytes(m, 1, NULL), room = kept_bytes(m, 1, upto);
  if (room <= plain)
    fail_msg("room %llu bytes, plain %llu: expected more with room",
             (unsigned long long)room, (unsigned long long)plain);
  /* a pass of 1000 ms that moved the plain bytes; the device time at
   * which room's bytes take exactly the share of it */
  double pass = 1000, edge = NTO_ROOM_DEVICE_SHARE * pass * plain / room;
  const struct {
    double device_ms;
    uint64_t bytes;
    int pays;
  } cases[] = {
      {0.95 * edge, plain, 1},
      {1.05 * edge, plain, 0},
      {0.4 * pass, plain, 1}, /* this disk after the third pass */
      {pass, plain, 0},       /* a slow card: busy the whole pass */
      {0, plain, 0},          /* no device time measured */
      {0.4 * pass, 0, 0},     /* no bytes measured */
      {0.95 * edge * room / plain, room, 1}, /* a pass with room itself */
      {1.05 * edge * room / plain, room, 0},
  };
  for (size_t k = 0; k < sizeof cases / sizeof *cases; k++) {
    assert_int_equal(nto_tuner_room_pays(nto_model_tuner(m), 1, upto, pass,
                                         cases[k].device_ms, cases[k].bytes,
                                         &pays, &err),
                     0);
    if (pays != cases[k].pays)
      fail_msg("case %zu (device %g ms of %g, %llu bytes): pays %d, "
               "expected %d",
               k, cases[k].device_ms, pass, (unsigned long long)cases[k].bytes,
               pays, cases[k].pays);
  }
  /* the plain frontier moves the plain bytes: pays on any card */
  for (int s = 0; s < S; s++)
    upto[s] = s + 1;
  assert_int_equal(nto_tuner_room_pays(nto_model_tuner(m), 1, upto, pass, pass,
                                       plain, &pays, &err),
                   0);
  assert_int_equal(pays, 1);
  free(step_ms);
  free(upto);
  nto_model_free(m);
  nto_config_free(&c);
}

/* Room on a device with no idle time (every read made 3 ms slow before it
 * is handed over, counted as device time): where room's frontier moves
 * more bytes than the plain window, the check declines it, and the run
 * moves the kept plain window's bytes with nothing read ahead; results
 * stay the all-resident run's bits. At least one net must have been
 * declined, or the declined path went untested. */
static void test_room_declined_slow_device(void **state) {
  (void)state;
  char dir[256];
  assert_int_equal(tmpdir_make(dir, sizeof dir, "roomslow"), 0);
  const net_case nets[] = {{"test/data/nets/tiny_resnet.ini", 2, 3, 0},
                           {"test/data/nets/mobile_block.ini", 2, 3, 0}};
  int declined = 0;
  for (size_t k = 0; k < sizeof nets / sizeof *nets; k++) {
    const net_case *nc = &nets[k];
    result ref = {0}, r = {0};
    run(nc, 0, NTO_IO_AUTO, dir, &ref);
    nto_model_opts o = {.prefetch = NTO_PREFETCH_ROOM};
    o.offload.window = 1;
    nto_io_fault f = {.op = NTO_IO_READ, .delay_us = 3000};
    unsigned fired = 0;
    nto_offload_stats st;
    run_faulted(nc, o, dir, NULL, &f, &fired, &r, &st);
    check_equal(nc, &ref, &r, 1, NTO_IO_AUTO);
    if (last_room_declined) {
      nto_config c;
      nto_model_opts po = {0};
      po.offload.window = 1;
      nto_model *m = plan_model(nc, po, &c);
      check_declined(nc, 1, kept_bytes(m, 1, NULL), &st);
      nto_model_free(m);
      nto_config_free(&c);
    }
    declined += last_room_declined;
    result_free(&r);
    result_free(&ref);
  }
  if (declined == 0)
    fail_msg("room was not declined on a device busy the whole pass");
  assert_int_equal(dir_entries(dir), 0);
  tmpdir_remove(dir);
}

/* Model creation with o on nc must fail with NTO_ECONFIG and a message
 * containing what. */
static void expect_refused(const net_case *nc, nto_model_opts o,
                           const char *dir, const char *what) {
  nto_config c;
  nto_model *m = NULL;
  nto_err err = {0};
  o.batch = nc->batch;
  o.offload.swap_dir = dir;
  assert_int_equal(nto_config_load(&c, nc->ini, &err), 0);
  int rc = nto_model_create(&m, &c, &o, &err);
  nto_model_free(m);
  nto_config_free(&c);
  if (rc != NTO_ECONFIG || !strstr(err.msg, what))
    fail_msg("%s: expected a refusal with '%s', got %d: %s", nc->ini, what, rc,
             err.msg);
}

/* --memory-budget: for budgets from below the minimum to everything, the
 * model refuses budgets below what window 1 needs (naming it), runs all
 * resident when everything fits, and otherwise picks a window whose
 * tensor region + workspace fit the budget, with weights bit-identical to
 * the all-resident run. A fixed window or `all` above the budget is
 * refused. */
static void test_memory_budget(void **state) {
  (void)state;
  char dir[256];
  assert_int_equal(tmpdir_make(dir, sizeof dir, "budget"), 0);
  const net_case nets[] = {{"test/data/nets/tiny_resnet.ini", 2, 3, 0},
                           {"test/data/nets/lenet.ini", 3, 3, 1024}};
  for (size_t k = 0; k < 2; k++) {
    const net_case *nc = &nets[k];
    size_t need1, total, ws, seg1;
    needs(nc, &need1, &total, &ws);
    /* recompute auto's last fallback (segments) may need less */
    plan_needs(nc, NTO_RECOMPUTE_SEGMENTS, NTO_WINDOW_FIXED, &seg1, NULL, NULL);
    need1 = seg1 < need1 ? seg1 : need1;
    assert_true(need1 < total);
    result ref = {0};
    run(nc, 0, NTO_IO_AUTO, dir, &ref);
    const size_t budgets[] = {need1, need1 + (total - need1) / 4,
                              need1 + (total - need1) / 2, total - 1, total};
    /* frontiers from measured times must stay within the budget too */
    nto_model_opts o = {.window_mode = NTO_WINDOW_BUDGET,
                        .prefetch = NTO_PREFETCH_TIME};
    o.memory_budget = need1 - NTO_PAGE;
    char lowest[32];
    snprintf(lowest, sizeof lowest, "%.1f KiB", (double)need1 / 1024);
    expect_refused(nc, o, dir, lowest);
    int windows = 0;
    for (size_t b = 0; b < sizeof budgets / sizeof *budgets; b++) {
      o.memory_budget = budgets[b];
      result r = {0};
      nto_offload_stats st;
      run_with(nc, o, dir, NULL, &r, &st);
      if (budgets[b] >= total) {
        assert_int_equal(st.window, 0); /* everything fits: resident */
      } else {
        assert_true(st.window >= 1);
        /* every region of the run, frontiers included (region_max) */
        assert_true(st.region_max + ws <= budgets[b]);
        assert_true(st.peak_resident <= st.region_max);
        windows += st.window > 1;
      }
      check_equal(nc, &ref, &r, st.window, NTO_IO_AUTO);
      result_free(&r);
    }
    assert_true(windows > 0); /* larger budgets did buy larger windows */
    nto_model_opts fixed = {.memory_budget = need1};
    fixed.offload.window = 100000;
    expect_refused(nc, fixed, dir, "largest window");
    fixed.offload.window = 0;
    expect_refused(nc, fixed, dir, "everything resident");
    result_free(&ref);
  }
  assert_int_equal(dir_entries(dir), 0);
  tmpdir_remove(dir);
}

/* --recompute auto under a memory budget. MobileNetV2 at 32x32, batch 4:
 * its recomputed expansions raise window 1's need (a recomputed output is
 * content the window holds or writes). A budget between the two needs
 * still trains, with the convolutions' outputs kept
 * (nto_model_convs_kept), bit for bit as all resident; from the higher
 * need on they are recomputed. Below the lower one, segments are tried
 * last and need more still: the refusal names the lower minimum, not
 * theirs. tiny_resnet (batch 2) recomputes no convolution with auto, and
 * segments lower its need: a budget between the two trains with segments
 * (nto_model_recompute), bit for bit, and below both the refusal names
 * segments' minimum. `on` asks for recomputed convolutions and gets no
 * such fallback. */
static void test_recompute_budget(void **state) {
  (void)state;
  if (quick())
    skip();
  char dir[256], lower[32];
  assert_int_equal(tmpdir_make(dir, sizeof dir, "rcbudget"), 0);
  const net_case nc = {"res/mobilenetv2_32.ini", 4, 2, 0};
  size_t act, conv, seg, ws;
  plan_needs(&nc, NTO_RECOMPUTE_ACTIVATIONS, NTO_WINDOW_BUDGET, &act, NULL,
             &ws);
  plan_needs(&nc, NTO_RECOMPUTE_AUTO, NTO_WINDOW_BUDGET, &conv, NULL, NULL);
  plan_needs(&nc, NTO_RECOMPUTE_SEGMENTS, NTO_WINDOW_BUDGET, &seg, NULL, NULL);
  assert_true(conv > act + NTO_PAGE); /* what makes this case */
  assert_true(seg > act);             /* and the message's choice */
  result ref = {0};
  run(&nc, 0, NTO_IO_AUTO, dir, &ref);
  nto_model_opts o = {.window_mode = NTO_WINDOW_BUDGET};
  const size_t budgets[] = {act, conv - NTO_PAGE, conv};
  for (int b = 0; b < 3; b++) {
    o.memory_budget = budgets[b];
    result r = {0};
    nto_offload_stats st;
    run_with(&nc, o, dir, NULL, &r, &st);
    assert_true(st.window >= 1);
    assert_true(st.region_max + ws <= budgets[b]);
    assert_int_equal(last_convs_kept, b < 2);
    assert_int_equal(last_recompute,
                     b < 2 ? NTO_RECOMPUTE_ACTIVATIONS : NTO_RECOMPUTE_AUTO);
    if (b < 2)
      assert_int_equal(last_recomputed_convs, 0);
    else
      assert_true(last_recomputed_convs > 0);
    check_equal(&nc, &ref, &r, st.window, NTO_IO_AUTO);
    result_free(&r);
  }
  o.memory_budget = act - NTO_PAGE;
  snprintf(lower, sizeof lower, "%.1f MiB", (double)act / (1 << 20));
  expect_refused(&nc, o, dir, lower);
  o.memory_budget = act;
  o.recompute = NTO_RECOMPUTE_ON;
  expect_refused(&nc, o, dir, "below the minimum");
  result_free(&ref);

  const net_case tiny = {"test/data/nets/tiny_resnet.ini", 2, 2, 0};
  size_t need;
  plan_needs(&tiny, NTO_RECOMPUTE_AUTO, NTO_WINDOW_BUDGET, &need, NULL, &ws);
  plan_needs(&tiny, NTO_RECOMPUTE_SEGMENTS, NTO_WINDOW_BUDGET, &seg, NULL,
             NULL);
  assert_true(need > seg);
  run(&tiny, 0, NTO_IO_AUTO, dir, &ref);
  o = (nto_model_opts){.window_mode = NTO_WINDOW_BUDGET, .memory_budget = seg};
  result r = {0};
  nto_offload_stats st;
  run_with(&tiny, o, dir, NULL, &r, &st);
  assert_int_equal(last_recompute, NTO_RECOMPUTE_SEGMENTS);
  assert_true(last_recomputed_convs > 0);
  assert_true(st.window >= 1 && st.region_max + ws <= seg);
  check_equal(&tiny, &ref, &r, st.window, NTO_IO_AUTO);
  result_free(&r);
  result_free(&ref);
  o.memory_budget = seg - NTO_PAGE;
  snprintf(lower, sizeof lower, "%.1f KiB", (double)seg / 1024);
  expect_refused(&tiny, o, dir, lower);
  assert_int_equal(dir_entries(dir), 0);
  tmpdir_remove(dir);
}

/* Changing the window between iterations (what --window auto does), and
 * the read frontier (what --prefetch time does), keeps results
 * bit-identical, over both backends. */
static void test_window_changes(void **state) {
  (void)state;
  char dir[256];
  assert_int_equal(tmpdir_make(dir, sizeof dir, "switch"), 0);
  const net_case nc = {"test/data/nets/tiny_resnet.ini", 2, 6, 0};
  const int switch_to[] = {0, 3, -1, 100000, -2, 2};
  result ref = {0};
  run(&nc, 0, NTO_IO_AUTO, dir, &ref);
  const nto_io_kind ios[] = {NTO_IO_PSYNC, NTO_IO_AUTO};
  for (int i = 0; i < 2; i++) {
    nto_model_opts o = {.prefetch = NTO_PREFETCH_STEPS};
    o.offload.window = 2;
    o.offload.io = ios[i];
    result r = {0};
    nto_offload_stats st;
    run_with(&nc, o, dir, switch_to, &r, &st);
    assert_int_equal(st.window, 2);
    assert_int_equal(st.ahead, 0); /* the last switch dropped the frontier */
    check_equal(&nc, &ref, &r, -1, ios[i]);
    result_free(&r);
  }
  result_free(&ref);
  assert_int_equal(dir_entries(dir), 0);
  tmpdir_remove(dir);
}

/* Registered buffers (nto_offload_opts.no_fixed, iobackend.h
 * nto_io_register_buffer): the I/O threads register the tensor region and
 * must drop it before its pages are released (a synchronous fetch of the
 * weights between steps, sync_io) or unmapped (a window change), else the
 * kernel goes on reading into the old pages. Training with fetches and
 * window changes in between gives the same bits as everything resident,
 * with the region registered again afterwards (where the kernel allows),
 * and without registration (no_fixed) too. */
static void test_registered_buffers(void **state) {
  (void)state;
  char dir[256];
  assert_int_equal(tmpdir_make(dir, sizeof dir, "fixed"), 0);
  const char *ini = "test/data/nets/tiny_resnet.ini";
  result res[3];
  memset(res, 0, sizeof res);
  for (int k = 0; k < 3; k++) { /* all resident, registered, no_fixed */
    nto_model_opts o = {.batch = 2, .seed = 7};
    o.offload.window = k ? 1 : 0;
    o.offload.no_fixed = k == 2;
    o.offload.swap_dir = dir;
    session ss;
    session_open(&ss, ini, &o);
    nto_err err = {0};
    nto_step_stats sst;
    for (int s = 0; s < 6; s++) {
      if (s == 4 && k &&
          nto_tuner_set_frontier(nto_model_tuner(ss.m), 3, NULL, &err) !=
              0) /* region remapped */
        fail_msg("window 3: %s", err.msg);
      if (session_step(&ss, s, 0, &sst, &err) != 0)
        fail_msg("%s step %d: %s", ini, s, err.msg);
      res[k].loss[s] = sst.loss;
      if (s == 1 || s == 3) { /* a fetch releases the region */
        result w = {0};
        collect_weights(ss.m, &w);
        result_free(&w);
      }
    }
    nto_offload_stats st;
    if (k && nto_model_offload_stats(ss.m, &st) == 0 &&
        !strcmp(st.io, "io_uring")) {
      if (k == 1 && !st.fixed)
        fprintf(stderr, "note: buffers not registered: %s\n", st.fixed_note);
      assert_true(k == 1 ? st.fixed || st.fixed_note[0] : !st.fixed);
    }
    collect_weights(ss.m, &res[k]);
    session_close(&ss);
  }
  for (int k = 1; k < 3; k++) {
    for (int s = 0; s < 6; s++)
      if (memcmp(&res[0].loss[s], &res[k].loss[s], sizeof(double)) != 0)
        fail_msg("%s: loss %d differs (%s)", ini, s,
                 k == 1 ? "registered" : "no_fixed");
    assert_int_equal(res[0].n_w, res[k].n_w);
    if (memcmp(res[0].w, res[k].w, res[0].n_w * sizeof(float)) != 0)
      fail_msg("%s: weights differ (%s)", ini,
               k == 1 ? "registered" : "no_fixed");
  }
  for (int k = 0; k < 3; k++)
    free(res[k].w);
  assert_int_equal(dir_entries(dir), 0);
  tmpdir_remove(dir);
}

/* Second offsets (schedule.h nto_sched_act alt): with every write made
 * slow (2 ms before each request), the pages the schedule planned for a
 * buffer are often still held by a write when the buffer is needed, and
 * the engine puts it at its second offset instead. The results stay bit
 * for bit those of the all-resident run, with both backends. */
static void test_second_offsets(void **state) {
  (void)state;
  char dir[256];
  assert_int_equal(tmpdir_make(dir, sizeof dir, "alt"), 0);
  const net_case nc = {"test/data/nets/tiny_resnet.ini", 2, 4, 0};
  result ref = {0};
  run(&nc, 0, NTO_IO_AUTO, dir, &ref);
  for (int i = 0; i < 2; i++) {
    nto_model_opts o = {0};
    o.offload.window = 1;
    o.offload.io = both_ios[i];
    o.prefetch = NTO_PREFETCH_STEPS;
    nto_io_fault f = {.op = NTO_IO_WRITE, .delay_us = 2000};
    unsigned fired = 0;
    result r = {0};
    nto_offload_stats st;
    run_faulted(&nc, o, dir, NULL, &f, &fired, &r, &st);
    if (st.relocated <= 0)
      fail_msg("%s: no buffer at its second offset",
               nto_io_kind_name(both_ios[i]));
    check_equal(&nc, &ref, &r, 1, both_ios[i]);
    result_free(&r);
  }
  result_free(&ref);
  assert_int_equal(dir_entries(dir), 0);
  tmpdir_remove(dir);
}

/* --window auto with an injected slow read path (every read 3 ms late):
 * every window stays within [1, the largest the budget allows] and within
 * the budget; weights stay bit-identical to the all-resident run. With
 * read-ahead by steps the controller grows N from 1. With --prefetch time
 * (under the budget: the shortest iteration, autowin.h) N starts at the
 * largest window within the budget, and the first iteration (run before
 * any step time existed, so without the read-ahead by time) is not
 * judged: N stays there for the second. */
static void test_auto_window_grows(void **state) {
  (void)state;
  char dir[256];
  assert_int_equal(tmpdir_make(dir, sizeof dir, "auto"), 0);
  const net_case nc = {"test/data/nets/tiny_resnet.ini", 2, 8, 0};
  size_t need1, total, ws, need4 = 0;
  needs(&nc, &need1, &total, &ws);
  result ref = {0};
  run(&nc, 0, NTO_IO_AUTO, dir, &ref);
  nto_config c;
  nto_err err = {0};
  nto_model *m = plan_model(&nc, (nto_model_opts){0}, &c);
  assert_int_equal(nto_tuner_need(nto_model_tuner(m), 4, NULL, &need4, &err),
                   0);

  for (int time = 0; time < 2; time++) {
    nto_model_opts o = {.window_mode = NTO_WINDOW_AUTO, .memory_budget = need4};
    o.prefetch = time ? NTO_PREFETCH_TIME : NTO_PREFETCH_STEPS;
    o.offload.io = NTO_IO_PSYNC;
    o.batch = nc.batch;
    o.seed = 7;
    o.offload.swap_dir = dir;
    session ss;
    session_open(&ss, nc.ini, &o);
    nto_io_fault f = {.op = NTO_IO_READ, .delay_us = 3000};
    nto_io_fault_set(&f);
    nto_step_stats st;
    result r = {0};
    for (int s = 0; s <= nc.steps; s++) {
      int eval = s == nc.steps;
      if (session_step(&ss, eval ? 99 : s, eval, &st, &err) != 0)
        fail_msg("auto step %d: %s", s, err.msg);
      r.loss[s] = st.loss;
    }
    nto_io_fault_set(NULL);
    int n = 0, grew = 0;
    const nto_window_sample *v =
        nto_tuner_window_trace(nto_model_tuner(ss.m), &n);
    int bound = nto_tuner_window_bound(nto_model_tuner(ss.m));
    assert_int_equal(n, nc.steps);
    assert_true(bound >= 4);
    assert_int_equal(v[0].window, time ? bound : 1);
    for (int i = 0; i < n; i++) {
      size_t need;
      assert_true(v[i].window >= 1);
      assert_int_equal(
          nto_tuner_need(nto_model_tuner(m), v[i].window, NULL, &need, &err),
          0);
      if (need > need4)
        fail_msg("iteration %d: window %d needs %zu bytes, budget %zu", i + 1,
                 v[i].window, need, need4);
      grew |= v[i].window > 1;
      if (v[i].before_read_ahead != (time && i == 0))
        fail_msg("prefetch %s, iteration %d: before_read_ahead %d",
                 time ? "time" : "steps", i + 1, v[i].before_read_ahead);
    }
    if (time) {
      assert_int_equal(v[1].window, bound);
      assert_false(v[0].judged);
    } else {
      assert_true(grew);
    }
    r.n_out = (size_t)ss.n * ss.k;
    r.out = malloc(r.n_out * sizeof(float));
    memcpy(r.out, nto_model_output(ss.m), r.n_out * sizeof(float));
    collect_weights(ss.m, &r);
    check_equal(&nc, &ref, &r, -1, NTO_IO_PSYNC);
    session_close(&ss);
    result_free(&r);
  }
  nto_model_free(m);
  nto_config_free(&c);
  result_free(&ref);
  assert_int_equal(dir_entries(dir), 0);
  tmpdir_remove(dir);
}

/* Spread placement on ResNet-18 (the chunked weights of stages 3 and 4,
 * gradients by rows from the rows cache) and MobileNetV2 at 32x32 (its
 * last 1x1 convolution, 1.6 MiB, in two chunks) with the default update
 * chunk: the bits of right-after placement all resident, all resident
 * and at windows 1 (read-ahead by time, pread/pwrite) and 3 (the default
 * backend). */
static void test_update_placement_nets(void **state) {
  (void)state;
  if (quick())
    skip();
  const net_case nets[] = {{"res/resnet18.ini", 2, 2, 0},
                           {"res/mobilenetv2_32.ini", 2, 2, 0}};
  char dir[256];
  assert_int_equal(tmpdir_make(dir, sizeof dir, "place_nets"), 0);
  for (size_t i = 0; i < sizeof nets / sizeof *nets; i++) {
    nto_model_opts spread = {.update_placement = NTO_UPDATES_SPREAD};
    check_spread_steps(&nets[i], spread);
    result ref = {0};
    run_with(&nets[i], (nto_model_opts){0}, dir, NULL, &ref, NULL);
    const int windows[] = {0, 1, 3};
    for (int w = 0; w < 3; w++) {
      result r = {0};
      nto_model_opts o = spread;
      o.offload.window = windows[w];
      o.offload.io = windows[w] == 1 ? NTO_IO_PSYNC : NTO_IO_AUTO;
      o.prefetch = windows[w] == 1 ? NTO_PREFETCH_TIME : NTO_PREFETCH_STEPS;
      run_with(&nets[i], o, dir, NULL, &r, NULL);
      check_equal(&nets[i], &ref, &r, windows[w], o.offload.io);
      result_free(&r);
    }
    result_free(&ref);
  }
  tmpdir_remove(dir);
}

static void test_resnet18(void **state) {
  (void)state;
  if (quick())
    skip();
  const net_case nc = {"res/resnet18.ini", 2, 2, 0};
  check_net(&nc);
}

static void test_mobilenetv2(void **state) {
  (void)state;
  if (quick())
    skip();
  const net_case nc = {"res/mobilenetv2_32.ini", 2, 2, 0};
  check_net(&nc);
}

/* Segment recomputation (nto_recompute segments) on ResNet-18 (each
 * block's first convolution again from the block's input, the stem's
 * twice) and MobileNetV2 (expansion and depthwise again): the same bits as
 * all resident keeping everything, at windows 1 and 3, both backends, and
 * at window 2 with only 3 of the segment convolutions (segments_max). */
static void test_segments_nets(void **state) {
  (void)state;
  if (quick())
    skip();
  const net_case nets[] = {{"res/resnet18.ini", 2, 2, 0},
                           {"res/mobilenetv2_32.ini", 2, 2, 0}};
  char dir[256];
  assert_int_equal(tmpdir_make(dir, sizeof dir, "segments"), 0);
  for (size_t i = 0; i < sizeof nets / sizeof *nets; i++) {
    result ref = {0};
    run_with(&nets[i], (nto_model_opts){.recompute = NTO_RECOMPUTE_OFF}, dir,
             NULL, &ref, NULL);
    for (int window = 1; window <= 3; window++) {
      result r = {0};
      /* window 2: 3 segment convolutions of all (tensors.h segments_max),
       * as a budget's fallback may choose */
      nto_model_opts o = {.recompute = NTO_RECOMPUTE_SEGMENTS,
                          .segments_max = window == 2 ? 3 : 0};
      o.offload.window = window;
      o.offload.io = window == 1 ? NTO_IO_PSYNC : NTO_IO_AUTO;
      run_with(&nets[i], o, dir, NULL, &r, NULL);
      check_equal(&nets[i], &ref, &r, window, o.offload.io);
      result_free(&r);
    }
    result_free(&ref);
  }
  assert_int_equal(dir_entries(dir), 0);
  tmpdir_remove(dir);
}

/* Channel groups (tensors.h): MobileNetV2's expansion chains (1x1
 * convolution, batch normalization, ReLU6, depthwise convolution) run in
 * groups of channels with the same bits at every window and both
 * backends, with recompute auto and segments; against the ungrouped model
 * they differ by rounding only. */
static void test_channel_groups(void **state) {
  (void)state;
  const net_case nc = {"res/mobilenetv2_32.ini", 2, 2, 0};
  /* 128 KiB: 16 chains in 2 to 9 groups at batch 2, ending at a depthwise
   * convolution (stride 2), a batch normalization or an activation */
  const size_t group = 128 << 10;
  check_net_opts(&nc, (nto_model_opts){.group_bytes = group});
  assert_int_equal(last_chains, 16);
  if (!quick())
    check_net_opts(&nc, (nto_model_opts){.group_bytes = group,
                                         .recompute = NTO_RECOMPUTE_SEGMENTS});
  /* the first forward (before any update) is the ungrouped one's up to
   * rounding (1.7e-6 of the loss, through 50 layers); gradients:
   * test_goldens against PyTorch */
  char dir[256];
  assert_int_equal(tmpdir_make(dir, sizeof dir, "groups"), 0);
  result whole = {0}, grouped = {0};
  run_with(&nc, (nto_model_opts){0}, dir, NULL, &whole, NULL);
  assert_int_equal(last_chains, 0);
  run_with(&nc, (nto_model_opts){.group_bytes = group}, dir, NULL, &grouped,
           NULL);
  assert_true(fabs(grouped.loss[0] - whole.loss[0]) <=
              1e-5 * fabs(whole.loss[0]));
  result_free(&whole);
  result_free(&grouped);
  assert_int_equal(dir_entries(dir), 0);
  tmpdir_remove(dir);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_small_nets),
      cmocka_unit_test_teardown(test_state_formats, fp32_state),
      cmocka_unit_test(test_frozen_layers),
      cmocka_unit_test(test_inference_model),
      cmocka_unit_test(test_frozen_batch_stats),
      cmocka_unit_test(test_chunked_update),
      cmocka_unit_test(test_update_placement),
      cmocka_unit_test(test_update_placement_nets),
      cmocka_unit_test(test_keep_resident),
      cmocka_unit_test(test_recompute),
      cmocka_unit_test(test_compute_threads),
      cmocka_unit_test(test_state_machine),
      cmocka_unit_test(test_io_error_surfaces),
      cmocka_unit_test(test_checksum_flip),
      cmocka_unit_test(test_checksum_fetch),
      cmocka_unit_test(test_enospc_write),
      cmocka_unit_test(test_short_transfers),
      cmocka_unit_test(test_checksum_identical),
      cmocka_unit_test(test_memory_budget),
      cmocka_unit_test(test_prefetch_room),
      cmocka_unit_test(test_frontier_fit),
      cmocka_unit_test(test_room_pays),
      cmocka_unit_test(test_room_declined_slow_device),
      cmocka_unit_test(test_window_changes),
      cmocka_unit_test(test_registered_buffers),
      cmocka_unit_test(test_second_offsets),
      cmocka_unit_test(test_auto_window_grows),
      cmocka_unit_test(test_resnet18),
      cmocka_unit_test(test_mobilenetv2),
      cmocka_unit_test(test_segments_nets),
      cmocka_unit_test(test_channel_groups),
      cmocka_unit_test(test_recompute_budget),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
