/*
 * test_config.c - INI model configuration loader (config.h).
 *
 * Every config is written from a string into a fresh temporary directory,
 * loaded, and checked field by field; malformed files are checked for the
 * status code and for the file, section and key named in the message.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include "tmpdir.h"

#include "config.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

/* ---------------------------------------------------------------------- */
/* Temporary files                                                         */

static char tmpdir[256];

static int setup_dir(void **state) {
  (void)state;
  return tmpdir_make(tmpdir, sizeof tmpdir, "config");
}

static int teardown_dir(void **state) {
  (void)state;
  return tmpdir_remove(tmpdir);
}

/* Absolute path of name inside the temporary directory. */
static const char *tmp_path(const char *name) {
  static char p[512];
  snprintf(p, sizeof p, "%s/%s", tmpdir, name);
  return p;
}

static const char *write_file(const char *name, const char *text) {
  const char *p = tmp_path(name);
  FILE *f = fopen(p, "w");
  assert_non_null(f);
  assert_int_equal(fputs(text, f) >= 0, 1);
  assert_int_equal(fclose(f), 0);
  return p;
}

/* Writes and loads text; fails the test with the message if it errors. */
static void load_ok(const char *name, const char *text, nto_config *c) {
  nto_err err = {0};
  int rc = nto_config_load(c, write_file(name, text), &err);
  if (rc != 0)
    fail_msg("%s: rc %d: %s", name, rc, err.msg);
}

static const nto_section *layer(const nto_config *c, const char *name) {
  for (int i = 0; i < c->n_layers; i++)
    if (strcmp(c->layers[i].name, name) == 0)
      return &c->layers[i];
  fail_msg("no layer [%s]", name);
  return NULL;
}

#define assert_near(a, b)                                                      \
  assert_true(fabs((double)(a) - (double)(b)) <=                               \
              1e-12 * (1 + fabs((double)(b))))

/* ---------------------------------------------------------------------- */
/* Valid configs                                                           */

static void test_model_every_key(void **state) {
  (void)state;
  nto_config c;
  load_ok("all_keys.ini",
          "[Model]\n"
          "type = NeuralNetwork\n"
          "epochs = 7\n"
          "loss = mse\n"
          "batch_size = 32\n"
          "save_path = out/w.bin\n"
          "memory_swap = true\n"
          "memory_swap_lookahead = 3\n"
          "memory_swap_path = /var/tmp/swap\n"
          "memory_budget = 64MiB\n"
          "[in]\n"
          "type = input\n"
          "input_shape = 1:28:28\n",
          &c);
  assert_int_equal(c.model.epochs, 7);
  assert_int_equal(c.model.loss, NTO_LOSS_MSE);
  assert_int_equal(c.model.batch_size, 32);
  assert_string_equal(c.model.save_path, tmp_path("out/w.bin"));
  assert_int_equal(c.model.memory_swap, 1);
  assert_string_equal(c.model.swap_lookahead, "3");
  assert_string_equal(c.model.swap_path, "/var/tmp/swap");
  assert_string_equal(c.model.memory_budget, "64MiB");
  assert_string_equal(c.path, tmp_path("all_keys.ini"));
  assert_int_equal(c.n_layers, 1);
  assert_string_equal(c.layers[0].name, "in");
  assert_int_equal(c.layers[0].n_kv, 2);
  assert_string_equal(c.layers[0].kv[0].key, "type");
  assert_string_equal(c.layers[0].kv[1].value, "1:28:28");
  nto_config_free(&c);
  assert_null(c.layers);
  nto_config_free(&c); /* twice is harmless */
}

static void test_fsu_aliases(void **state) {
  (void)state;
  nto_config c;
  load_ok("fsu.ini",
          "[Model]\n"
          "fsu = yes\n"
          "fsu_lookahead = AUTO\n"
          "fsu_path = swapdir\n"
          "loss = cross_softmax\n",
          &c);
  assert_int_equal(c.model.memory_swap, 1);
  assert_string_equal(c.model.swap_lookahead, "auto");
  assert_string_equal(c.model.swap_path, tmp_path("swapdir"));
  assert_int_equal(c.model.loss, NTO_LOSS_CROSS);
  nto_config_free(&c);
}

/* nntrainer's Applications/MNIST ini, with tabs, quotes, comments, case. */
static const char mnist_ini[] =
    "# Network Section : Network\n"
    "[Model]\n"
    "Type = NeuralNetwork\t# Network Type : Regression, KNN, NeuralNetwork\n"
    "Epochs = 1500\t\t# Epochs\n"
    "Loss = cross    \t\t# Loss function : mse (mean squared error)\n"
    "                        # cross ( cross entropy )\n"
    "Save_Path = \"mnist_model.bin\"  \t# model path to save / read\n"
    "batch_size = 32\t\t; batch size\n"
    "\n"
    "[Optimizer]\n"
    "Type = adam\n"
    "Learning_rate = 1e-4 \t# Learning Rate\n"
    "Decay_rate = 0.96\n"
    "Decay_steps = 1000\n"
    "beta1 = 0.9 \t\t# beta 1 for adam\n"
    "beta2 = 0.999\t# beta 2 for adam\n"
    "epsilon = 1e-7\t# epsilon for adam\n"
    "\n"
    "# Layer Section : Name\n"
    "[InputLayer]\n"
    "Type = input\n"
    "Input_Shape = 1:28:28\n"
    "\n"
    "[Conv2D_C1_Layer]\n"
    "Type = conv2d\n"
    "input_layers = inputlayer\n"
    "kernel_size = 5,5\n"
    "bias_initializer=zeros\n"
    "Activation=sigmoid\n"
    "weight_initializer = xavier_uniform\n"
    "filters = 6\n"
    "stride = 1,1\n"
    "padding = 0,0\n"
    "\n"
    "[pooling2d_p1]\n"
    "Type=pooling2d\n"
    "input_layers = conv2d_c1_layer\n"
    "pool_size = 2,2\n"
    "stride =2,2\n"
    "padding = 0,0\n"
    "pooling = 'average'\n"
    "\n"
    "[flatten]\n"
    "Type=flatten\n"
    "\n"
    "[outputlayer]\n"
    "Type = fully_connected\n"
    "input_layers=flatten\n"
    "Unit = 10\t\t# Output Layer Dimension ( = Weight Width )\n"
    "weight_initializer = xavier_uniform\n"
    "bias_initializer = zeros\n"
    "Activation = \"softmax\" \t# activation : sigmoid, softmax\n";

static void test_mnist_like(void **state) {
  (void)state;
  nto_config c;
  load_ok("mnist.ini", mnist_ini, &c);
  assert_int_equal(c.model.epochs, 1500);
  assert_int_equal(c.model.loss, NTO_LOSS_CROSS);
  assert_int_equal(c.model.batch_size, 32);
  assert_string_equal(c.model.save_path, tmp_path("mnist_model.bin"));
  assert_int_equal(c.opt.kind, NTO_OPT_ADAM);
  assert_near(c.opt.learning_rate, 1e-4);
  assert_int_equal(c.opt.lr_given, 1);
  assert_near(c.opt.beta1, 0.9);
  assert_near(c.opt.beta2, 0.999);
  assert_near(c.opt.epsilon, 1e-7);
  /* Legacy decay in [Optimizer] becomes an exponential schedule. */
  assert_int_equal(c.lr.given, 1);
  assert_int_equal(c.lr.kind, NTO_LR_EXPONENTIAL);
  assert_near(c.lr.learning_rate[0], 1e-4);
  assert_near(c.lr.decay_rate, 0.96);
  assert_int_equal(c.lr.decay_steps, 1000);

  static const char *const order[] = {"inputlayer", "conv2d_c1_layer",
                                      "pooling2d_p1", "flatten", "outputlayer"};
  assert_int_equal(c.n_layers, 5);
  for (int i = 0; i < 5; i++)
    assert_string_equal(c.layers[i].name, order[i]);
  const nto_section *conv = layer(&c, "conv2d_c1_layer");
  assert_int_equal(conv->n_kv, 9);
  assert_string_equal(conv->kv[0].key, "type");
  assert_string_equal(conv->kv[0].value, "conv2d");
  assert_string_equal(nto_section_get(conv, "kernel_size"), "5,5");
  assert_string_equal(nto_section_get(conv, "activation"), "sigmoid");
  assert_null(nto_section_get(conv, "Activation")); /* keys are lowercase */
  assert_null(nto_section_get(conv, "unit"));
  assert_string_equal(nto_section_get(layer(&c, "inputlayer"), "input_shape"),
                      "1:28:28");
  assert_string_equal(nto_section_get(layer(&c, "pooling2d_p1"), "pooling"),
                      "average");
  const nto_section *out = layer(&c, "outputlayer");
  assert_string_equal(nto_section_get(out, "unit"), "10");
  assert_string_equal(nto_section_get(out, "activation"), "softmax");
  nto_config_free(&c);
}

