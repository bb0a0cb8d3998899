/*
 * test_regularizer.c - weight_regularizer = l2norm (props.h
 * nto_regularizer) through the whole model: the same small net written with
 * no regularizer, with today's keys and with nntrainer's 2020 spelling
 * (Weight_Decay = l2norm, weight_Decay_Lambda = C, mixed case), one frozen
 * convolution among the regularized layers.
 *   - the 2020 spelling loads with one warning per key naming file, section,
 *     key and today's spelling, and trains to the same bits;
 *   - the reported loss, training and evaluation alike, is the data loss
 *     plus 0.5 * C * ||W|| per regularized weight of a trainable layer
 *     (nntrainer's Weight::getRegularizationLoss: the norm, not its
 *     square), computed here from the weights; a frozen layer
 *     (trainable = false, --freeze-until, an inference model) adds none;
 *   - each weight's gradient is the unregularized one plus C * W, bit for
 *     bit (Weight::calcRegularizationGradient), the biases' unchanged;
 *     without weight_regularizer_constant C is 1.
 * PyTorch goldens: test_goldens (l2_net); the same bits at every window and
 * I/O backend, chunked or not: test_offload.
 */
#include "config.h"
#include "model.h"
#include "tmpdir.h"

#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

static char dir[256];

static int setup(void **s) {
  (void)s;
  return tmpdir_make(dir, sizeof dir, "regularizer");
}

static int teardown(void **s) {
  (void)s;
  return tmpdir_remove(dir);
}

/* The net; %s: the regularizer keys of conv1, conv2 (frozen) and fc. */
static const char net_fmt[] =
    "[Model]\nType = NeuralNetwork\nLoss = cross\nbatch_size = 3\n"
    "[Optimizer]\nType = sgd\nLearning_rate = 0.1\nmomentum = 0.9\n"
    "[input]\nType = input\nInput_Shape = 2:5:5\n"
    "[conv1]\nType = conv2d\nfilters = 4\nkernel_size = 3\npadding = same\n"
    "activation = relu\n%s"
    "[conv2]\nType = conv2d\nfilters = 3\nkernel_size = 3\n"
    "trainable = false\nactivation = tanh\n%s"
    "[flatten]\nType = flatten\n"
    "[fc]\nType = fully_connected\nunit = 4\n%s"
    "[softmax]\nType = activation\nactivation = softmax\n";

/* The constants the variants give conv1 and fc (conv2 is frozen). */
#define C_CONV1 0.05f
#define C_FC 0.2f

typedef enum { PLAIN, TODAY, OLD, DEFAULT_C } variant;

/* Write variant v of the net; returns its path (static buffer). */
static const char *write_net(variant v) {
  static const char *const keys[][3] = {
      [PLAIN] = {"", "", ""},
      [TODAY] = {"weight_regularizer = l2norm\n"
                 "weight_regularizer_constant = 0.05\n",
                 "weight_regularizer = l2norm\n"
                 "weight_regularizer_constant = 0.5\n",
                 "weight_regularizer = l2norm\n"
                 "weight_regularizer_constant = 0.2\n"},
      [OLD] = {"Weight_Decay = L2Norm\nweight_Decay_Lambda = 0.05\n",
               "weight_decay = l2norm\nweight_decay_lambda = 0.5\n",
               "WEIGHT_DECAY = l2norm\nWeight_Decay_Lambda = 0.2\n"},
      [DEFAULT_C] = {"", "", "weight_regularizer = l2norm\n"},
  };
  static const char *const names[] = {"plain.ini", "today.ini", "old.ini",
                                      "default.ini"};
  static char path[320];
  snprintf(path, sizeof path, "%s/%s", dir, names[v]);
  FILE *f = fopen(path, "w");
  assert_non_null(f);
  fprintf(f, net_fmt, keys[v][0], keys[v][1], keys[v][2]);
  assert_int_equal(fclose(f), 0);
  return path;
}

/* A model of variant v (seed 5: the same initial weights for all). */
typedef struct run {
  nto_config c;
  nto_model *m;
  float *x, *y;
  int n, k;
  size_t nx;
} run;

