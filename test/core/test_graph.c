/*
 * test_graph.c - graph building from INI files: the shipped models build
 * with the expected structure, nntrainer's dialect quirks load, and a table
 * of malformed layer graphs fails with messages naming file, section, key.
 */
#include "config.h"
#include "graph.h"
#include "model.h"
#include "registry.h"

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>

#include "tmpdir.h"

static char dir[256];

static const char model_hdr[] = "[Model]\nType = NeuralNetwork\n"
                                "Loss = cross\nbatch_size = 2\n";

/* Write text to dir/name; returns the path (static buffer). */
static const char *write_ini(const char *name, const char *text) {
  static char path[320];
  snprintf(path, sizeof path, "%s/%s", dir, name);
  FILE *f = fopen(path, "w");
  assert_non_null(f);
  fputs(text, f);
  fclose(f);
  return path;
}

static int build(const char *path, nto_graph *g, nto_err *err) {
  nto_config c;
  int rc = nto_config_load(&c, path, err);
  if (rc == 0)
    rc = nto_graph_build(g, &c, c.model.batch_size, err);
  nto_config_free(&c);
  return rc;
}

static int setup(void **s) {
  (void)s;
  return tmpdir_make(dir, sizeof dir, "graph");
}

static int teardown(void **s) {
  (void)s;
  return tmpdir_remove(dir);
}

static void test_resnet18_structure(void **s) {
  (void)s;
  nto_config c;
  nto_err err = {0};
  nto_model *m = NULL;
  assert_int_equal(nto_config_load(&c, "res/resnet18.ini", &err), 0);
  nto_model_opts o = {.batch = 2, .plan_only = 1};
  if (nto_model_create(&m, &c, &o, &err) != 0)
    fail_msg("%s", err.msg);
  const nto_graph *g = nto_model_graph(m);
  /* 12,557,322 trainable parameters: counted by hand and by PyTorch
   * (tools/make_goldens.py --count). */
  assert_int_equal(nto_model_param_count(m), 12557322);
  const nto_layer *last = &g->layers[g->n_layers - 1];
  assert_int_equal(last->out_kind, NTO_OUT_SOFTMAX);
  assert_int_equal(last->out_shape.c * last->out_shape.h * last->out_shape.w,
                   10);
  /* BN layers with `Activation = relu` get a realized activation layer. */
  int acts = 0, fanout = 0;
  for (int i = 0; i < g->n_layers; i++) {
    acts += strstr(g->layers[i].name, "/activation") != NULL;
    fanout += g->n_consumers[i] > 1;
  }
  /* stem + 8 blocks' inner BN + 7 post-addition BN (the last add has none) */
  assert_int_equal(acts, 16);
  /* nine legacy `Type = output` layers, each read by two layers */
  assert_int_equal(fanout, 9);
  nto_model_free(m);
  nto_config_free(&c);
}

static void test_mobilenetv2_params(void **s) {
  (void)s;
  nto_config c;
  nto_err err = {0};
  nto_model *m = NULL;
  assert_int_equal(nto_config_load(&c, "res/mobilenetv2.ini", &err), 0);
  nto_model_opts o = {.batch = 1, .plan_only = 1};
  if (nto_model_create(&m, &c, &o, &err) != 0)
    fail_msg("%s", err.msg);
  /* torchvision.models.mobilenet_v2(): 3,504,872 parameters. */
  assert_int_equal(nto_model_param_count(m), 3504872);
  nto_model_free(m);
  nto_config_free(&c);
}

/* Layer names of g in nntrainer's order (graph.h), space-separated. */
static void nntrainer_order(const char *ini, char *buf, size_t len) {
  nto_config c;
  nto_err err = {0};
  nto_model *m = NULL;
  assert_int_equal(nto_config_load(&c, ini, &err), 0);
  nto_model_opts o = {.batch = 1, .plan_only = 1};
  if (nto_model_create(&m, &c, &o, &err) != 0)
    fail_msg("%s", err.msg);
  const nto_graph *g = nto_model_graph(m);
  int *order = malloc((size_t)g->n_layers * sizeof *order);
  assert_int_equal(nto_graph_nntrainer_order(g, order, &err), 0);
  size_t at = 0;
  buf[0] = '\0';
  for (int i = 0; i < g->n_layers; i++)
    at += (size_t)snprintf(buf + at, len - at, "%s%s", i ? " " : "",
                           g->layers[order[i]].name);
  assert_true(at < len);
  free(order);
  nto_model_free(m);
  nto_config_free(&c);
}