static void test_resnet_like(void **state) {
  (void)state;
  nto_config c;
  load_ok("resnet.ini",
          "[Model]\n"
          "Type = NeuralNetwork\n"
          "Epochs = 1\n"
          "Loss = cross\n"
          "Save_Path = \"model.bin\"\n"
          "batch_size = 128\n"
          "\n"
          "[Optimizer]\n"
          "Type = sgd\n"
          "Learning_rate = 0.1\n"
          "Momentum = 0.9\n"
          "Weight_Decay = 5e-4\n"
          "\n"
          "[conv0]\n"
          "Type = conv2d\n"
          "input_shape = 3:32:32\n"
          "filters = 64\n"
          "kernel_size = 3,3\n"
          "padding = same\n"
          "\n"
          "[block1_a1]\n"
          "type = conv2d\n"
          "input_layers = conv0\n"
          "filters = 64\n"
          "kernel_size = 3,3\n"
          "\n"
          "[block1_add]\n"
          "type = addition\n"
          "input_layers = block1_a1, conv0\n",
          &c);
  assert_string_equal(c.model.save_path, tmp_path("model.bin"));
  assert_int_equal(c.model.batch_size, 128);
  assert_int_equal(c.opt.kind, NTO_OPT_SGD);
  assert_near(c.opt.learning_rate, 0.1);
  assert_near(c.opt.momentum, 0.9);
  assert_near(c.opt.weight_decay, 5e-4);
  assert_int_equal(c.lr.given, 0);
  assert_int_equal(c.n_layers, 3);
  assert_string_equal(c.layers[2].name, "block1_add");
  assert_string_equal(nto_section_get(&c.layers[2], "input_layers"),
                      "block1_a1, conv0");
  nto_config_free(&c);
}

static void test_defaults(void **state) {
  (void)state;
  nto_config c;
  load_ok("defaults.ini", "[Model]\n", &c);
  assert_int_equal(c.model.epochs, 1);
  assert_int_equal(c.model.loss, NTO_LOSS_CROSS);
  assert_int_equal(c.model.batch_size, 1);
  assert_string_equal(c.model.save_path, "");
  assert_int_equal(c.model.memory_swap, 0);
  assert_string_equal(c.model.swap_lookahead, "");
  assert_string_equal(c.model.swap_path, "");
  assert_string_equal(c.model.memory_budget, "");
  assert_int_equal(c.opt.kind, NTO_OPT_ADAM);
  assert_near(c.opt.learning_rate, 1e-3);
  assert_int_equal(c.opt.lr_given, 0);
  assert_near(c.opt.momentum, 0);
  assert_near(c.opt.beta1, 0.9);
  assert_near(c.opt.beta2, 0.999);
  assert_near(c.opt.epsilon, 1e-7);
  assert_near(c.opt.weight_decay, 0);
  assert_int_equal(c.lr.given, 0);
  assert_int_equal(c.lr.kind, NTO_LR_CONSTANT);
  assert_near(c.lr.learning_rate[0], 1e-3);
  assert_int_equal(c.train_set.kind, NTO_DATA_NONE);
  assert_int_equal(c.valid_set.kind, NTO_DATA_NONE);
  assert_int_equal(c.test_set.kind, NTO_DATA_NONE);
  assert_int_equal(c.n_layers, 0);
  assert_null(c.layers);
  nto_config_free(&c);

  /* [Optimizer] present: only the type is required. */
  load_ok("defaults_sgd.ini", "[model]\n[optimizer]\ntype = SGD\n", &c);
  assert_int_equal(c.opt.kind, NTO_OPT_SGD);
  assert_near(c.opt.learning_rate, 1e-3);
  nto_config_free(&c);
}

/* Learning rate precedence: the scheduler's rate wins. */
static void test_lr_precedence(void **state) {
  (void)state;
  static const struct {
    const char *text;
    double opt_lr; /* c.opt.learning_rate after load */
    int lr_given;  /* c.opt.lr_given */
    int sched;     /* c.lr.given */
    double lr0;    /* c.lr.learning_rate[0] */
  } cases[] = {
      {"[Model]\n[Optimizer]\ntype = adam\nlearning_rate = 0.01\n", 0.01, 1, 0,
       0.01},
      {"[Model]\n[Optimizer]\ntype = adam\nlearning_rate = 0.01\n"
       "[LearningRateScheduler]\ntype = constant\nlearning_rate = 0.5\n",
       0.5, 1, 1, 0.5},
      {"[Model]\n[Optimizer]\ntype = adam\nlearning_rate = 0.01\n"
       "[LearningRateScheduler]\ntype = constant\n",
       0.01, 1, 1, 0.01},
      {"[Model]\n[LearningRateScheduler]\ntype = constant\n"
       "learning_rate = 0.25\n",
       0.25, 0, 1, 0.25},
      /* scheduler before the optimizer in the file: same result */
      {"[Model]\n[LearningRateScheduler]\ntype = exponential\n"
       "learning_rate = 0.2\ndecay_rate = 0.5\ndecay_steps = 4\n"
       "[Optimizer]\ntype = sgd\nlearning_rate = 0.01\n",
       0.2, 1, 1, 0.2},
  };
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    char name[32];
    snprintf(name, sizeof name, "prec%zu.ini", i);
    nto_config c;
    load_ok(name, cases[i].text, &c);
    if (fabs(c.opt.learning_rate - cases[i].opt_lr) > 1e-12 ||
        c.opt.lr_given != cases[i].lr_given || c.lr.given != cases[i].sched ||
        fabs(c.lr.learning_rate[0] - cases[i].lr0) > 1e-12)
      fail_msg("case %zu: opt lr %g given %d, sched %d lr0 %g", i,
               c.opt.learning_rate, c.opt.lr_given, c.lr.given,
               c.lr.learning_rate[0]);
    nto_config_free(&c);
  }
}

static void test_schedulers(void **state) {
  (void)state;
  nto_config c;

  load_ok("lr_const.ini",
          "[Model]\n[LearningRateScheduler]\nType = Constant\n"
          "Learning_Rate = 0.05\n",
          &c);
  assert_int_equal(c.lr.kind, NTO_LR_CONSTANT);
  assert_int_equal(c.lr.given, 1);
  assert_near(c.lr.learning_rate[0], 0.05);
  nto_config_free(&c);

  load_ok("lr_exp.ini",
          "[Model]\n[LearningRateScheduler]\ntype = exponential\n"
          "learning_rate = 0.1\ndecay_rate = 0.5\ndecay_steps = 10\n",
          &c);
  assert_int_equal(c.lr.kind, NTO_LR_EXPONENTIAL);
  assert_near(c.lr.learning_rate[0], 0.1);
  assert_near(c.lr.decay_rate, 0.5);
  assert_int_equal(c.lr.decay_steps, 10);
  nto_config_free(&c);

  load_ok("lr_step.ini",
          "[Model]\n[LearningRateScheduler]\ntype = step\n"
          "learning_rate = 0.1, 0.01,0.001\niteration = 100, 200\n",
          &c);
  assert_int_equal(c.lr.kind, NTO_LR_STEP);
  assert_int_equal(c.lr.n_steps, 2);
  assert_near(c.lr.learning_rate[0], 0.1);
  assert_near(c.lr.learning_rate[1], 0.01);
  assert_near(c.lr.learning_rate[2], 0.001);
  assert_int_equal(c.lr.iteration[0], 100);
  assert_int_equal(c.lr.iteration[1], 200);
  assert_near(c.opt.learning_rate, 0.1);
  nto_config_free(&c);

  load_ok("lr_cos.ini",
          "[Model]\n[LearningRateScheduler]\ntype = cosine\n"
          "max_learning_rate = 0.1\nmin_learning_rate = 0.001\n"
          "decay_steps = 1000\n",
          &c);
  assert_int_equal(c.lr.kind, NTO_LR_COSINE);
  assert_near(c.lr.max_learning_rate, 0.1);
  assert_near(c.lr.min_learning_rate, 0.001);
  assert_int_equal(c.lr.decay_steps, 1000);
  assert_near(c.opt.learning_rate, 0.1);
  nto_config_free(&c);

  /* cosine without max_learning_rate starts at the optimizer's rate */
  load_ok("lr_cos2.ini",
          "[Model]\n[Optimizer]\ntype = adamw\nlearning_rate = 0.02\n"
          "weight_decay = 0.01\n"
          "[LearningRateScheduler]\ntype = cosine\ndecay_steps = 50\n",
          &c);
  assert_int_equal(c.opt.kind, NTO_OPT_ADAMW);
  assert_near(c.opt.weight_decay, 0.01);
  assert_near(c.lr.max_learning_rate, 0.02);
  assert_near(c.lr.min_learning_rate, 0);
  nto_config_free(&c);
}