static void run_open(run *r, variant v, const nto_model_opts *opts) {
  nto_err err = {0};
  nto_model_opts o = opts ? *opts : (nto_model_opts){0};
  o.seed = 5;
  memset(r, 0, sizeof *r);
  if (nto_config_load(&r->c, write_net(v), &err) != 0)
    fail_msg("%s", err.msg);
  if (nto_model_create(&r->m, &r->c, &o, &err) != 0)
    fail_msg("%s", err.msg);
  r->n = nto_model_batch(r->m);
  r->k = nto_model_output_size(r->m);
  r->nx = (size_t)r->n * nto_shape_sample(nto_model_input_shape(r->m));
  r->x = malloc(r->nx * sizeof(float));
  r->y = calloc((size_t)r->n * r->k, sizeof(float));
}

static void run_close(run *r) {
  nto_model_free(r->m);
  nto_config_free(&r->c);
  free(r->x);
  free(r->y);
}

/* Batch `step`: inputs in [-1, 1), one-hot targets. */
static void make_batch(run *r, int step) {
  uint64_t s = 0x2545f4914f6cdd1dull * (uint64_t)(step + 3);
  for (size_t i = 0; i < r->nx; i++) {
    s = s * 6364136223846793005ull + 1442695040888963407ull;
    r->x[i] = (float)((s >> 40) & 0xffffff) / 8388608.0f - 1.0f;
  }
  memset(r->y, 0, sizeof(float) * (size_t)r->n * r->k);
  for (int i = 0; i < r->n; i++)
    r->y[(size_t)i * r->k + (size_t)((i * 3 + step) % r->k)] = 1.0f;
}

static double train(run *r, int step) {
  nto_err err = {0};
  nto_step_stats st;
  make_batch(r, step);
  if (nto_model_train_step(r->m, r->x, r->y, &st, &err) != 0)
    fail_msg("%s", err.msg);
  return st.loss;
}

static double eval(run *r, int step) {
  nto_err err = {0};
  nto_step_stats st;
  make_batch(r, step);
  if (nto_model_eval_step(r->m, r->x, r->y, r->n, &st, &err) != 0)
    fail_msg("%s", err.msg);
  return st.loss;
}

/* A copy of weight `name` of r's model (n floats into *n). */
static float *weight(run *r, const char *name, size_t *n) {
  nto_named_tensor *ts;
  int nt;
  nto_err err = {0};
  assert_int_equal(nto_model_weights(r->m, &ts, &nt, &err), 0);
  float *out = NULL;
  for (int i = 0; i < nt; i++) {
    if (strcmp(ts[i].name, name) != 0)
      continue;
    *n = nto_named_numel(&ts[i]);
    out = malloc(*n * sizeof(float));
    assert_non_null(ts[i].data); /* resident: no offloading here */
    memcpy(out, ts[i].data, *n * sizeof(float));
  }
  nto_model_weights_free(ts, nt);
  if (!out)
    fail_msg("no weight %s", name);
  return out;
}

/* 0.5 * c * ||w|| of r's weight `name`, in double. */
static double reg_term(run *r, const char *name, float c) {
  size_t n;
  float *w = weight(r, name, &n);
  double ss = 0.0;
  for (size_t i = 0; i < n; i++)
    ss += (double)w[i] * w[i];
  free(w);
  return 0.5 * (double)c * sqrt(ss);
}

/* All weights of a and b are the same bits. */
static void same_weights(run *a, run *b) {
  nto_named_tensor *ta, *tb;
  int na, nb;
  nto_err err = {0};
  assert_int_equal(nto_model_weights(a->m, &ta, &na, &err), 0);
  assert_int_equal(nto_model_weights(b->m, &tb, &nb, &err), 0);
  assert_int_equal(na, nb);
  for (int i = 0; i < na; i++) {
    assert_string_equal(ta[i].name, tb[i].name);
    if (memcmp(ta[i].data, tb[i].data,
               nto_named_numel(&ta[i]) * sizeof(float)) != 0)
      fail_msg("%s differs", ta[i].name);
  }
  nto_model_weights_free(ta, na);
  nto_model_weights_free(tb, nb);
}

/* The weights of `from` into `to` (the same net, resident). */
static void copy_weights(run *from, run *to) {
  nto_named_tensor *tf, *tt;
  int nf, nt;
  nto_err err = {0};
  assert_int_equal(nto_model_weights(from->m, &tf, &nf, &err), 0);
  assert_int_equal(nto_model_weights(to->m, &tt, &nt, &err), 0);
  assert_int_equal(nf, nt);
  for (int i = 0; i < nf; i++)
    memcpy(tt[i].data, tf[i].data, nto_named_numel(&tf[i]) * sizeof(float));
  nto_model_weights_free(tf, nf);
  nto_model_weights_free(tt, nt);
}

