/*
 * test_train.c - one real training run on a Fashion-MNIST subset lowers the
 * loss, and batch-norm evaluation mode works after training.
 * Skipped (exit 77 via cmocka skip) where Debian's dataset-fashion-mnist is
 * not installed.
 */
#include "config.h"
#include "dataset.h"
#include "model.h"

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

#include <cmocka.h>

#define FMNIST "/usr/share/datasets/fashion-mnist"

static void test_loss_decreases(void **state) {
  (void)state;
  if (access(FMNIST "/train-images-idx3-ubyte.gz", R_OK) != 0) {
    fprintf(stderr, "skipped: %s not installed (apt-get install "
                    "dataset-fashion-mnist)\n", FMNIST);
    skip();
  }
  nto_config c;
  nto_err err = {0};
  nto_model *m = NULL;
  nto_dataset *ds = NULL;
  assert_int_equal(nto_config_load(&c, "test/data/nets/fmnist_small.ini",
                                   &err), 0);
  nto_model_opts o = {.seed = 3};
  if (nto_model_create(&m, &c, &o, &err) != 0)
    fail_msg("%s", err.msg);
  nto_shape in = nto_model_input_shape(m);
  int n = nto_model_batch(m), k = nto_model_output_size(m);
  if (nto_dataset_open_idx_dir(&ds, FMNIST, "train", in, k, &err) != 0)
    fail_msg("%s", err.msg);
  nto_dataset_limit(ds, 3200);
  nto_dataset_shuffle(ds, 1024, 5);
  float *x = malloc(sizeof(float) * n * nto_shape_sample(in));
  float *y = malloc(sizeof(float) * n * k);
  double first = 0, last = 0;
  int steps = 0, got = 0;
  assert_int_equal(nto_dataset_rewind(ds, &err), 0);
  while (nto_dataset_next(ds, x, y, n, &got, &err) == 0 && got == n) {
    nto_step_stats st;
    assert_int_equal(nto_model_train_step(m, x, y, &st, &err), 0);
    if (steps < 10)
      first += st.loss / 10;
    if (steps >= 90)
      last += st.loss / 10;
    steps++;
  }
  assert_int_equal(steps, 100);
  fprintf(stderr, "mean loss: first 10 iterations %.4f, last 10 %.4f\n",
          first, last);
  assert_true(last < 0.75 * first);
  /* Evaluation mode (running statistics) classifies well above chance. */
  nto_step_stats st;
  assert_int_equal(nto_dataset_rewind(ds, &err), 0);
  assert_int_equal(nto_dataset_next(ds, x, y, n, &got, &err), 0);
  assert_int_equal(nto_model_eval_step(m, x, y, got, &st, &err), 0);
  assert_true(st.correct > n / 2);
  free(x);
  free(y);
  nto_dataset_close(ds);
  nto_model_free(m);
  nto_config_free(&c);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_loss_decreases),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