/* nntrainer's topological order, which its .bin files follow: a
 * depth-first search over consumers in file order, in reverse post-order.
 * tiny_resnet by hand: out0's consumers res_conv1 and add; the search goes
 * through res_conv1 to the end of the net first, so the branch of the
 * later consumer (add: nothing new) comes before it; fork's consumers maxp
 * and avgp come out in reverse (avgp first). ResNet-18: each downsampling
 * block's shortcut convolution (B<k>_original_reshaped, after the main
 * branch in the file) comes right after the fan-out, before the main
 * branch. */
static void test_nntrainer_order(void **s) {
  (void)s;
  static char buf[8192];
  nntrainer_order("test/data/nets/tiny_resnet.ini", buf, sizeof buf);
  assert_string_equal(
      buf, "input conv0 bn0 bn0/activation out0 res_conv1 res_bn1 "
           "res_bn1/activation res_conv2 add bn_add bn_add/activation fork "
           "avgp maxp cat head gap flatten softmax");
  nntrainer_order("res/resnet18.ini", buf, sizeof buf);
  const char *want[] = {"out2 b2_original_reshaped b2_1_conv_a b2_1_bn_a",
                        "out4 b3_original_reshaped b3_1_conv_a b3_1_bn_a",
                        "out6 b4_original_reshaped b4_1_conv_a b4_1_bn_a"};
  for (int k = 0; k < 3; k++)
    if (!strstr(buf, want[k]))
      fail_msg("resnet18: '%s' not in: %s", want[k], buf);
}

/* nntrainer's MNIST application config style: inline comments after
 * values with tabs, learning rate in [LearningRateScheduler], mixed-case
 * keys, Activation on conv and fc layers. */
static void test_nntrainer_mnist_dialect(void **s) {
  (void)s;
  const char *p = write_ini(
      "mnist.ini",
      "# Network Section : Network\n[Model]\nType = NeuralNetwork\t# kind\n"
      "Epochs = 1500\t\t# Epochs\nLoss = cross  \t\t# cross entropy\n"
      "# Save_Path = \"mnist_model.bin\"\nbatch_size = 32\t\t# batch\n\n"
      "[Optimizer]\nType = adam\nbeta1 = 0.9 \t\t# beta 1\n"
      "beta2 = 0.999\t# beta 2\nepsilon = 1e-7\t# epsilon\n\n"
      "[LearningRateScheduler]\ntype=constant\nLearning_rate = 1e-4 \t# lr\n"
      "\n[inputlayer]\nType = input\nInput_Shape = 1:28:28\n\n"
      "[conv2d_c1_layer]\nType = conv2d\ninput_layers = inputlayer\n"
      "kernel_size = 5,5\nbias_initializer=zeros\nActivation=sigmoid\n"
      "weight_initializer = xavier_uniform\nfilters = 6\nstride = 1,1\n"
      "padding = 0,0\n\n[pooling2d_p1]\nType=pooling2d\n"
      "input_layers = conv2d_c1_layer\npool_size = 2,2\nstride =2,2\n"
      "padding = 0,0\npooling = average\n\n[conv2d_c2_layer]\n"
      "Type = conv2d\ninput_layers = pooling2d_p1\nkernel_size = 5,5\n"
      "bias_initializer=zeros\nActivation=sigmoid\n"
      "weight_initializer = xavier_uniform\nfilters = 12\nstride = 1,1\n"
      "padding = 0,0\n\n[pooling2d_p2]\nType=pooling2d\n"
      "input_layers = conv2d_c2_layer\npool_size = 2,2\nstride =2,2\n"
      "padding = 0,0\npooling = average\n\n[flatten]\nType=flatten\n"
      "input_layers = pooling2d_p2\n\n[outputlayer]\nType = fully_connected\n"
      "input_layers=flatten\nUnit = 10\t\t# Output Layer Dimension\n"
      "weight_initializer = xavier_uniform\nbias_initializer = zeros\n"
      "Activation = softmax \t# activation\n");
  nto_graph g;
  nto_err err = {0};
  if (build(p, &g, &err) != 0)
    fail_msg("%s", err.msg);
  /* input, conv+sigmoid, pool, conv+sigmoid, pool, flatten, fc+softmax */
  assert_int_equal(g.n_layers, 10);
  const nto_layer *fc = &g.layers[nto_graph_find(&g, "outputlayer")];
  assert_int_equal(fc->out_shape.w, 10);
  assert_int_equal(fc->in_shape[0].w, 12 * 4 * 4);
  nto_graph_free(&g);
}

