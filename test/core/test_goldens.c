/*
 * test_goldens.c - the trainer against PyTorch goldens.
 *
 * For each small net in test/data/nets/ (goldens made by
 * tools/make_goldens.py, format in test/data/goldens/README.md): load the
 * PyTorch initial weights, run one training step and compare the forward
 * output, the loss, every parameter gradient and the input gradient; run 3
 * SGD-momentum steps and, from the initial weights again, 3 Adam steps, and
 * compare every weight (running statistics included). frozen_backbone
 * (layers with trainable = false) runs twice: with the input's gradient
 * asked for (the backward pass through the frozen layers, checked against
 * torch's) and without (the backward pass stops at the first trainable
 * layer): the same weights after 3 steps either way. l2_net has weight
 * regularizers (l2norm, two constants, one on a frozen layer): its golden
 * loss includes 0.5 * C * ||W|| and its gradients C * W, as nntrainer's.
 *
 * Criterion per tensor: max-norm relative error
 *     max_i |ours_i - torch_i| <= 1e-4 * max_i |torch_i| + 1e-6
 * Elementwise relative error is meaningless for entries that are ~0 while
 * the tensor is not; the 1e-6 absolute floor covers tensors that are zero
 * in exact arithmetic and float rounding noise (~1e-7) in both
 * implementations, e.g. the bias gradient of a convolution followed by
 * batch normalization.
 */
#include "config.h"
#include "model.h"
#include "weights.h"

#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#define TOL 1e-4

/* Hyperparameters written by tools/make_goldens.py (file metadata). */
static const nto_opt_conf sgd = {
    .kind = NTO_OPT_SGD, .learning_rate = 0.05, .momentum = 0.9};
static const nto_opt_conf adam = {.kind = NTO_OPT_ADAM,
                                  .learning_rate = 0.01,
                                  .beta1 = 0.9,
                                  .beta2 = 0.999,
                                  .epsilon = 1e-7};

typedef struct golden_run {
  nto_config c;
  nto_model *m;
  nto_named_tensor *w;
  int nw;
  const char *file;
  float **grads; /* captured by the hook, per weight index in w[] */
} golden_run;

#define ATOL 1e-6

/* max|a-b| / (max|b| + ATOL/TOL): <= TOL iff the criterion above holds. */
static double rel_err(const float *a, const float *b, size_t n) {
  double num = 0, den = 0;
  for (size_t i = 0; i < n; i++) {
    num = fmax(num, fabs((double)a[i] - b[i]));
    den = fmax(den, fabs((double)b[i]));
  }
  return num / (den + ATOL / TOL);
}

/* Load one tensor of the golden file into a new buffer of n floats. */
static float *load(const char *file, const char *name, int ndim,
                   const int *dims) {
  size_t n = 1;
  for (int k = 0; k < ndim; k++)
    n *= (size_t)dims[k];
  float *buf = calloc(n, sizeof *buf);
  nto_named_tensor t = {.name = name, .ndim = ndim, .data = buf};
  memcpy(t.dims, dims, sizeof(int) * (size_t)ndim);
  nto_err err = {0};
  int rc = nto_safetensors_load(file, &t, 1, &err);
  if (rc != 0)
    fail_msg("%s: %s", name, err.msg);
  return buf;
}

/* Compare the golden tensor <prefix><name> with data. */
static void expect(const golden_run *g, const char *prefix,
                   const nto_named_tensor *t, const float *data) {
  char name[256];
  snprintf(name, sizeof name, "%s%s", prefix, t->name);
  float *ref = load(g->file, name, t->ndim, t->dims);
  double e = rel_err(data, ref, nto_named_numel(t));
  free(ref);
  if (e > TOL)
    fail_msg("%s: %s relative error %.3g > %g", g->file, name, e, TOL);
}

/* Set every model weight to the golden "init/" values. */
static void load_init(golden_run *g) {
  for (int i = 0; i < g->nw; i++) {
    char name[256];
    snprintf(name, sizeof name, "init/%s", g->w[i].name);
    float *v = load(g->file, name, g->w[i].ndim, g->w[i].dims);
    memcpy(g->w[i].data, v, nto_named_numel(&g->w[i]) * sizeof(float));
    free(v);
  }
}

static void hook(void *user, const nto_layer *l, int j, const float *grad,
                 size_t n) {
  golden_run *g = user;
  char name[256];
  snprintf(name, sizeof name, "%s.%s", l->name, l->w[j].name);
  for (int i = 0; i < g->nw; i++)
    if (!strcmp(g->w[i].name, name) && !g->grads[i]) {
      g->grads[i] = malloc(n * sizeof(float));
      memcpy(g->grads[i], grad, n * sizeof(float));
    }
}

/* Channel groups (model.h group_bytes) of the next runs: 0 none. */
static size_t group_bytes;

/* input_grad: ask for dL/d(input) and compare it (else the backward pass
 * may stop at the first trainable layer). */
