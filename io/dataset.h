/*
 * dataset.h - streaming training data readers (io/dataset.c; one file per
 * source: io/idx.c, io/raw.c, io/synthetic.c).
 *
 * Sources: Fashion-MNIST / MNIST IDX files (gzip, read with zlib), nntrainer
 * raw files (per sample: feature_len float32 values then num_classes float32
 * one-hot label values, native endianness), and synthetic data (fixed seed).
 * Batches are streamed: at most a shuffle buffer of samples is held in RAM,
 * never the whole set.
 *
 * Samples are adapted to the model's input shape (c, h, w): IDX images
 * (1, rows, cols) are scaled to [0, 1], zero-padded centred to (h, w) when
 * larger, and the channel replicated to c. nto_dataset_describe() says
 * what was done, for the user.
 *
 * A dataset is used by one thread at a time.
 */
#ifndef NTO_DATASET_H
#define NTO_DATASET_H

#include "error.h"
#include "image.h"
#include "tensor.h"

#include <stddef.h>
#include <stdint.h>

typedef struct nto_dataset nto_dataset;

/*
 * Open an IDX pair (images idx3, labels idx1; gzip or plain, detected).
 * sample: the model input shape (n ignored); num_classes: label width.
 * Errors: NTO_EIO (cannot open, names the file), NTO_EDATA (wrong magic,
 * truncated, label >= num_classes; names the file and byte offset),
 * NTO_ESHAPE (image larger than the input shape).
 */
int nto_dataset_open_idx(nto_dataset **out, const char *images,
                         const char *labels, nto_shape sample, int num_classes,
                         nto_err *err);

/*
 * Open the training ("train") or test ("t10k") split of an IDX directory
 * (e.g. /usr/share/datasets/fashion-mnist), files named
 * <split>-images-idx3-ubyte[.gz] and <split>-labels-idx1-ubyte[.gz].
 */
int nto_dataset_open_idx_dir(nto_dataset **out, const char *dir,
                             const char *split, nto_shape sample,
                             int num_classes, nto_err *err);

/*
 * Open an nntrainer raw data file. Its size must be a multiple of
 * (c*h*w + num_classes) * 4 bytes, else NTO_EDATA naming the file and size.
 */
int nto_dataset_open_raw(nto_dataset **out, const char *path, nto_shape sample,
                         int num_classes, nto_err *err);

/* Image folders (nto_dataset_open_image_dir). */
typedef struct nto_image_dir_opts {
  const char *split;  /* "train" or "test" */
  double valid_split; /* a folder of class folders (no train/ and test/):
                         the fraction of each class's images (evenly
                         spaced in name order) that form the test split;
                         0: all train, no test split */
  nto_image_norm norm; /* per-channel mean/std (image.h), n = 0: none */
  int skip_bad;       /* files stb_image cannot read at open: skipped and
                         counted instead of an error */
} nto_image_dir_opts;

/*
 * Open the split of an image folder: DIR/train/CLASS/FILE and
 * DIR/test/CLASS/FILE, or DIR/CLASS/FILE split by o->valid_split. Classes are
 * the class folders in byte order of their names (a class folder with no
 * image keeps its label and is named in the description); image files by
 * extension (png, jpg, jpeg, bmp, gif, tga, pnm, ppm, pgm, any case);
 * other files and hidden ones are ignored and counted. Every file's header
 * is read at open (an unreadable one is an error naming it, or skipped with
 * skip_bad); a sample is decoded, resized and normalized when drawn
 * (image.h nto_image_load; a corrupt body is then an NTO_EDATA naming the
 * file). num_classes: the model's, which must equal the class folders, or
 * 0 to take theirs (nto_dataset_classes). *out is NULL when the split does
 * not exist (the test split of a flat folder without valid_split).
 * Returns 0, NTO_EIO (a folder cannot be read), NTO_EDATA (no class
 * folder, no image, an unreadable image), NTO_ECONFIG (class count, a
 * valid split with train/ and test/), NTO_EINVAL, NTO_ENOMEM.
 */
int nto_dataset_open_image_dir(nto_dataset **out, const char *dir,
                               const nto_image_dir_opts *o, nto_shape sample,
                               int num_classes, nto_err *err);

/*
 * Synthetic data: num_samples samples, deterministic for seed. Inputs are
 * N(0,1)-ish; the label of a sample is a fixed function of its input so that
 * a model can learn it.
 */
int nto_dataset_open_synthetic(nto_dataset **out, size_t num_samples,
                               nto_shape sample, int num_classes, uint64_t seed,
                               nto_err *err);

