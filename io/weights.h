/*
 * weights.h - weight files: nntrainer's binary layout and safetensors.
 *
 * nntrainer .bin: the float32 values of every weight of every layer, in
 * layer order and, per layer, in the layer's weight order (conv2d: filter,
 * bias; batch_normalization: moving_mean, moving_variance, gamma, beta;
 * fully_connected: weight (in, unit), bias), raw native-endian, no header.
 *
 * safetensors (https://huggingface.co/docs/safetensors): 8-byte little-endian
 * header length, a JSON header {"name": {"dtype":"F32","shape":[...],
 * "data_offsets":[begin,end]}, "__metadata__": {...}}, then the data.
 *
 * Files are written atomically: "<path>.tmp.<pid>", fsync, rename, fsync of
 * the directory. Callers run these on the thread that owns the model.
 */
#ifndef NTO_WEIGHTS_H
#define NTO_WEIGHTS_H

#include "error.h"

#include <stddef.h>

/* One named tensor to save or load. data is owned by the caller. */
typedef struct nto_named_tensor {
  const char *name; /* e.g. "conv1.weight" */
  int ndim;         /* 1..4 */
  int dims[4];      /* outermost first */
  float *data;      /* product(dims) floats */
} nto_named_tensor;

/* Number of elements of t. */
size_t nto_named_numel(const nto_named_tensor *t);

/* Write the nntrainer .bin file. Returns 0 or NTO_EIO naming the path. */
int nto_weights_save_bin(const char *path, const nto_named_tensor *ts, int n,
                         nto_err *err);

/*
 * Read an nntrainer .bin file into ts[0..n) (data preallocated). The file
 * size must equal the sum of sizes exactly: NTO_EDATA otherwise, naming the
 * file, the expected and the actual size.
 */
int nto_weights_load_bin(const char *path, nto_named_tensor *ts, int n,
                         nto_err *err);

/*
 * Write safetensors. meta: NULL or NULL-terminated key/value pairs
 * {"k1","v1","k2","v2",NULL} put into "__metadata__".
 */
int nto_safetensors_save(const char *path, const nto_named_tensor *ts, int n,
                         const char *const *meta, nto_err *err);

/*
 * Read the tensors named in ts[0..n) from a safetensors file (F32 only),
 * checking each shape. Missing name or shape mismatch: NTO_EDATA.
 */
int nto_safetensors_load(const char *path, nto_named_tensor *ts, int n,
                         nto_err *err);

#endif /* NTO_WEIGHTS_H */