/* |got - want| within double rounding of the loss's size. */
static void expect_loss(const char *what, double got, double want) {
  if (fabs(got - want) > 1e-12 * (1.0 + fabs(want)))
    fail_msg("%s: loss %.17g, expected %.17g (off by %.3g)", what, got, want,
             got - want);
}

/* c's warning i contains each of the NULL-terminated pieces. */
static void assert_warning(const nto_config *c, int i, ...) {
  if (i >= c->n_warnings)
    fail_msg("warning %d of %d missing", i, c->n_warnings);
  va_list ap;
  va_start(ap, i);
  for (const char *p; (p = va_arg(ap, const char *));)
    if (!strstr(c->warnings[i], p))
      fail_msg("warning %d '%s' lacks '%s'", i, c->warnings[i], p);
  va_end(ap);
  if (strchr(c->warnings[i], '\n'))
    fail_msg("warning %d is not one line: '%s'", i, c->warnings[i]);
}

/* nntrainer's 2020 spelling, keys in mixed case: one warning per key in
 * file order, naming the file, the section, the key and today's spelling;
 * then training gives the bits of today's spelling, and not those of the
 * net without regularizer. */
static void test_old_spelling(void **s) {
  (void)s;
  run old, today, plain;
  run_open(&old, OLD, NULL);
  run_open(&today, TODAY, NULL);
  run_open(&plain, PLAIN, NULL);
  assert_int_equal(today.c.n_warnings, 0);
  assert_int_equal(old.c.n_warnings, 6);
  assert_warning(&old.c, 0, "old.ini: [conv1] key 'weight_decay'",
                 "read as weight_regularizer", NULL);
  assert_warning(&old.c, 1, "old.ini: [conv1] key 'weight_decay_lambda'",
                 "read as weight_regularizer_constant", NULL);
  assert_warning(&old.c, 2, "[conv2] key 'weight_decay'", NULL);
  assert_warning(&old.c, 5, "[fc] key 'weight_decay_lambda'",
                 "weight_regularizer_constant", NULL);
  for (int step = 0; step < 3; step++) {
    double lo = train(&old, step), lt = train(&today, step);
    double lp = train(&plain, step);
    if (memcmp(&lo, &lt, sizeof lo) != 0)
      fail_msg("step %d: loss %.17g vs %.17g", step, lo, lt);
    assert_true(lt != lp);
  }
  same_weights(&old, &today);
  run_close(&old);
  run_close(&today);
  run_close(&plain);
}

/* The reported loss: the data loss (the net without regularizer, from the
 * same weights) plus 0.5 * C * ||W|| of conv1 and fc, not of the frozen
 * conv2; in training (the weights before the step's update) and in
 * evaluation (before and after 3 steps). With conv1 frozen too
 * (--freeze-until), fc's term alone; an inference model (every layer frozen, as
 * nntrainer's inference has no gradients) reports the data loss. */
static void test_loss_term(void **s) {
  (void)s;
  run reg, plain;
  run_open(&reg, TODAY, NULL);
  run_open(&plain, PLAIN, NULL);
  double term = reg_term(&reg, "conv1.weight", C_CONV1) +
                reg_term(&reg, "fc.weight", C_FC);
  double frozen = reg_term(&reg, "conv2.weight", 0.5f);
  assert_true(term > 0.05 && frozen > 0.05); /* well above rounding */
  expect_loss("eval before training", eval(&reg, 7), eval(&plain, 7) + term);
  /* training: each step from the same weights (the plain net is given the
   * regularized one's before each step: the updates differ) */
  for (int step = 0; step < 3; step++) {
    copy_weights(&reg, &plain);
    term = reg_term(&reg, "conv1.weight", C_CONV1) +
           reg_term(&reg, "fc.weight", C_FC);
    double lr = train(&reg, step);
    expect_loss("training", lr, train(&plain, step) + term);
  }
  copy_weights(&reg, &plain);
  term = reg_term(&reg, "conv1.weight", C_CONV1) +
         reg_term(&reg, "fc.weight", C_FC);
  expect_loss("eval after training", eval(&reg, 9), eval(&plain, 9) + term);
  run_close(&reg);
  run_close(&plain);

  nto_model_opts fz = {.freeze_until = "conv1"};
  run_open(&reg, TODAY, &fz);
  run_open(&plain, PLAIN, &fz);
  term = reg_term(&reg, "fc.weight", C_FC);
  expect_loss("conv1 frozen, eval", eval(&reg, 4), eval(&plain, 4) + term);
  expect_loss("conv1 frozen, training", train(&reg, 4),
              train(&plain, 4) + term);
  run_close(&reg);
  run_close(&plain);

  nto_model_opts inf = {.inference = 1};
  run_open(&reg, TODAY, &inf);
  run_open(&plain, PLAIN, &inf);
  double li = eval(&reg, 2), lp = eval(&plain, 2);
  assert_memory_equal(&li, &lp, sizeof li);
  run_close(&reg);
  run_close(&plain);
}