static void test_dataset_paths(void **state) {
  (void)state;
  nto_config c;
  load_ok("data.ini",
          "[Model]\n"
          "[train_set]\ntype = file\npath = data/train.dat\n"
          "[valid_set]\nType = File\nPath = \"/abs/valid.dat\"\n"
          "buffer_size = 100\n"
          "[test_set]\ntype = file\npath = ../t.dat\n",
          &c);
  char want[600];
  snprintf(want, sizeof want, "%s/data/train.dat", tmpdir);
  assert_int_equal(c.train_set.kind, NTO_DATA_FILE);
  assert_string_equal(c.train_set.path, want);
  assert_int_equal(c.train_set.buffer_size, 0);
  assert_int_equal(c.valid_set.kind, NTO_DATA_FILE);
  assert_string_equal(c.valid_set.path, "/abs/valid.dat");
  assert_int_equal(c.valid_set.buffer_size, 100);
  snprintf(want, sizeof want, "%s/../t.dat", tmpdir);
  assert_string_equal(c.test_set.path, want);
  assert_int_equal(c.n_layers, 0);
  nto_config_free(&c);

  /* A config named without a directory: paths stay relative to it. */
  char cwd[1024];
  assert_non_null(getcwd(cwd, sizeof cwd));
  assert_int_equal(chdir(tmpdir), 0);
  nto_err err = {0};
  int rc = nto_config_load(&c, "data.ini", &err);
  assert_int_equal(chdir(cwd), 0);
  assert_int_equal(rc, 0);
  assert_string_equal(c.train_set.path, "data/train.dat");
  nto_config_free(&c);
}

/* ---------------------------------------------------------------------- */
/* nntrainer's deprecated spellings (read with a warning each)             */

/* c's warning i contains each of the NULL-terminated pieces. */
static void assert_warning(const nto_config *c, int i, ...) {
  if (i >= c->n_warnings)
    fail_msg("warning %d of %d missing", i, c->n_warnings);
  va_list ap;
  va_start(ap, i);
  for (const char *p; (p = va_arg(ap, const char *)) != NULL;)
    if (!strstr(c->warnings[i], p))
      fail_msg("warning %d '%s' lacks '%s'", i, c->warnings[i], p);
  va_end(ap);
  if (strchr(c->warnings[i], '\n'))
    fail_msg("warning %d is not one line: '%s'", i, c->warnings[i]);
}

/* [Model] optimizer, learning_rate, ... (before [Optimizer] existed): the
 * same values [Optimizer] would give, one warning per key, in file order;
 * freed with the config. */
static void test_model_optimizer(void **state) {
  (void)state;
  nto_config c;
  load_ok("old_adam.ini",
          "[Model]\nType = NeuralNetwork\nLearning_rate = 0.0001\n"
          "Decay_rate = 0.96\nDecay_steps = 1000\nOptimizer = adam\n"
          "beta1 = 0.8\nbeta2 = 0.9999\nepsilon = 1e-8\n",
          &c);
  assert_int_equal(c.opt.kind, NTO_OPT_ADAM);
  assert_near(c.opt.learning_rate, 1e-4);
  assert_int_equal(c.opt.lr_given, 1);
  assert_near(c.opt.beta1, 0.8);
  assert_near(c.opt.beta2, 0.9999);
  assert_near(c.opt.epsilon, 1e-8);
  assert_int_equal(c.lr.kind, NTO_LR_EXPONENTIAL);
  assert_int_equal(c.lr.given, 1);
  assert_near(c.lr.learning_rate[0], 1e-4);
  assert_near(c.lr.decay_rate, 0.96);
  assert_int_equal(c.lr.decay_steps, 1000);
  assert_int_equal(c.n_warnings, 7);
  assert_warning(&c, 0, "old_adam.ini: [model] key 'learning_rate'",
                 "deprecated", "[Optimizer] learning_rate", NULL);
  assert_warning(&c, 3, "[model] key 'optimizer'", "[Optimizer] type", NULL);
  assert_warning(&c, 6, "[model] key 'epsilon'", "[Optimizer] epsilon", NULL);
  nto_config_free(&c);
  assert_null(c.warnings);
  assert_int_equal(c.n_warnings, 0);

  load_ok("old_sgd.ini", "[Model]\noptimizer = SGD\nlearning_rate = 0.05\n",
          &c);
  assert_int_equal(c.opt.kind, NTO_OPT_SGD);
  assert_near(c.opt.learning_rate, 0.05);
  assert_int_equal(c.lr.kind, NTO_LR_CONSTANT);
  assert_near(c.lr.learning_rate[0], 0.05);
  assert_int_equal(c.n_warnings, 2);
  nto_config_free(&c);

  /* Without `optimizer` nntrainer ignores the other keys: so do we. */
  load_ok("old_lr_only.ini",
          "[Model]\nlearning_rate = 0.5\n[Optimizer]\ntype = sgd\n"
          "learning_rate = 0.01\n",
          &c);
  assert_int_equal(c.opt.kind, NTO_OPT_SGD);
  assert_near(c.opt.learning_rate, 0.01);
  assert_int_equal(c.n_warnings, 1);
  assert_warning(&c, 0, "[model] key 'learning_rate'", "ignored",
                 "without 'optimizer'", NULL);
  nto_config_free(&c);
  load_ok("old_beta_only.ini", "[Model]\nbeta1 = 5\n", &c);
  assert_int_equal(c.opt.kind, NTO_OPT_ADAM); /* the default, untouched */
  assert_near(c.opt.beta1, 0.9);
  assert_near(c.opt.learning_rate, 1e-3);
  assert_int_equal(c.n_warnings, 1);
  nto_config_free(&c);

  /* nntrainer reads [LearningRateScheduler] only with [Optimizer]. */
  load_ok("old_and_sched.ini",
          "[Model]\noptimizer = adam\nlearning_rate = 0.02\n"
          "[LearningRateScheduler]\ntype = constant\nlearning_rate = 0.5\n",
          &c);
  assert_near(c.opt.learning_rate, 0.02);
  assert_int_equal(c.lr.given, 0);
  assert_near(c.lr.learning_rate[0], 0.02);
  assert_int_equal(c.n_warnings, 3);
  assert_warning(&c, 2, "[learningratescheduler]", "ignored",
                 "[Optimizer] to use it", NULL);
  nto_config_free(&c);

  /* Current spellings alone: no warning. */
  load_ok("current.ini", "[Model]\n[Optimizer]\ntype = sgd\n", &c);
  assert_int_equal(c.n_warnings, 0);
  assert_null(c.warnings);
  nto_config_free(&c);
}