typedef struct bad_case {
  const char *name;
  const char *layers; /* appended after the [Model] header */
  int code;
  const char *expect[3]; /* substrings of the message */
} bad_case;

static const bad_case bad[] = {
    {"unknown_type",
     "[in]\ntype=input\ninput_shape=1:4:4\n[x]\ntype=conv3d\n",
     NTO_ECONFIG,
     {"[x]", "'type'", "conv3d"}},
    {"unknown_key",
     "[in]\ntype=input\ninput_shape=1:4:4\n[c]\ntype=conv2d\nfilters=2\n"
     "kernel_size=3\nfliters=3\n",
     NTO_ECONFIG,
     {"[c]", "fliters", "conv2d"}},
    {"bad_value",
     "[in]\ntype=input\ninput_shape=1:4:4\n[c]\ntype=conv2d\nfilters=abc\n"
     "kernel_size=3\n",
     NTO_ECONFIG,
     {"[c]", "'filters'", "abc"}},
    {"unknown_input",
     "[in]\ntype=input\ninput_shape=1:4:4\n[f]\ntype=flatten\n"
     "input_layers=nope\n",
     NTO_ECONFIG,
     {"[f]", "input_layers", "nope"}},
    {"missing_input",
     "[f]\ntype=flatten\n",
     NTO_ECONFIG,
     {"[f]", "input_layers", NULL}},
    {"cycle",
     "[in]\ntype=input\ninput_shape=1:4:4\n[a]\ntype=addition\n"
     "input_layers=in,b\n[b]\ntype=multiout\ninput_layers=a\n[f]\n"
     "type=flatten\ninput_layers=b\n",
     NTO_ECONFIG,
     {"cycle", "input_layers", NULL}},
    {"add_shape_mismatch",
     "[in]\ntype=input\ninput_shape=1:4:4\n[c]\ntype=conv2d\nfilters=2\n"
     "kernel_size=1\n[a]\ntype=addition\ninput_layers=c,in\n",
     NTO_ESHAPE,
     {"[a]", "2:4:4", "1:4:4"}},
    {"kernel_too_large",
     "[in]\ntype=input\ninput_shape=1:4:4\n[c]\ntype=conv2d\nfilters=2\n"
     "kernel_size=5\n",
     NTO_ESHAPE,
     {"[c]", "5", "4"}},
    {"two_outputs",
     "[in]\ntype=input\ninput_shape=1:4:4\n[m]\ntype=multiout\n[a]\n"
     "type=flatten\ninput_layers=m\n[b]\ntype=flatten\ninput_layers=m\n",
     NTO_ECONFIG,
     {"'a'", "'b'", "output"}},
    {"too_many_inputs",
     "[in]\ntype=input\ninput_shape=1:4:4\n[f]\ntype=flatten\n"
     "input_layers=in,in\n",
     NTO_ECONFIG,
     {"[f]", "input_layers", "flatten"}},
    {"input_with_inputs",
     "[in]\ntype=input\ninput_shape=1:4:4\n[in2]\ntype=input\n"
     "input_shape=1:4:4\ninput_layers=in\n",
     NTO_ECONFIG,
     {"[in2]", "input_layers", NULL}},
    {"bad_activation",
     "[in]\ntype=input\ninput_shape=1:4:4\n[f]\ntype=flatten\n"
     "activation=swishy\n",
     NTO_ECONFIG,
     {"[f]", "activation", "swishy"}},
    /* weight regularizers (props.h nto_regularizer) */
    {"regularizer_l1",
     "[in]\ntype=input\ninput_shape=1:4:4\n[c]\ntype=conv2d\nfilters=2\n"
     "kernel_size=3\nweight_regularizer=l1\n",
     NTO_ECONFIG,
     {"[c] key 'weight_regularizer'", "l2norm|none", "got 'l1'"}},
    {"regularizer_negative",
     "[in]\ntype=input\ninput_shape=1:4:4\n[fc]\ntype=fully_connected\n"
     "unit=2\nweight_regularizer=l2norm\nWeight_Regularizer_Constant=-0.1\n",
     NTO_ECONFIG,
     {"[fc] key 'weight_regularizer_constant'", ">= 0", "got '-0.1'"}},
    {"regularizer_old_negative",
     "[in]\ntype=input\ninput_shape=1:4:4\n[c]\ntype=conv2d\nfilters=2\n"
     "kernel_size=3\nweight_decay=l2norm\nweight_decay_lambda=-2\n",
     NTO_ECONFIG,
     {"[c] key 'weight_decay_lambda'", ">= 0", "got '-2'"}},
    {"regularizer_decay_number",
     "[in]\ntype=input\ninput_shape=1:4:4\n[fc]\ntype=fully_connected\n"
     "unit=2\nweight_decay=0.001\n",
     NTO_ECONFIG,
     {"[fc] key 'weight_decay'", "weight_decay = 0.001", "only 0"}},
    {"bn_decay_number",
     "[in]\ntype=input\ninput_shape=1:4:4\n[bn]\n"
     "type=batch_normalization\nbias_decay=0.1\n",
     NTO_ECONFIG,
     {"[bn] key 'bias_decay'", "bias_decay = 0.1", "not supported"}},
    /* nntrainer's layer types this trainer lacks, and plugins */
    {"nntrainer_lstm",
     "[in]\ntype=input\ninput_shape=1:4:4\n[l]\ntype=LSTM\nunit=3\n",
     NTO_ECONFIG,
     {"[l] key 'type'", "nntrainer's 'LSTM' layer is not supported",
      "recurrent"}},
    {"plugin_type",
     "[in]\ntype=input\ninput_shape=1:4:4\n[p]\ntype=pow\n",
     NTO_ECONFIG,
     {"[p] key 'type'", "unknown layer type 'pow'", "custom plugin layer"}},
    {"first_format_key",
     "[in]\ntype=input\ninput_shape=1:4:4\nHiddenSize=16\n",
     NTO_ECONFIG,
     {"[in] key 'hiddensize'", "first INI format", "input_shape"}},
    /* output indices name(k), as nntrainer's exported INIs write them */
    {"output_index_single",
     "[in]\ntype=input\ninput_shape=1:4:4\n[f]\ntype=flatten\n"
     "input_layers=in(1)\n",
     NTO_ECONFIG,
     {"[f] key 'input_layers'", "'in(1)'", "has one output"}},
    {"output_index_bad",
     "[in]\ntype=input\ninput_shape=1:4:4\n[f]\ntype=flatten\n"
     "input_layers=in(x)\n",
     NTO_ECONFIG,
     {"[f] key 'input_layers'", "NAME(OUTPUT)", "'in(x)'"}},
    {"flatten_target_shape",
     "[in]\ntype=input\ninput_shape=2:4:4\n[f]\ntype=flatten\n"
     "target_shape=1:1:16\n",
     NTO_ECONFIG,
     {"[f]", "1:1:16 is not the flattened shape 1:1:32", NULL}},
    {"regularizer_both_spellings",
     "[in]\ntype=input\ninput_shape=1:4:4\n[c]\ntype=conv2d\nfilters=2\n"
     "kernel_size=3\nweight_regularizer=l2norm\nweight_decay=l2norm\n",
     NTO_ECONFIG,
     {"[c] key 'weight_decay'", "same setting as 'weight_regularizer'",
      "given twice"}},
    {"regularizer_no_weight",
     "[in]\ntype=input\ninput_shape=1:4:4\n[p]\ntype=pooling2d\n"
     "pooling=max\npool_size=2\nweight_regularizer=l2norm\n",
     NTO_ECONFIG,
     {"[p]", "unknown key 'weight_regularizer'", "pooling2d"}},
};