/*
 * Keep only the samples whose label is one of classes[0..n) (labels of
 * the source, each in [0, the num_classes it was opened with), without
 * repeats), in source order; class classes[j] becomes label j, so batches
 * carry n label values per sample (y rows of n floats). The labels are
 * scanned once here (IDX: the labels file only; raw and synthetic: every
 * sample). Call once, before the first rewind or next; a limit then counts
 * kept samples. Memory: 4 bytes per kept sample.
 * Returns 0; NTO_EINVAL (n < 1, a class out of range or repeated: names
 * it), NTO_EDATA (no sample of these classes), NTO_ENOMEM, or a read error.
 */
int nto_dataset_keep_classes(nto_dataset *ds, const int *classes, int n,
                             nto_err *err);

/* Label width of the batches: the source's, or the classes kept. */
int nto_dataset_classes(const nto_dataset *ds);

/* The name of batch label c (an image folder's class folder), or NULL
 * when the source has no names. Owned by ds. */
const char *nto_dataset_class_name(const nto_dataset *ds, int c);

/* Number of samples one epoch yields (after nto_dataset_limit). */
size_t nto_dataset_size(const nto_dataset *ds);

/* Use only the first n samples of the source (n = 0: all). */
void nto_dataset_limit(nto_dataset *ds, size_t n);

/*
 * Shuffle with a buffer of buffer_samples samples (0 or 1: no shuffle),
 * seeded with seed; deterministic. Takes effect at the next rewind, which
 * allocates the buffer (min(buffer_samples, nto_dataset_size) slots; it
 * fails with NTO_ENOMEM if it cannot). Memory per slot: IDX sources keep
 * the raw image and label, rows*cols + 1 bytes (785 for 28x28), and adapt
 * a sample when it is copied into a batch; raw and synthetic sources keep
 * the sample's index (8 bytes) and read it back with pread (raw) or
 * generate it again (synthetic) when it is copied into a batch.
 */
void nto_dataset_shuffle(nto_dataset *ds, size_t buffer_samples, uint64_t seed);

/* Start a new epoch (first call optional). Returns 0 or an error. */
int nto_dataset_rewind(nto_dataset *ds, nto_err *err);

/*
 * Read up to batch samples of the current epoch into x (batch * c*h*w
 * floats, NCHW) and y (batch * num_classes floats, one-hot). *got is the
 * number of samples written (0 at end of epoch); rows past *got are zeroed.
 * Returns 0 or an error (NTO_EIO / NTO_EDATA with file and offset).
 */
int nto_dataset_next(nto_dataset *ds, float *x, float *y, int batch, int *got,
                     nto_err *err);

/*
 * Data position, for checkpoints: where the current epoch stands, exactly.
 * The order of an epoch is a function of (shuffle seed, epoch) and of how
 * many samples were taken (dataset.c, DESIGN), so the position is the
 * epoch count and the samples taken; seeking rewinds to that epoch and
 * takes that many samples again without writing them (the shuffle
 * generator draws the same numbers, the buffer is refilled from the same
 * stream), which costs reading them but no more RAM than the shuffle
 * buffer. The other fields check that the dataset is the same one.
 */
typedef struct nto_dataset_pos {
  uint64_t epoch;   /* rewinds since nto_dataset_shuffle (or open); 0: no
                       epoch started */
  uint64_t taken;   /* samples returned by nto_dataset_next this epoch */
  uint64_t rng[2];  /* the shuffle generator after them (checked) */
  uint64_t size;    /* samples per epoch (checked) */
  uint64_t shuffle; /* shuffle buffer in use, 0: file order (checked) */
  uint64_t seed;    /* shuffle seed (checked when shuffling) */
  uint64_t source;  /* hash of the source's kind, sample count, shape,
                       classes and synthetic seed (checked) */
} nto_dataset_pos;

/* The current position (between nto_dataset_next calls). */
void nto_dataset_tell(const nto_dataset *ds, nto_dataset_pos *p);

/*
 * Continue from position p (taken by nto_dataset_tell on a dataset opened,
 * limited and shuffled the same way): the next nto_dataset_next returns
 * what it returned after the tell. Returns 0; NTO_ECONFIG when the dataset
 * differs (source, epoch size, shuffle buffer, seed: the message says
 * which); NTO_EDATA when the position cannot be reached; or a read error.
 */
int nto_dataset_seek(nto_dataset *ds, const nto_dataset_pos *p, nto_err *err);

/* One line describing the source and the adaptation, e.g.
 * "fashion-mnist train (60000 samples, 1x28x28 zero-padded to 32x32,
 *  channel replicated to 3)". Owned by ds. */
const char *nto_dataset_describe(const nto_dataset *ds);

void nto_dataset_close(nto_dataset *ds);

#endif /* NTO_DATASET_H */