/* [DataSet]: the data sections of nntrainer's old format. */
static void test_old_dataset(void **state) {
  (void)state;
  nto_config c;
  load_ok("old_data.ini",
          "[Model]\n[DataSet]\nBufferSize=100\nTrainData=\"train.dat\"\n"
          "ValidData=\"/abs/valid.dat\"\nTestData = ../t.dat\n"
          "LabelData=\"label.dat\"\n",
          &c);
  assert_int_equal(c.train_set.kind, NTO_DATA_FILE);
  assert_string_equal(c.train_set.path, tmp_path("train.dat"));
  assert_int_equal(c.train_set.buffer_size, 100);
  assert_int_equal(c.valid_set.kind, NTO_DATA_FILE);
  assert_string_equal(c.valid_set.path, "/abs/valid.dat");
  assert_int_equal(c.valid_set.buffer_size, 100);
  assert_string_equal(c.test_set.path, tmp_path("../t.dat"));
  assert_int_equal(c.n_layers, 0); /* [DataSet] is not a layer */
  assert_int_equal(c.n_warnings, 5);
  assert_warning(&c, 0, "old_data.ini: [dataset] key 'buffersize'",
                 "buffer_size", NULL);
  assert_warning(&c, 1, "[dataset] key 'traindata'", "[train_set]",
                 "path = train.dat", NULL);
  assert_warning(&c, 4, "[dataset] key 'labeldata'", "ignored", NULL);
  nto_config_free(&c);

  /* [train_set] wins over TrainData, as in nntrainer; buffer_size is the
   * other spelling of BufferSize. */
  load_ok("old_data2.ini",
          "[Model]\n[DataSet]\nTrainData = a.dat\nbuffer_size = 7\n"
          "ValidData = v.dat\n[train_set]\ntype = file\npath = b.dat\n",
          &c);
  assert_string_equal(c.train_set.path, tmp_path("b.dat"));
  assert_int_equal(c.train_set.buffer_size, 0);
  assert_string_equal(c.valid_set.path, tmp_path("v.dat"));
  assert_int_equal(c.valid_set.buffer_size, 7);
  assert_int_equal(c.test_set.kind, NTO_DATA_NONE);
  assert_int_equal(c.n_warnings, 4);
  assert_warning(&c, 3, "[dataset] key 'traindata'",
                 "overridden by [train_set]", NULL);
  nto_config_free(&c);
}

/* [Model] keys of nntrainer that do not change training here, and
 * continue_train / save_best_path (applied by train). */
static void test_nntrainer_model_keys(void **state) {
  (void)state;
  nto_config c;
  load_ok("nnt_keys.ini",
          "[Model]\ncontinue_train = false\nmodel_tensor_type = FP32-FP32\n"
          "tensor_format = NCHW\nmemory_optimization = true\n",
          &c);
  assert_int_equal(c.model.continue_train, 0);
  assert_string_equal(c.model.save_best_path, "");
  assert_int_equal(c.n_warnings, 0);
  nto_config_free(&c);

  load_ok("nnt_keys2.ini",
          "[Model]\ncontinue_train = true\nsave_best_path = best/w.bin\n"
          "model_tensor_type = fp32-fp32\nmemory_optimization = false\n",
          &c);
  assert_int_equal(c.model.continue_train, 1);
  assert_string_equal(c.model.save_best_path, tmp_path("best/w.bin"));
  assert_int_equal(c.n_warnings, 1); /* both applied by train */
  assert_warning(&c, 0, "[model] key 'memory_optimization'", NULL);
  nto_config_free(&c);
}

/* `backbone = FILE.ini`: the backbone's layer sections inserted where the
 * section stands, named with its name as prefix, sliced, frozen unless
 * trainable = true, the first given input_shape/input_layers; a later
 * reference to the section is its last layer; nested backbones. */
static void test_backbone(void **state) {
  (void)state;
  mkdir(tmp_path("bbs"), 0700);
  write_file("bbs/base.ini",
             "[Model]\nbatch_size = 9\n[Optimizer]\ntype = sgd\n"
             "[in]\ntype = input\ninput_shape = 1:8:8\n"
             "[conv1]\ntype = conv2d\nfilters = 2\nkernel_size = 3,3\n"
             "[conv2]\ntype = conv2d\nfilters = 2\nkernel_size = 3,3\n"
             "input_layers = conv1\ntrainable = true\n"
             "[head]\ntype = fully_connected\nunit = 5\n");
  write_file("bbs/outer.ini",
             "[inner]\nbackbone = base.ini\noutputlayer = conv2\n"
             "trainable = true\n[post]\ntype = flatten\n");
  nto_config c;
  load_ok("bb_main.ini",
          "[Model]\nbatch_size = 4\n"
          "[input]\ntype = input\ninput_shape = 1:10:10\n"
          "[B]\nbackbone = \"bbs/base.ini\"\nInputLayer = conv1\n"
          "OutputLayer = conv2\ninput_layers = input\n"
          "[fc]\ntype = fully_connected\nunit = 3\ninput_layers = b\n"
          "[o]\nbackbone = bbs/outer.ini\n",
          &c);
  assert_int_equal(c.model.batch_size, 4); /* the backbone's [Model] ignored */
  assert_int_equal(c.n_layers, 8);
  static const char *const names[] = {"input",       "bconv1",   "bconv2",
                                      "fc",          "oinnerin", "oinnerconv1",
                                      "oinnerconv2", "opost"};
  static const int prefix[] = {0, 1, 1, 0, 1, 1, 1, 1};
  for (int i = 0; i < 8; i++) {
    assert_string_equal(c.layers[i].name, names[i]);
    assert_int_equal(c.layers[i].prefix, prefix[i]);
  }
  assert_string_equal(nto_section_get(&c.layers[1], "input_layers"), "input");
  assert_string_equal(nto_section_get(&c.layers[2], "input_layers"), "bconv1");
  assert_string_equal(nto_section_get(&c.layers[3], "input_layers"), "bconv2");
  /* trainable = false by default, over the backbone's own trainable */
  assert_string_equal(nto_section_get(&c.layers[1], "trainable"), "false");
  assert_string_equal(nto_section_get(&c.layers[2], "trainable"), "false");
  assert_null(nto_section_get(&c.layers[3], "trainable"));
  /* outer.ini's [inner] slice was trainable; [o] freezes it again */
  assert_string_equal(nto_section_get(&c.layers[4], "trainable"), "false");
  assert_string_equal(nto_section_get(&c.layers[6], "input_layers"),
                      "oinnerconv1");
  assert_null(nto_section_get(&c.layers[7], "input_layers"));
  /* where each section is written */
  assert_int_equal(c.n_files, 3);
  assert_string_equal(nto_section_file(&c, &c.layers[0]), c.path);
  assert_string_equal(nto_section_file(&c, &c.layers[1]),
                      tmp_path("bbs/base.ini"));
  assert_string_equal(nto_section_file_of(&c, "oinnerconv1"),
                      tmp_path("bbs/base.ini"));
  assert_string_equal(nto_section_file_of(&c, "nope"), c.path);
  nto_config_free(&c);
}

/* Layer types of nntrainer's first format, read as the current names. */
static void test_old_layer_types(void **state) {
  (void)state;
  nto_config c;
  load_ok("old_types.ini",
          "[Model]\n[in]\nType = InputLayer\ninput_shape = 1:1:8\n"
          "[fc]\nType = FullyConnectedLayer\nunit = 4\n"
          "[bn]\nType = batchnormalizationlayer\n"
          "[out]\nType = OutputLayer\nunit = 2\n"
          "[keep]\nType = Input\ninput_shape = 1:1:2\n",
          &c);
  assert_string_equal(nto_section_get(layer(&c, "in"), "type"), "input");
  assert_string_equal(nto_section_get(layer(&c, "fc"), "type"),
                      "fully_connected");
  assert_string_equal(nto_section_get(layer(&c, "bn"), "type"),
                      "batch_normalization");
  assert_string_equal(nto_section_get(layer(&c, "out"), "type"),
                      "fully_connected");
  assert_string_equal(nto_section_get(layer(&c, "keep"), "type"), "Input");
  assert_int_equal(c.n_warnings, 4);
  assert_warning(&c, 0, "old_types.ini: [in] key 'type'", "'InputLayer'",
                 "read as input", NULL);
  assert_warning(&c, 3, "[out] key 'type'", "'OutputLayer'",
                 "read as fully_connected", NULL);
  nto_config_free(&c);
}