/* nntrainer's own exported INI (its graph written back, as
 * test_models/models/tf_resnet.ini): output indices "name(k)" (a
 * multiout's outputs), a flatten's target_shape, decays of 0, a loss layer
 * section, [Model] Type = Regression. */
static void test_nntrainer_export(void **s) {
  (void)s;
  const char *p = write_ini(
      "export.ini",
      "[Model]\nType = Regression\nbatch_size = 2\nLoss = cross\n"
      "[input0]\ntype = input\ninput_shape = 1:4:4\n"
      "[conv0]\ntype = conv2d\ninput_layers = input0(0)\nfilters = 2\n"
      "kernel_size = 3,3\npadding = same\nweight_decay = 0.000000\n"
      "bias_decay = 0.000000\n"
      "[bn]\ntype = batch_normalization\ninput_layers = conv0(0)\n"
      "weight_decay = 0\nbias_decay = 0\n"
      "[split_out]\ntype = multiout\ninput_layers = bn(0)\n"
      "[c1]\ntype = conv2d\ninput_layers = split_out(0)\nfilters = 2\n"
      "kernel_size = 1,1\n"
      "[add]\ntype = addition\ninput_layers = c1(0), split_out(1)\n"
      "[flat]\ntype = flatten\ninput_layers = add(0)\n"
      "target_shape = 1:1:1:32\n"
      "[fc]\ntype = fully_connected\ninput_layers = flat(0)\nunit = 3\n"
      "[loss]\ntype = mse\ninput_layers = fc\n");
  nto_config c;
  nto_err err = {0};
  if (nto_config_load(&c, p, &err) != 0)
    fail_msg("%s", err.msg);
  assert_int_equal(c.model.loss, NTO_LOSS_MSE); /* the section wins */
  assert_int_equal(c.n_warnings, 1);            /* Type = Regression */
  assert_non_null(strstr(c.warnings[0], "'Regression' is ignored"));
  nto_config_free(&c);
  nto_graph g;
  if (build(p, &g, &err) != 0)
    fail_msg("%s", err.msg);
  const nto_layer *add = &g.layers[nto_graph_find(&g, "add")];
  assert_int_equal(add->n_in, 2);
  assert_int_equal(g.layers[add->in[1]].ops, &nto_multiout_layer);
  assert_int_equal(g.layers[nto_graph_find(&g, "flat")].out_shape.w, 32);
  assert_int_equal(nto_graph_find(&g, "loss"), -1); /* not a layer */
  nto_graph_free(&g);
}

