/*
 * dataset-impl.h - inside a dataset (dataset.h): the common part
 * (io/dataset.c: shuffle buffer, batching, limit, rewind, tell/seek,
 * description) and the ops table of a data source, one file per source
 * kind: io/idx.c (Fashion-MNIST / MNIST IDX, gzip through zlib), io/raw.c
 * (nntrainer's raw float32 files), io/synthetic.c. Private to those files.
 *
 * A source is one of two kinds of reader:
 *  - a stream (IDX): it reads sample ds->pos, the next one, into a slot of
 *    slot_bytes bytes (fetch), and adapts a slot to a batch row (adapt);
 *  - random access (raw, synthetic): it produces any sample i (sample);
 *    a slot holds the sample's index (8 bytes).
 * Threads: as dataset.h, one thread at a time.
 */
#ifndef NTO_DATASET_IMPL_H
#define NTO_DATASET_IMPL_H

#include "dataset.h"

#include "rng.h"

typedef struct nto_dataset_ops {
  /* The source kind's number in nto_dataset_pos.source: IDX 0, raw 1,
   * synthetic 2. Checkpoints hold it: never renumber. */
  uint64_t kind; /* image folders 3 */
  /* Random access: sample i (< ds->count) into x (c*h*w floats, NCHW)
   * and y (num_classes floats, one-hot). Returns 0 or a read error (NTO_EIO
   * / NTO_EDATA naming the file and offset). NULL for a stream. */
  int (*sample)(const nto_dataset *ds, uint64_t i, float *x, float *y,
                nto_err *err);
  /* A stream: bytes of one slot; sample ds->pos read into slot s (pos is
   * advanced by the caller; errors as sample); slot s adapted into x, y.
   * NULL for random access. */
  size_t (*slot_bytes)(const nto_dataset *ds);
  int (*fetch)(nto_dataset *ds, unsigned char *s, nto_err *err);
  void (*adapt)(const nto_dataset *ds, const unsigned char *s, float *x,
                float *y);
  /* Every sample's label, in source order, into out[0..count) without
   * reading the samples (nto_dataset_keep_classes); for a stream, the next
   * rewind starts it again. Returns 0 or a read error. NULL: random
   * access only, the labels then come from sample. */
  int (*labels)(nto_dataset *ds, int32_t *out, nto_err *err);
  /* The name of source class c, or NULL; NULL: the source has none. */
  const char *(*class_name)(const nto_dataset *ds, int c);
  /* Back to the first sample for a new epoch; NULL: nothing to do.
   * Returns 0 or an error naming the file. */
  int (*rewind)(nto_dataset *ds, nto_err *err);
  /* The one-line description into buf (len bytes); count is "N samples"
   * or "N of M samples" (nto_dataset_limit). */
  void (*describe)(const nto_dataset *ds, const char *count, char *buf,
                   size_t len);
  /* Release what the source's state ds->src holds (files) and free it;
   * NULL: src is one allocation, freed with free(). */
  void (*close)(void *src);
} nto_dataset_ops;

extern const nto_dataset_ops nto_dataset_idx_ops;
extern const nto_dataset_ops nto_dataset_raw_ops;
extern const nto_dataset_ops nto_dataset_synthetic_ops;
extern const nto_dataset_ops nto_dataset_image_dir_ops;

struct nto_dataset {
  const nto_dataset_ops *ops;
  void *src;        /* the source's own state, freed by ops->close */
  nto_shape sample; /* model input shape; n unused */
  int num_classes;  /* label width of the source (what the ops write) */
  int out_classes;  /* label width of the batches: num_classes, or the
                       classes kept (nto_dataset_keep_classes) */
  size_t feat;            /* c*h*w floats per sample */
  size_t count;           /* samples in the source */
  uint64_t id[2];         /* what else fixes the samples, for the position's
                             source hash: {synthetic seed, IDX rows << 32 | cols},
                             0 where it does not apply */
  size_t limit;           /* 0: all */
  size_t pos;             /* source samples consumed in this epoch */
  size_t drawn;           /* samples drawn this epoch (of the kept ones) */

  /* classes kept (nto_dataset_keep_classes); kept NULL: every sample */
  uint32_t *kept;   /* source indices of the kept samples, ascending */
  size_t n_kept;
  int *remap;       /* (num_classes): source label -> batch label, -1 */
  int *keep;        /* (out_classes): batch label -> source label */
  float *ysrc;      /* (num_classes): one label as the source writes it */
  uint64_t classes_hash; /* of the kept list, for the source hash */
  char classes_desc[96]; /* e.g. "classes 5,6,7,8,9 as 0-4" */
  int started;            /* an epoch has been started by a rewind */
  unsigned char *scratch; /* one slot: reads in file order, skips */

  /* shuffle */
  size_t shuf_req;    /* requested buffer size, applied at rewind */
  uint64_t shuf_seed; /* requested seed */
  uint64_t epoch;     /* rewinds since the last nto_dataset_shuffle() */
  size_t cap;         /* active buffer size this epoch (<= 1: none) */
  nto_rng rng;
  unsigned char *buf; /* (buf_alloc, slot bytes) */
  size_t buf_alloc;   /* slots allocated */
  size_t fill;        /* occupied slots */
  int primed;         /* buffer filled for this epoch */
  size_t taken;       /* samples handed out (or skipped) this epoch */

  char desc[400];
};

/*
 * Start an opener: a new dataset reading through ops, for samples of
 * shape sample (c, h, w >= 1) and num_classes >= 1 classes, into *out
 * (src NULL, count 0). Returns 0; NTO_EINVAL ("dataset: NULL output
 * pointer", "dataset: invalid input shape CxHxW", "dataset: invalid
 * num_classes N") or NTO_ENOMEM with *out NULL (when out is not NULL).
 */
int nto_dataset_new(nto_dataset **out, const nto_dataset_ops *ops,
                    nto_shape sample, int num_classes, nto_err *err);

/*
 * End an opener begun with nto_dataset_new. rc 0: the opener set src,
 * count and id; allocate the scratch slot and build the description. On
 * rc != 0, or if that fails (NTO_ENOMEM), close *out and set it to NULL.
 * Returns 0 or the error.
 */
int nto_dataset_finish(nto_dataset **out, int rc, nto_err *err);

/* The last component of path (trailing slashes ignored) into buf. */
void nto_dataset_base_name(const char *path, char *buf, size_t len);

#endif /* NTO_DATASET_IMPL_H */