/* Relative save_path, memory_swap_path and data paths are joined to the
 * INI's directory wherever it is loaded from; absolute and empty ones are
 * kept. */
static void test_relative_paths(void **state) {
  (void)state;
  static const char text[] = "[Model]\nsave_path = w.bin\n"
                             "memory_swap_path = swap\n"
                             "[train_set]\ntype = file\npath = d/t.dat\n";
  nto_config c;
  load_ok("rel.ini", text, &c);
  assert_string_equal(c.model.save_path, tmp_path("w.bin"));
  assert_string_equal(c.model.swap_path, tmp_path("swap"));
  assert_string_equal(c.train_set.path, tmp_path("d/t.dat"));
  nto_config_free(&c);

  /* loaded from another working directory, through a relative name */
  char cwd[1024];
  assert_non_null(getcwd(cwd, sizeof cwd));
  assert_int_equal(mkdir(tmp_path("sub"), 0700), 0);
  write_file("sub/rel.ini", text);
  assert_int_equal(chdir(tmpdir), 0);
  nto_err err = {0};
  int rc = nto_config_load(&c, "sub/rel.ini", &err);
  assert_int_equal(chdir(cwd), 0);
  assert_int_equal(rc, 0);
  assert_string_equal(c.model.save_path, "sub/w.bin");
  assert_string_equal(c.model.swap_path, "sub/swap");
  assert_string_equal(c.train_set.path, "sub/d/t.dat");
  nto_config_free(&c);

  load_ok("abs.ini",
          "[Model]\nsave_path = /abs/w.bin\nfsu_path = /var/tmp\n"
          "save_best_path = \"\"\n",
          &c);
  assert_string_equal(c.model.save_path, "/abs/w.bin");
  assert_string_equal(c.model.swap_path, "/var/tmp");
  assert_string_equal(c.model.save_best_path, "");
  assert_int_equal(c.n_warnings, 0);
  nto_config_free(&c);
  load_ok("empty_save.ini", "[Model]\nsave_path = \"\"\n", &c);
  assert_string_equal(c.model.save_path, "");
  nto_config_free(&c);
}

/* iniparser 4.1 lexing rules the loader relies on (pinned on purpose). */
static void test_iniparser_rules(void **state) {
  (void)state;
  nto_config c;
  load_ok("rules.ini",
          "[Model]\n"
          "[l]\n"
          "type = x\n"
          "semi = a;b\n"           /* ';' starts a comment even mid-value */
          "hash = \"a # b\" # c\n" /* quotes protect '#' */
          "cont = a \\\n"          /* backslash continues the line */
          "   b\n"
          "empty =\n"
          "quoted_empty = \"\"\n"
          "path = a\\b\n" /* a backslash inside a line is kept */
          "crlf = 1\r\n", /* CRLF line endings are fine */
          &c);
  const nto_section *l = layer(&c, "l");
  assert_string_equal(nto_section_get(l, "semi"), "a");
  assert_string_equal(nto_section_get(l, "hash"), "a # b");
  assert_string_equal(nto_section_get(l, "cont"), "a    b");
  assert_string_equal(nto_section_get(l, "empty"), "");
  assert_string_equal(nto_section_get(l, "quoted_empty"), "");
  assert_string_equal(nto_section_get(l, "path"), "a\\b");
  assert_string_equal(nto_section_get(l, "crlf"), "1");
  assert_int_equal(l->n_kv, 8);
  nto_config_free(&c);
}

/* ---------------------------------------------------------------------- */
/* Malformed configs                                                       */

static char long_value_ini[1200];
static char long_line_ini[1600];
static char long_section_ini[800];
static char long_section_dup_ini[800];

static void build_long_inputs(void) {
  char v[700];
  memset(v, 'x', 600);
  v[600] = '\0';
  snprintf(long_value_ini, sizeof long_value_ini,
           "[Model]\n[fc]\ntype = fully_connected\nname = %s\n", v);
  memset(v, 'y', 1100 > sizeof v - 1 ? sizeof v - 1 : 1100);
  v[sizeof v - 1] = '\0';
  snprintf(long_line_ini, sizeof long_line_ini,
           "[Model]\n[fc]\ntype = fc\nname = %s%s\n", v, v);
  memset(v, 's', 70);
  v[70] = '\0';
  snprintf(long_section_ini, sizeof long_section_ini,
           "[Model]\n[%s]\ntype = input\n", v);
  /* Its keys repeat the section before: not "given twice", its length. */
  snprintf(long_section_dup_ini, sizeof long_section_dup_ini,
           "[Model]\n[in]\ntype = input\n\n[%s]\ntype = fc\n", v);
}

typedef struct bad_case {
  const char *name; /* file written in the temporary directory */
  const char *text; /* NULL: not written (file not found) */
  int code;
  const char *want[3]; /* substrings of the message besides the file name */
} bad_case;

