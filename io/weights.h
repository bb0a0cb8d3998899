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
#include <stdint.h>

/*
 * One named tensor to save or load. Everything it points to is owned by the
 * caller. Its values are either in RAM (data) or reached through callbacks
 * (data NULL: fetch when saving, store when loading), e.g. for a tensor
 * swapped out to disk. Zero-initialize the struct (or use designated
 * initializers) so that unused callbacks are NULL.
 */
typedef struct nto_named_tensor {
  const char *name;     /* e.g. "conv1.weight" */
  const char *alt_name; /* NULL, or the name nto_weights_load_init tries
                           when a file has no tensor named name: a
                           backbone layer's tensor under its name in the
                           backbone's own weights ("conv1.weight" for
                           "baseconv1.weight") */
  int ndim;         /* 1..4 */
  int dims[4];      /* outermost first */
  float *data;      /* product(dims) floats, or NULL */
  /* When data is NULL, values move through these instead (e.g. a tensor
   * swapped out to disk): fetch copies the tensor's values into dst
   * (product(dims) floats), store copies src into the tensor. They return 0
   * or a negative nto_status and fill err. ctx/index are passed through.
   * They are called on the caller's thread, at most once per tensor per
   * save or load, never for a tensor of 0 elements; dst/src are bounce
   * buffers owned by the library, valid only during the call. */
  int (*fetch)(void *ctx, int index, float *dst, nto_err *err);
  int (*store)(void *ctx, int index, const float *src, nto_err *err);
  void *ctx;
  int index;
  int param; /* 1: a parameter (an optimizer updates it), 0: e.g. running
                statistics; sizes nntrainer's training-mode .bin trailer */
} nto_named_tensor;

/* Number of elements of t. */
size_t nto_named_numel(const nto_named_tensor *t);

/*
 * Write the nntrainer .bin file. A tensor with data NULL (and elements)
 * must have fetch; its values are fetched into a malloc'ed bounce buffer of
 * its size (one tensor at a time, freed after) and written from there.
 * Returns 0, NTO_EINVAL (bad tensor description, NULL data without fetch),
 * NTO_ENOMEM (bounce buffer), NTO_EIO naming the path, or the negative code
 * a fetch returned (its message prefixed with the path and tensor name).
 * On any error the temp file is removed and <path> is untouched.
 */
int nto_weights_save_bin(const char *path, const nto_named_tensor *ts, int n,
                         nto_err *err);

/*
 * Read an nntrainer .bin file into ts[0..n): into data (preallocated), or,
 * when data is NULL, into a malloc'ed bounce buffer (one tensor at a time)
 * handed to store. The file size must equal the sum of sizes, or that
 * plus what nntrainer appends in training mode (filler '1' bytes to a
 * 4096-byte boundary, "adam" and two moments of every tensor with param
 * set, the epoch and iteration counters; each optional), which is
 * skipped: NTO_EDATA otherwise, naming the file, the expected and the
 * actual size.
 * Returns 0, NTO_EINVAL (NULL data without store), NTO_ENOMEM, NTO_EIO,
 * NTO_EDATA, or the negative code a store returned (message prefixed with
 * the path and tensor name). On error the tensors before the failing one
 * may already hold the file's values.
 */
int nto_weights_load_bin(const char *path, nto_named_tensor *ts, int n,
                         nto_err *err);

/*
 * Write safetensors. meta: NULL or NULL-terminated key/value pairs
 * {"k1","v1","k2","v2",NULL} put into "__metadata__". Tensors with data
 * NULL are fetched as in nto_weights_save_bin; same return codes, plus
 * NTO_EINVAL for reserved, duplicate or non-UTF-8 names.
 */
int nto_safetensors_save(const char *path, const nto_named_tensor *ts, int n,
                         const char *const *meta, nto_err *err);

/*
 * Read the tensors named in ts[0..n) from a safetensors file (F32 only),
 * checking each shape. Missing name or shape mismatch: NTO_EDATA, before
 * any tensor is written or stored. Tensors with data NULL are stored as in
 * nto_weights_load_bin; same return codes.
 */
int nto_safetensors_load(const char *path, nto_named_tensor *ts, int n,
                         nto_err *err);

/* How nto_weights_load_init found one tensor. */
typedef enum {
  NTO_MATCH_LOADED, /* loaded from the file */
  NTO_MATCH_ABSENT, /* the file has no tensor of that name */
  NTO_MATCH_SHAPE,  /* the file's tensor of that name has another shape */
} nto_match_status;

typedef struct nto_weight_match {
  nto_match_status status;
  int ndim;        /* NTO_MATCH_SHAPE: the file's rank */
  int64_t dims[4]; /* and its dims, outermost first (the first 4) */
} nto_weight_match;

typedef enum {
  NTO_WEIGHTS_SAFETENSORS,
  NTO_WEIGHTS_BIN, /* nntrainer .bin */
} nto_weights_format;

/*
 * Initial weights (fine-tuning): load into ts[0..n) what the file at path
 * holds for them, its format found from its first bytes (safetensors: an
 * 8-byte little-endian header length, then '{'; anything else is read as
 * nntrainer .bin).
 *  - safetensors, by name: every ts[i] whose name (else alt_name) the
 *    file has with the same shape is loaded; the others keep their values. match[i] says
 *    which (n entries, caller-owned); *unused counts the file's tensors
 *    that no ts[i] names.
 *  - nntrainer .bin has no names: the file loads whole, in ts order, when
 *    its size is exactly the sum of the tensors' sizes; *unused = 0.
 * Returns 0; NTO_EDATA naming path (and the tensor) when no tensor matches,
 * a tensor of ts's names has a dtype other than F32, the file is truncated
 * or malformed, or a .bin file has another size; the codes of
 * nto_safetensors_load otherwise. Every check runs before any tensor is
 * written or stored: on these errors ts keep their values. Caller's
 * thread, as the other loaders.
 */
int nto_weights_load_init(const char *path, nto_named_tensor *ts, int n,
                          nto_weight_match *match, nto_weights_format *format,
                          int *unused, nto_err *err);

/* The format of the weights file at path, found as nto_weights_load_init
 * finds it. Returns 0, NTO_EIO (cannot open) or a read error. */
int nto_weights_file_format(const char *path, nto_weights_format *format,
                            nto_err *err);

/*
 * The "__metadata__" value of key in the weights file at path (e.g.
 * "class_names", written by train) into *value, malloc'ed (the caller
 * frees it); NULL when the file has no such key or is an nntrainer .bin
 * (which has no metadata). Returns 0, NTO_EIO (cannot open), NTO_EDATA
 * (a malformed safetensors header, naming the file and byte), NTO_ENOMEM.
 */
int nto_weights_metadata(const char *path, const char *key, char **value,
                         nto_err *err);

#endif /* NTO_WEIGHTS_H */
