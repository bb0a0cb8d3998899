/*
 * checkpoint.h - training checkpoints: everything needed to continue a run
 * bit for bit (`train --checkpoint FILE` / `--resume FILE`).
 *
 * A checkpoint holds a training state the caller describes (nto_ckpt_state:
 * the model side has it as nto_model_state_tensors, nto_model_get_train_state,
 * nto_model_optimizer_name, nto_model_update_chunk and nto_model_batch;
 * this module knows no model): every persistent tensor (weights,
 * batch-norm running statistics, optimizer state), the update count and
 * the generator, plus the data position of the training set
 * (nto_dataset_tell), and named 64-bit values of the caller's (e.g. the
 * training loop's counters).
 *
 * File format (version 1; integers little-endian, floats IEEE binary32
 * little-endian):
 *   header   "NTO-CKPT", u32 version, u32 tensor count, u32 value count,
 *            u32 model path length, u64 fingerprint, u64 update chunk
 *            (bytes), char optimizer[16] (NUL-padded), the model path
 *            (informative only), u32 CRC-32 of the header
 *   tensors  per tensor: u32 name length, name, u32 ndim (4), u32 dims[4]
 *            (n, c, h, w), u64 element count, the float32 data, u32 CRC-32
 *            of the record
 *   values   per value: char name[32] (NUL-padded), u64 value; then u32
 *            CRC-32 of the section
 *   trailer  "NTO-END\n", u64 file size, u32 CRC-32 (zlib) of every byte
 *            before it
 * The fingerprint is a 64-bit FNV-1a hash of the optimizer name, the update
 * chunk and every tensor's name and shape: what fixes the tensors a model
 * has. The library's own values are "model.iteration", "model.rng0/1",
 * "model.batch" and "data.*" (nto_dataset_pos); the caller's must not
 * start with "model." or "data.".
 *
 * Writing is atomic: FILE.tmp.<pid> in the same directory, fsync, rename
 * over FILE, fsync of the directory; a crash at any point leaves the old
 * or the new checkpoint, never a torn one (at worst a stale
 * FILE.tmp.<pid>, which nto_file_remove_stale of io/fileio.h removes once
 * its process is gone). A symbolic link at FILE is written through; a
 * FILE that is not a regular file is refused (NTO_EIO). Tensors of an
 * offloading model are fetched from the swap file one at a time into a
 * bounce buffer of that tensor's size, so the state never needs to be in
 * RAM at once; loading stores them back the same way. Executor thread,
 * between training steps.
 */
#ifndef NTO_CHECKPOINT_H
#define NTO_CHECKPOINT_H

#include "dataset.h"
#include "error.h"
#include "weights.h"

#include <stdint.h>

#define NTO_CKPT_FORMAT_VERSION 1
#define NTO_CKPT_VALUE_NAME 32 /* bytes of a value's name, NUL included */

/* A named 64-bit value (signed numbers are stored as their two's
 * complement, doubles as their bit pattern). */
typedef struct nto_ckpt_value {
  char name[NTO_CKPT_VALUE_NAME];
  uint64_t v;
} nto_ckpt_value;

/*
 * The training state a checkpoint holds. Everything it points to is owned
 * by the caller and must stay valid during a save or load.
 */
typedef struct nto_ckpt_state {
  /* Every persistent tensor, n_tensors of them, in a fixed order (a
   * reordering is "another model"); each with data in RAM, or, data NULL,
   * reached through fetch (save) or store (load) as in weights.h: called
   * on the caller's thread, one tensor at a time, through a bounce buffer
   * of that tensor's size. Shapes are stored as 4 dims, ndim < 4 padded
   * with leading 1s. */
  const nto_named_tensor *tensors;
  int n_tensors;
  const char *optimizer; /* "sgd", "adam", "adamw": at most 15 bytes */
  size_t update_chunk;   /* bytes; fixes how optimizer state is split */
  int batch;             /* samples per training step */
  long iteration;        /* optimizer updates done: written by a save,
                            restored by a load */
  uint64_t rng[2];       /* the model's generator: likewise */
} nto_ckpt_state;

/*
 * Write state s (and the position of data, when not NULL) with the
 * caller's values vals[0..n_vals) to path, atomically. model_path (may be
 * NULL) is recorded for messages only. Returns 0, NTO_EINVAL (bad
 * arguments, a bad value name), NTO_ENOMEM, NTO_EIO naming the path, or
 * the error of a tensor's fetch (e.g. a swap read; its message prefixed
 * with the path and tensor); on any error path is untouched and the temp
 * file removed. Executor thread, between training steps.
 */
int nto_checkpoint_save(const char *path, const char *model_path,
                        const nto_ckpt_state *s, const nto_dataset *data,
                        const nto_ckpt_value *vals, int n_vals, nto_err *err);

/*
 * Read path, check it whole, check that it was written for a state like
 * s (the same tensor names and shapes in the same order, optimizer, update
 * chunk and batch size: a model built from the same config, any window,
 * any I/O backend), then restore it: each tensor's values into its data
 * or through its store, and data's position (when data is not NULL:
 * opened, limited and shuffled as when it was written; positioned as
 * then). On success s->iteration and s->rng hold the file's update count
 * and generator, for the caller to apply (nto_model_set_train_state), and
 * the caller's values are copied to vals[0..max_vals) and counted in
 * *n_vals (may be NULL).
 * Returns 0;
 *  NTO_EINVAL: bad arguments;
 *  NTO_EIO: the file cannot be opened or read (names it);
 *  NTO_EDATA: not a checkpoint, corrupt or truncated (names the file and
 *    the byte offset, and the tensor whose record fails its checksum);
 *  NTO_ECONFIG: written for another model ("checkpoint F was written for a
 *    different model: tensor b4:filter has shape 512:512:3:3 here,
 *    256:256:3:3 in the file"), another optimizer or update chunk, another
 *    batch size, or the training data differs;
 *  NTO_ENOMEM, or a tensor's store error (e.g. a swap write).
 * Nothing is changed (tensors, data, s) unless the whole file checked out
 * and matched. Executor thread, between training steps.
 */
int nto_checkpoint_load(const char *path, nto_ckpt_state *s, nto_dataset *data,
                        nto_ckpt_value *vals, int max_vals, int *n_vals,
                        nto_err *err);

/* The value called name among v[0..n), or def. */
uint64_t nto_ckpt_get(const nto_ckpt_value *v, int n, const char *name,
                      uint64_t def);

/* Set v's name (truncated to fit) and value. */
void nto_ckpt_set(nto_ckpt_value *v, const char *name, uint64_t value);

#endif /* NTO_CHECKPOINT_H */