static const bad_case bad_cases[] = {
    {"no_model.ini",
     "[Optimizer]\ntype = sgd\n",
     NTO_ECONFIG,
     {"missing [Model] section"}},
    {"empty.ini", "", NTO_ECONFIG, {"missing [Model] section"}},
    {"comments_only.ini",
     "# nothing\n; here\n",
     NTO_ECONFIG,
     {"missing [Model] section"}},
    {"syntax_noeq.ini",
     "[Model]\nepochs = 1\nfoo bar\n",
     NTO_ECONFIG,
     {"syntax error at line 3", "'foo bar'"}},
    {"syntax_header.ini",
     "[Model\nepochs = 1\n",
     NTO_ECONFIG,
     {"syntax error at line 1", "'[Model'"}},
    {"long_line.ini",
     long_line_ini,
     NTO_ECONFIG,
     {"syntax error at line 4", "longer than 1023"}},
    {"model_unknown.ini",
     "[Model]\nepochz = 3\n",
     NTO_ECONFIG,
     {"[model] unknown key 'epochz'", "epochs", "memory_budget"}},
    {"model_type.ini",
     "[Model]\ntype = KNN\n",
     NTO_ECONFIG,
     {"[model] key 'type'", "NeuralNetwork", "got 'KNN'"}},
    {"bad_epochs.ini",
     "[Model]\nepochs = ten\n",
     NTO_ECONFIG,
     {"[model] key 'epochs'", "integer >= 1", "got 'ten'"}},
    {"zero_epochs.ini",
     "[Model]\nEpochs = 0\n",
     NTO_ECONFIG,
     {"[model] key 'epochs'", "got '0'"}},
    {"batch0.ini",
     "[Model]\nbatch_size = 0\n",
     NTO_ECONFIG,
     {"[model] key 'batch_size'", "[1, 1048576]", "got '0'"}},
    {"loss.ini",
     "[Model]\nloss = hinge\n",
     NTO_ECONFIG,
     {"[model] key 'loss'", "cross|mse", "got 'hinge'"}},
    {"swap_bool.ini",
     "[Model]\nmemory_swap = maybe\n",
     NTO_ECONFIG,
     {"[model] key 'memory_swap'", "true or false", "got 'maybe'"}},
    {"budget.ini",
     "[Model]\nmemory_budget = lots\n",
     NTO_ECONFIG,
     {"[model] key 'memory_budget'", "expected a size like 64M, got 'lots'"}},
    {"lookahead0.ini",
     "[Model]\nmemory_swap_lookahead = 0\n",
     NTO_ECONFIG,
     {"[model] key 'memory_swap_lookahead'", "or auto", "got '0'"}},
    {"alias_twice.ini",
     "[Model]\nmemory_swap = true\nfsu = false\n",
     NTO_ECONFIG,
     {"[model] key 'fsu'", "'memory_swap'"}},
    {"neg_lr.ini",
     "[Model]\n[Optimizer]\ntype = sgd\nlearning_rate = -0.1\n",
     NTO_ECONFIG,
     {"[optimizer] key 'learning_rate'", "(0, 10]", "'-0.1'"}},
    {"big_lr.ini",
     "[Model]\n[Optimizer]\ntype = sgd\nlearning_rate = 11\n",
     NTO_ECONFIG,
     {"[optimizer] key 'learning_rate'", "got '11'"}},
    {"opt_type.ini",
     "[Model]\n[Optimizer]\ntype = rmsprop\n",
     NTO_ECONFIG,
     {"[optimizer] key 'type'", "sgd|adam|adamw", "got 'rmsprop'"}},
    {"opt_notype.ini",
     "[Model]\n[Optimizer]\nlearning_rate = 0.1\n",
     NTO_ECONFIG,
     {"[optimizer] missing key 'type'"}},
    {"momentum_adam.ini",
     "[Model]\n[Optimizer]\ntype = adam\nmomentum = 0.9\n",
     NTO_ECONFIG,
     {"[optimizer] key 'momentum'", "optimizer adam"}},
    {"beta1_sgd.ini",
     "[Model]\n[Optimizer]\nbeta1 = 0.9\ntype = sgd\n",
     NTO_ECONFIG,
     {"[optimizer] key 'beta1'", "optimizer sgd"}},
    {"beta2_range.ini",
     "[Model]\n[Optimizer]\ntype = adam\nbeta2 = 1\n",
     NTO_ECONFIG,
     {"[optimizer] key 'beta2'", "[0, 1)", "got '1'"}},
    {"epsilon0.ini",
     "[Model]\n[Optimizer]\ntype = adam\nepsilon = 0\n",
     NTO_ECONFIG,
     {"[optimizer] key 'epsilon'", "(0, 1)"}},
    {"wd_neg.ini",
     "[Model]\n[Optimizer]\ntype = adamw\nweight_decay = -1\n",
     NTO_ECONFIG,
     {"[optimizer] key 'weight_decay'", ">= 0", "got '-1'"}},
    /* Values the optimizer's float32 changes (optimizer.c). */
    {"beta1_float.ini",
     "[Model]\n[Optimizer]\ntype = adam\nbeta1 = 0.99999999\n",
     NTO_ECONFIG,
     {"[optimizer] key 'beta1'", "got '0.99999999'", "which is 1 in float32"}},
    {"beta2_float.ini",
     "[Model]\n[Optimizer]\ntype = adamw\nbeta2 = 0.99999998\n",
     NTO_ECONFIG,
     {"[optimizer] key 'beta2'", "[0, 1)", "which is 1 in float32"}},
    {"momentum_float.ini",
     "[Model]\n[Optimizer]\ntype = sgd\nmomentum = 0.999999999\n",
     NTO_ECONFIG,
     {"[optimizer] key 'momentum'", "which is 1 in float32"}},
    {"wd_float.ini",
     "[Model]\n[Optimizer]\ntype = adam\nweight_decay = 1e40\n",
     NTO_ECONFIG,
     {"[optimizer] key 'weight_decay'", "got '1e40'", "inf in float32"}},
    {"eps_float.ini",
     "[Model]\n[Optimizer]\ntype = adam\nepsilon = 1e-50\n",
     NTO_ECONFIG,
     {"[optimizer] key 'epsilon'", "(0, 1)", "0 in float32"}},
    {"lr_float.ini",
     "[Model]\n[Optimizer]\ntype = sgd\nlearning_rate = 1e-46\n",
     NTO_ECONFIG,
     {"[optimizer] key 'learning_rate'", "0 in float32"}},
    {"opt_unknown.ini",
     "[Model]\n[Optimizer]\ntype = sgd\nnesterov = 1\n",
     NTO_ECONFIG,
     {"[optimizer] unknown key 'nesterov'"}},
    {"legacy_half.ini",
     "[Model]\n[Optimizer]\ntype = sgd\ndecay_rate = 0.9\n",
     NTO_ECONFIG,
     {"[optimizer] key 'decay_rate'", "'decay_steps'"}},
    {"legacy_and_sched.ini",
     "[Model]\n[Optimizer]\ntype = sgd\ndecay_rate = 0.9\ndecay_steps = 5\n"
     "[LearningRateScheduler]\ntype = constant\n",
     NTO_ECONFIG,
     {"[optimizer] key 'decay_rate'", "[LearningRateScheduler]"}},
    {"sched_type.ini",
     "[Model]\n[LearningRateScheduler]\ntype = linear\n",
     NTO_ECONFIG,
     {"[learningratescheduler] key 'type'", "constant|exponential|step|cosine",
      "got 'linear'"}},
    {"sched_unknown.ini",
     "[Model]\n[LearningRateScheduler]\ntype = constant\nwarmup = 3\n",
     NTO_ECONFIG,
     {"[learningratescheduler] unknown key 'warmup'"}},
    {"sched_wrong_key.ini",
     "[Model]\n[LearningRateScheduler]\ntype = constant\ndecay_rate = 0.5\n",
     NTO_ECONFIG,
     {"[learningratescheduler] key 'decay_rate'", "scheduler constant"}},
    {"exp_nosteps.ini",
     "[Model]\n[LearningRateScheduler]\ntype = exponential\n"
     "decay_rate = 0.5\n",
     NTO_ECONFIG,
     {"[learningratescheduler] missing key 'decay_steps'"}},
    {"exp_rate.ini",
     "[Model]\n[LearningRateScheduler]\ntype = exponential\n"
     "decay_rate = 1.5\ndecay_steps = 3\n",
     NTO_ECONFIG,
     {"key 'decay_rate'", "(0, 1]", "got '1.5'"}},
    {"step_mismatch.ini",
     "[Model]\n[LearningRateScheduler]\ntype = step\n"
     "learning_rate = 0.1,0.01\niteration = 10,20\n",
     NTO_ECONFIG,
     {"[learningratescheduler] key 'iteration'", "expected 1 iteration",
      "got '10,20'"}},
    {"step_order.ini",
     "[Model]\n[LearningRateScheduler]\ntype = step\n"
     "learning_rate = 0.1,0.01,0.001\niteration = 20,10\n",
     NTO_ECONFIG,
     {"key 'iteration'", "increasing", "got '20,10'"}},
    {"step_rates.ini",
     "[Model]\n[LearningRateScheduler]\ntype = step\n"
     "learning_rate = 0.1,,0.01\niteration = 10,20\n",
     NTO_ECONFIG,
     {"key 'learning_rate'", "comma-separated", "'0.1,,0.01'"}},
    {"cosine_minmax.ini",
     "[Model]\n[LearningRateScheduler]\ntype = cosine\n"
     "max_learning_rate = 0.1\nmin_learning_rate = 0.5\ndecay_steps = 10\n",
     NTO_ECONFIG,
     {"[learningratescheduler] key 'min_learning_rate'", "max_learning_rate",
      "got '0.5'"}},
    {"data_nopath.ini",
     "[Model]\n[train_set]\ntype = file\n",
     NTO_ECONFIG,
     {"[train_set] missing key 'path'"}},
    {"data_notype.ini",
     "[Model]\n[train_set]\npath = a.dat\n",
     NTO_ECONFIG,
     {"[train_set] missing key 'type'"}},
    {"data_unknown.ini",
     "[Model]\n[valid_set]\ntype = file\npath = v.dat\nshuffle = 1\n",
     NTO_ECONFIG,
     {"[valid_set] unknown key 'shuffle'", "buffer_size"}},
    {"data_type.ini",
     "[Model]\n[test_set]\ntype = csv\npath = t.csv\n",
     NTO_ECONFIG,
     {"[test_set] key 'type'", "got 'csv'"}},
    {"data_buffer.ini",
     "[Model]\n[train_set]\ntype = file\npath = a\nbuffer_size = 0\n",
     NTO_ECONFIG,
     {"[train_set] key 'buffer_size'", "got '0'"}},
    {"layer_notype.ini",
     "[Model]\n[fc1]\nunit = 10\n",
     NTO_ECONFIG,
     {"[fc1] missing key 'type'"}},
    {"layer_empty.ini",
     "[Model]\n[in]\ntype = input\n[Empty]\n",
     NTO_ECONFIG,
     {"[empty] missing key 'type'"}},
    {"long_value.ini",
     long_value_ini,
     NTO_ECONFIG,
     {"[fc] key 'name'", "at most 511 characters", "got 600"}},
    {"long_section.ini",
     long_section_ini,
     NTO_ECONFIG,
     {"[ssssssss", "at most 63 characters", "(line 2)"}},
    {"long_section_dup.ini",
     long_section_dup_ini,
     NTO_ECONFIG,
     {"[ssssssss", "at most 63 characters", "(line 5)"}},
    {"comment_cont.ini",
     "[Model]\n# the next key is eaten \\\nepochs = 2\n",
     NTO_ECONFIG,
     {"line 2: a comment ends in '\\'", "onto line 3", "remove the backslash"}},
    {"inline_comment_cont.ini",
     "[Model]\nepochs = 2 ; two \\\nbatch_size = 4\n",
     NTO_ECONFIG,
     {"line 2: a comment ends in '\\'", "onto line 3"}},
    {"quoted_cont.ini",
     "[Model]\n[l]\ntype = \"x\" # note \\\nunit = 3\n",
     NTO_ECONFIG,
     {"line 3: a comment ends in '\\'", "onto line 4"}},
    {"cr_only.ini",
     "[Model]\repochs = 2\r",
     NTO_ECONFIG,
     {"line 1: a CR line ending without LF (byte offset 7)", "LF"}},
    {"cr_late.ini",
     "[Model]\nepochs = 2\n[l]\rtype = x\n",
     NTO_ECONFIG,
     {"line 3: a CR line ending without LF (byte offset 22)"}},
    {"utf16_bom.ini",
     "\xFF\xFE[",
     NTO_ECONFIG,
     {"line 1: UTF-16: save the file as UTF-8", "byte order mark"}},
    {"dup_section.ini",
     "[Model]\n[fc]\ntype = fully_connected\n[FC]\nunit = 3\n",
     NTO_ECONFIG,
     {"[fc] section given twice", "lines 2 and 4"}},
    {"dup_key.ini",
     "[Model]\nepochs = 1\nEpochs = 2\n",
     NTO_ECONFIG,
     {"[model] key 'epochs'", "given twice", "lines 2 and 3"}},
    {"key_outside.ini",
     "epochs = 3\n[Model]\n",
     NTO_ECONFIG,
     {"key 'epochs' before any section"}},
    {"empty_section.ini",
     "[Model]\n[]\ntype = x\n",
     NTO_ECONFIG,
     {"empty section name"}},
    {"colon_section.ini",
     "[Model]\n[a:b]\ntype = x\n",
     NTO_ECONFIG,
     {"[a:b]", "':'"}},
    {"bom.ini",
     "\xEF\xBB\xBF[Model]\n",
     NTO_ECONFIG,
     {"syntax error at line 1", "byte order mark"}},
    {"not_there.ini", NULL, NTO_EIO, {"cannot open", "No such file"}},
    /* nntrainer's deprecated spellings, wrong */
    {"old_opt_twice.ini",
     "[Model]\noptimizer = sgd\n[Optimizer]\ntype = sgd\n",
     NTO_ECONFIG,
     {"[model] key 'optimizer'", "given twice", "[optimizer]"}},
    {"old_opt_type.ini",
     "[Model]\noptimizer = rmsprop\n",
     NTO_ECONFIG,
     {"[model] key 'optimizer'", "sgd|adam|adamw", "got 'rmsprop'"}},
    {"old_opt_beta_sgd.ini",
     "[Model]\nepsilon = 1e-5\noptimizer = sgd\n",
     NTO_ECONFIG,
     {"[model] key 'epsilon'", "not a setting of optimizer sgd"}},
    {"old_opt_lr.ini",
     "[Model]\noptimizer = adam\nlearning_rate = 0\n",
     NTO_ECONFIG,
     {"[model] key 'learning_rate'", "(0, 10]", "got '0'"}},
    {"old_opt_decay.ini",
     "[Model]\noptimizer = adam\ndecay_steps = 10\n",
     NTO_ECONFIG,
     {"[model] key 'decay_steps'", "needs 'decay_rate' too"}},
    {"old_opt_momentum.ini",
     "[Model]\noptimizer = sgd\nmomentum = 0.9\n",
     NTO_ECONFIG,
     {"[model] unknown key 'momentum'"}},
    {"old_data_notrain.ini",
     "[Model]\n[DataSet]\nValidData = v.dat\n",
     NTO_ECONFIG,
     {"[dataset] missing key 'traindata'"}},
    {"old_data_unknown.ini",
     "[Model]\n[DataSet]\nTrainData = t.dat\nTflite = x.tflite\n",
     NTO_ECONFIG,
     {"[dataset] unknown key 'tflite'", "traindata"}},
    {"old_data_buf2.ini",
     "[Model]\n[DataSet]\nTrainData = t.dat\nBufferSize = 2\n"
     "buffer_size = 3\n",
     NTO_ECONFIG,
     {"[dataset] key 'buffer_size'", "same setting as"}},
    {"old_data_buf0.ini",
     "[Model]\n[DataSet]\nTrainData = t.dat\nBufferSize = 0\n",
     NTO_ECONFIG,
     {"[dataset] key 'buffersize'", "got '0'"}},
    {"old_data_empty.ini",
     "[Model]\n[DataSet]\nTrainData = \"\"\n",
     NTO_ECONFIG,
     {"[dataset] key 'traindata'", "expected a file name"}},
    {"tensor_type.ini",
     "[Model]\nmodel_tensor_type = FP16-FP16\n",
     NTO_ECONFIG,
     {"[model] key 'model_tensor_type'", "expected FP32-FP32",
      "got 'FP16-FP16'"}},
    {"tensor_format.ini",
     "[Model]\ntensor_format = NHWC\n",
     NTO_ECONFIG,
     {"[model] key 'tensor_format'", "expected NCHW", "got 'NHWC'"}},
    {"continue_train.ini",
     "[Model]\ncontinue_train = maybe\n",
     NTO_ECONFIG,
     {"[model] key 'continue_train'", "maybe"}},
    {"memory_opt.ini",
     "[Model]\nmemory_optimization = 2\n",
     NTO_ECONFIG,
     {"[model] key 'memory_optimization'"}},
    {"backbone_tflite.ini",
     "[Model]\n[b]\nbackbone = ssd.tflite\ninput_shape = 3:8:8\n",
     NTO_ECONFIG,
     {"[b] key 'backbone'", "TFLite", "'ssd.tflite'"}},
    {"loss_twice.ini",
     "[Model]\n[in]\ntype = input\ninput_shape = 1:1:4\n[l1]\ntype = mse\n"
     "[l2]\ntype = cross_softmax\n",
     NTO_ECONFIG, {"[l2] key 'type'", "only allowed once"}},
    {"loss_not_last.ini",
     "[Model]\n[in]\ntype = input\ninput_shape = 1:1:4\n[l]\ntype = mse\n"
     "[fc]\ntype = fully_connected\nunit = 2\n",
     NTO_ECONFIG, {"[l]", "must be the last layer section"}},
    {"loss_input.ini",
     "[Model]\n[in]\ntype = input\ninput_shape = 1:1:4\n[fc]\n"
     "type = fully_connected\nunit = 2\n[l]\ntype = mse\n"
     "input_layers = in\n",
     NTO_ECONFIG, {"[l] key 'input_layers'", "last layer ('fc')", "got 'in'"}},
    {"loss_key.ini",
     "[Model]\n[in]\ntype = input\ninput_shape = 1:1:4\n[l]\ntype = mse\n"
     "unit = 3\n",
     NTO_ECONFIG, {"[l] unknown key 'unit'", "input_layers"}},
    {"model_2020.ini", "[Model]\nCost = cross\n", NTO_ECONFIG,
     {"[model] key 'cost'", "2020", "write loss"}},
    {"backbone_missing.ini",
     "[Model]\n[b]\nbackbone = \"other.ini\"\n",
     NTO_EIO,
     {"[b] key 'backbone'", "other.ini: cannot open"}},
    {"backbone_onnx.ini",
     "[Model]\n[b]\nbackbone = m.onnx\n",
     NTO_ECONFIG,
     {"[b] key 'backbone'", "expected an .ini file", "'m.onnx'"}},
    {"backbone_key.ini",
     "[Model]\n[b]\nbackbone = bb_base.ini\nunit = 3\n",
     NTO_ECONFIG,
     {"[b] unknown key 'unit'", "trainable"}},
    {"backbone_scale.ini",
     "[Model]\n[b]\nbackbone = bb_base.ini\nScaleSize = 2\n",
     NTO_ECONFIG,
     {"[b] key 'scalesize'", "only 1", "got '2'"}},
    {"backbone_trainable.ini",
     "[Model]\n[b]\nbackbone = bb_base.ini\ntrainable = perhaps\n",
     NTO_ECONFIG,
     {"[b] key 'trainable'", "perhaps"}},
    {"backbone_slice.ini",
     "[Model]\n[b]\nbackbone = bb_base.ini\nOutputLayer = nope\n",
     NTO_ECONFIG,
     {"[b] key 'outputlayer'", "no layer 'nope'"}},
    {"backbone_order.ini",
     "[Model]\n[b]\nbackbone = bb_base.ini\nInputLayer = fc\n"
     "OutputLayer = conv\n",
     NTO_ECONFIG,
     {"[b] keys 'inputlayer', 'outputlayer'", "no layers left"}},
    {"backbone_self.ini",
     "[Model]\n[b]\nbackbone = backbone_self.ini\n",
     NTO_ECONFIG,
     {"[b] key 'backbone'", "this file", "include itself"}},
    {"backbone_cycle.ini",
     "[Model]\n[b]\nbackbone = bb_cycle.ini\n",
     NTO_ECONFIG,
     {"backbone_cycle.ini: [b] key 'backbone': ", "bb_cycle.ini: [c]",
      "a file that includes this one"}},
    {"backbone_bad.ini",
     "[Model]\n[b]\nbackbone = bb_bad.ini\n",
     NTO_ECONFIG,
     {"backbone_bad.ini: [b] key 'backbone': ", "bb_bad.ini: [x]",
      "missing key 'type'"}},
    {"backbone_input.ini",
     "[Model]\n[b]\nbackbone = bb_wire.ini\n",
     NTO_ECONFIG,
     {"bb_wire.ini: [conv] key 'input_layers'", "'elsewhere'", "of [b]"}},
};