static void run_net_with(const char *net, int input_grad) {
  golden_run g = {0};
  char ini[256], file[256];
  snprintf(ini, sizeof ini, "test/data/nets/%s.ini", net);
  snprintf(file, sizeof file, "test/data/goldens/%s.safetensors", net);
  g.file = file;
  nto_err err = {0};
  if (nto_config_load(&g.c, ini, &err) != 0)
    fail_msg("%s", err.msg);
  nto_model_opts o = {.batch = 4,
                      .seed = 1,
                      .compute_input_grad = input_grad,
                      .group_bytes = group_bytes};
  if (nto_model_create(&g.m, &g.c, &o, &err) != 0)
    fail_msg("%s", err.msg);
  if (group_bytes && nto_model_chains(g.m, NULL) == 0)
    fail_msg("%s: no chain of channel groups at %zu bytes", net, group_bytes);
  assert_int_equal(nto_model_weights(g.m, &g.w, &g.nw, &err), 0);
  g.grads = calloc((size_t)g.nw, sizeof *g.grads);

  nto_shape in = nto_model_input_shape(g.m);
  int n = nto_model_batch(g.m), k = nto_model_output_size(g.m);
  int xd[4] = {n, in.c, in.h, in.w}, yd[2] = {n, k}, one[1] = {1};
  float *x = load(file, "input", 4, xd);
  float *y = load(file, "label", 2, yd);
  float *out = load(file, "output", 2, yd);
  float *loss = load(file, "loss", 1, one);
  float *gin = load(file, "grad_input", 4, xd);

  /* Step 1 of SGD: output, loss, gradients come from this forward. */
  load_init(&g);
  nto_lr_conf constant = {0};
  assert_int_equal(nto_model_set_optimizer(g.m, &sgd, &constant, &err), 0);
  nto_model_set_grad_hook(g.m, hook, &g);
  nto_step_stats st;
  assert_int_equal(nto_model_train_step(g.m, x, y, &st, &err), 0);
  double le = fabs(st.loss - loss[0]) / (fabs(loss[0]) + ATOL / TOL);
  if (le > TOL)
    fail_msg("%s: loss %.8g vs torch %.8g", net, st.loss, loss[0]);
  double oe = rel_err(nto_model_output(g.m), out, (size_t)n * k);
  if (oe > TOL)
    fail_msg("%s: output relative error %.3g", net, oe);
  if (input_grad) {
    double ie = rel_err(nto_model_input_grad(g.m), gin,
                        (size_t)n * nto_shape_sample(in));
    if (ie > TOL)
      fail_msg("%s: input gradient relative error %.3g", net, ie);
  } else {
    assert_null(nto_model_input_grad(g.m));
  }
  int checked = 0;
  for (int i = 0; i < g.nw; i++) {
    if (!g.grads[i])
      continue; /* running statistics have no gradient */
    expect(&g, "grad/", &g.w[i], g.grads[i]);
    checked++;
  }
  assert_true(checked > 0);
  nto_model_set_grad_hook(g.m, NULL, NULL);
  for (int s = 1; s < 3; s++)
    assert_int_equal(nto_model_train_step(g.m, x, y, &st, &err), 0);
  for (int i = 0; i < g.nw; i++)
    expect(&g, "sgd/", &g.w[i], g.w[i].data);

  load_init(&g);
  assert_int_equal(nto_model_set_optimizer(g.m, &adam, &constant, &err), 0);
  for (int s = 0; s < 3; s++)
    assert_int_equal(nto_model_train_step(g.m, x, y, &st, &err), 0);
  for (int i = 0; i < g.nw; i++)
    expect(&g, "adam/", &g.w[i], g.w[i].data);

  for (int i = 0; i < g.nw; i++)
    free(g.grads[i]);
  free(g.grads);
  free(x);
  free(y);
  free(out);
  free(loss);
  free(gin);
  nto_model_weights_free(g.w, g.nw);
  nto_model_free(g.m);
  nto_config_free(&g.c);
}

static void run_net(const char *net) { run_net_with(net, 1); }

static void test_mlp(void **s) {
  (void)s;
  run_net("mlp");
}
static void test_lenet(void **s) {
  (void)s;
  run_net("lenet");
}
static void test_tiny_resnet(void **s) {
  (void)s;
  run_net("tiny_resnet");
}
static void test_mobile_block(void **s) {
  (void)s;
  run_net("mobile_block");
}
static void test_mse_net(void **s) {
  (void)s;
  run_net("mse_net");
}
static void test_frozen_backbone(void **s) {
  (void)s;
  run_net_with("frozen_backbone", 1);
  run_net_with("frozen_backbone", 0);
}
/* frozen batch normalization on batch statistics (frozen_bn_statistics =
 * batch): the frozen layers' running statistics move, gamma and beta
 * stay, gradients flow through the batch statistics */
static void test_frozen_batch_stats(void **s) {
  (void)s;
  run_net_with("frozen_batch_stats", 1);
  run_net_with("frozen_batch_stats", 0);
}

/* weight_regularizer = l2norm: the terms of the loss and of the
 * gradients (and so of every SGD and Adam step) against torch's */
static void test_l2_net(void **s) {
  (void)s;
  run_net("l2_net");
}

/* Channel groups (tensors.h) in every net with a convolution followed by
 * batch normalization: the same criteria against PyTorch, with outputs
 * split into groups of at most 1 KiB (2 to 16 groups at batch 4). */
static void test_channel_groups(void **s) {
  (void)s;
  group_bytes = 1024;
  run_net("lenet");
  run_net("tiny_resnet");
  run_net("mobile_block");
  run_net_with("frozen_backbone", 1);
  run_net_with("frozen_batch_stats", 0);
  group_bytes = 0;
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_mlp),
      cmocka_unit_test(test_lenet),
      cmocka_unit_test(test_tiny_resnet),
      cmocka_unit_test(test_mobile_block),
      cmocka_unit_test(test_mse_net),
      cmocka_unit_test(test_frozen_backbone),
      cmocka_unit_test(test_frozen_batch_stats),
      cmocka_unit_test(test_l2_net),
      cmocka_unit_test(test_channel_groups),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