/* Gradients captured by the hook, per weight name. */
typedef struct grads {
  char name[8][2 * NTO_NAME_MAX];
  float *g[8];
  size_t n[8];
  int count;
} grads;

static void hook(void *user, const nto_layer *l, int j, const float *grad,
                 size_t n) {
  grads *g = user;
  assert_true(g->count < 8);
  snprintf(g->name[g->count], sizeof g->name[0], "%s.%s", l->name,
           l->w[j].name);
  g->g[g->count] = malloc(n * sizeof(float));
  memcpy(g->g[g->count], grad, n * sizeof(float));
  g->n[g->count++] = n;
}

static const float *grad_of(const grads *g, const char *name, size_t *n) {
  for (int i = 0; i < g->count; i++)
    if (!strcmp(g->name[i], name)) {
      *n = g->n[i];
      return g->g[i];
    }
  fail_msg("no gradient for %s", name);
  return NULL;
}

static void grads_free(grads *g) {
  for (int i = 0; i < g->count; i++)
    free(g->g[i]);
}

/* The first step's gradients of variant v against the plain net's, from
 * the same weights and batch: conv1's and fc's weights get + C * W (in
 * float, bit for bit), the biases nothing; the frozen conv2 none at all. */
static void check_gradients(variant v, float c_conv1, float c_fc) {
  run reg, plain;
  grads gr = {0}, gp = {0};
  run_open(&reg, v, NULL);
  run_open(&plain, PLAIN, NULL);
  nto_model_set_grad_hook(reg.m, hook, &gr);
  nto_model_set_grad_hook(plain.m, hook, &gp);
  size_t n;
  float *w1 = weight(&reg, "conv1.weight", &n);
  float *wf = weight(&reg, "fc.weight", &n);
  train(&reg, 0);
  train(&plain, 0);
  assert_int_equal(gr.count, 4); /* conv1, fc: weight and bias */
  assert_int_equal(gp.count, 4);
  const char *names[] = {"conv1.weight", "conv1.bias", "fc.weight", "fc.bias"};
  const float cs[] = {c_conv1, 0.0f, c_fc, 0.0f};
  const float *ws[] = {w1, NULL, wf, NULL};
  for (int q = 0; q < 4; q++) {
    size_t nr, np;
    const float *a = grad_of(&gr, names[q], &nr);
    const float *b = grad_of(&gp, names[q], &np);
    assert_int_equal(nr, np);
    int differs = 0;
    for (size_t i = 0; i < nr; i++) {
      float want = ws[q] ? b[i] + cs[q] * ws[q][i] : b[i];
      if (memcmp(&a[i], &want, sizeof want) != 0)
        fail_msg("%s[%zu]: %.9g, expected %.9g", names[q], i, a[i], want);
      differs |= a[i] != b[i];
    }
    assert_int_equal(differs, cs[q] > 0.0f);
  }
  free(w1);
  free(wf);
  grads_free(&gr);
  grads_free(&gp);
  run_close(&reg);
  run_close(&plain);
}

static void test_gradient_term(void **s) {
  (void)s;
  check_gradients(TODAY, C_CONV1, C_FC);
  check_gradients(OLD, C_CONV1, C_FC);
  check_gradients(DEFAULT_C, 0.0f, 1.0f); /* nntrainer's default constant */
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_old_spelling),
      cmocka_unit_test(test_loss_term),
      cmocka_unit_test(test_gradient_term),
  };
  return cmocka_run_group_tests(tests, setup, teardown);
}