static void test_malformed(void **state) {
  (void)state;
  build_long_inputs();
  /* the backbones some cases include */
  write_file("bb_base.ini", "[Model]\nbatch_size = 7\n[in]\ntype = input\n"
                            "input_shape = 1:4:4\n[conv]\ntype = conv2d\n"
                            "filters = 2\nkernel_size = 3,3\n[fc]\n"
                            "type = fully_connected\nunit = 3\n");
  write_file("bb_bad.ini", "[x]\nunit = 3\n");
  write_file("bb_cycle.ini", "[c]\nbackbone = backbone_cycle.ini\n");
  write_file("bb_wire.ini", "[conv]\ntype = conv2d\ninput_layers = "
                            "elsewhere\nfilters = 2\nkernel_size = 1,1\n");
  size_t n = sizeof bad_cases / sizeof bad_cases[0];
  assert_true(n >= 20);
  for (size_t i = 0; i < n; i++) {
    const bad_case *b = &bad_cases[i];
    const char *path =
        b->text ? write_file(b->name, b->text) : tmp_path(b->name);
    nto_config c;
    nto_err err = {0};
    int rc = nto_config_load(&c, path, &err);
    if (rc != b->code || err.code != b->code)
      fail_msg("%s: rc %d (err.code %d), want %d: %s", b->name, rc, err.code,
               b->code, err.msg);
    if (!strstr(err.msg, b->name))
      fail_msg("%s: file name missing from '%s'", b->name, err.msg);
    for (int k = 0; k < 3 && b->want[k]; k++)
      if (!strstr(err.msg, b->want[k]))
        fail_msg("%s: '%s' missing from '%s'", b->name, b->want[k], err.msg);
    if (strchr(err.msg, '\n'))
      fail_msg("%s: message is not one line: '%s'", b->name, err.msg);
    assert_null(c.layers);
    assert_int_equal(c.n_layers, 0);
    nto_config_free(&c);
  }
}