static void test_bad_graphs(void **s) {
  (void)s;
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
    char text[2048], name[64];
    snprintf(text, sizeof text, "%s%s", model_hdr, bad[i].layers);
    snprintf(name, sizeof name, "%s.ini", bad[i].name);
    const char *p = write_ini(name, text);
    nto_graph g;
    nto_err err = {0};
    int rc = build(p, &g, &err);
    if (rc != bad[i].code)
      fail_msg("%s: code %d, expected %d (%s)", bad[i].name, rc, bad[i].code,
               err.msg);
    if (!strstr(err.msg, name))
      fail_msg("%s: message does not name the file: %s", bad[i].name, err.msg);
    for (int k = 0; k < 3 && bad[i].expect[k]; k++)
      if (!strstr(err.msg, bad[i].expect[k]))
        fail_msg("%s: message lacks '%s': %s", bad[i].name, bad[i].expect[k],
                 err.msg);
  }
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_resnet18_structure),
      cmocka_unit_test(test_mobilenetv2_params),
      cmocka_unit_test(test_nntrainer_mnist_dialect),
      cmocka_unit_test(test_nntrainer_export),
      cmocka_unit_test(test_bad_graphs),
      cmocka_unit_test(test_nntrainer_order),
  };
  return cmocka_run_group_tests(tests, setup, teardown);
}
