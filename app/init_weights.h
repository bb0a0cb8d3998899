/*
 * init_weights.h - `train --init-weights FILE`: start from weights of a
 * file (fine-tuning), loaded before the first iteration. Main thread only.
 */
#ifndef NTO_APP_INIT_WEIGHTS_H
#define NTO_APP_INIT_WEIGHTS_H

#include "model.h"

#include <stddef.h>

/* What was loaded. */
typedef struct init_result {
  const char *format;    /* "safetensors" or "nntrainer .bin" */
  size_t params;         /* parameters loaded (running statistics not
                            counted) */
  int tensors, of;       /* tensors loaded, of the model's */
  int unused;            /* tensors of the file the model has no use for */
  char kept[512];        /* the model's tensors that kept their
                            initialization, with both shapes; "" if none */
} init_result;

/*
 * Load path into m's weights (io/weights.h nto_weights_load_init: by name
 * and shape from safetensors, whole from nntrainer .bin) and describe it
 * in *res. Returns 0, or a negative code with err naming the file and the
 * tensor (nothing matching, a truncated or malformed file, a dtype other
 * than F32, a .bin of another size); on those errors no weight changed.
 */
int init_weights_load(nto_model *m, const char *path, init_result *res,
                      nto_err *err);

/* Prints "init: P parameters (T of N tensors) from PATH (format)" and
 * the tensors that kept their initialization. Stdout. */
void init_weights_print(const init_result *res, const char *path);

#endif