/* A directory or a FIFO as the config; a NULL err. */
static void test_directory_and_null_err(void **state) {
  (void)state;
  nto_config c;
  nto_err err = {0};
  assert_int_equal(mkdir(tmp_path("adir.ini"), 0700), 0);
  assert_int_equal(nto_config_load(&c, tmp_path("adir.ini"), &err), NTO_EIO);
  assert_non_null(strstr(err.msg, "adir.ini: cannot open"));
  /* A FIFO is refused at once (opening it for reading would wait for a
   * writer): the alarm ends a load that blocks. */
  assert_int_equal(mkfifo(tmp_path("fifo.ini"), 0600), 0);
  alarm(20);
  assert_int_equal(nto_config_load(&c, tmp_path("fifo.ini"), &err), NTO_EIO);
  alarm(0);
  assert_non_null(
      strstr(err.msg, "fifo.ini: cannot open: not a regular file (a FIFO)"));
  /* err may be NULL; the code is still returned and nothing leaks. */
  assert_int_equal(
      nto_config_load(&c, write_file("null_err.ini", "[Model]\nepochs=x\n"),
                      NULL),
      NTO_ECONFIG);
  assert_int_equal(
      nto_config_load(&c, write_file("null_err2.ini", "[Model]\n[x]\nk=1\n"),
                      NULL),
      NTO_ECONFIG);
  /* A failed load followed by a good one: no state carried over. */
  assert_int_equal(nto_config_load(&c, tmp_path("syntax_noeq.ini"), &err),
                   NTO_ECONFIG);
  assert_int_equal(nto_config_load(&c, tmp_path("mnist.ini"), &err), 0);
  assert_int_equal(c.n_layers, 5);
  nto_config_free(&c);
}

/* ---------------------------------------------------------------------- */
/* nto_parse_size                                                          */

static void test_parse_size(void **state) {
  (void)state;
  static const struct {
    const char *in;
    size_t want;
  } good[] = {
      {"4096", 4096},
      {"1", 1},
      {"512K", 512u << 10},
      {"64M", (size_t)64 << 20},
      {"64m", (size_t)64 << 20},
      {"64MiB", (size_t)64 << 20},
      {"64MB", (size_t)64 << 20},
      {"1.5G", (size_t)3 << 29},
      {" 2k ", 2048},
      {"2 GiB", (size_t)2 << 30},
      {"1T", (size_t)1 << 40},
      {"100B", 100},
  };
  for (size_t i = 0; i < sizeof good / sizeof good[0]; i++) {
    size_t got = 0;
    nto_err err = {0};
    if (nto_parse_size(good[i].in, &got, &err) != 0 || got != good[i].want)
      fail_msg("'%s': got %zu, want %zu (%s)", good[i].in, got, good[i].want,
               err.msg);
  }
  static const char *const bad[] = {
      "",       "0",   "-1",     "abc",   "64X",
      "0x10",   "inf", "nan",    "1.5.2", "64MiBB",
      "0.0001", "M",   "64 M B", "1e3",   "99999999999T",
  };
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
    size_t got = 7;
    nto_err err = {0};
    char want[128];
    snprintf(want, sizeof want, "expected a size like 64M, got '%s'", bad[i]);
    int rc = nto_parse_size(bad[i], &got, &err);
    if (rc != NTO_ECONFIG || err.code != NTO_ECONFIG ||
        strcmp(err.msg, want) != 0 || got != 7)
      fail_msg("'%s': rc %d, msg '%s'", bad[i], rc, err.msg);
  }
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_model_every_key),
      cmocka_unit_test(test_fsu_aliases),
      cmocka_unit_test(test_mnist_like),
      cmocka_unit_test(test_resnet_like),
      cmocka_unit_test(test_defaults),
      cmocka_unit_test(test_lr_precedence),
      cmocka_unit_test(test_schedulers),
      cmocka_unit_test(test_dataset_paths),
      cmocka_unit_test(test_model_optimizer),
      cmocka_unit_test(test_old_dataset),
      cmocka_unit_test(test_nntrainer_model_keys),
      cmocka_unit_test(test_old_layer_types),
      cmocka_unit_test(test_relative_paths),
      cmocka_unit_test(test_iniparser_rules),
      cmocka_unit_test(test_malformed),
      cmocka_unit_test(test_backbone),
      cmocka_unit_test(test_directory_and_null_err),
      cmocka_unit_test(test_parse_size),
  };
  return cmocka_run_group_tests(tests, setup_dir, teardown_dir);
}
