/*
 * tensor.h - shapes and swappable tensor descriptors.
 *
 * A tensor is a descriptor first (shape, role, byte size, swap offset,
 * residency) and bytes only while resident. Code must never keep a tensor's
 * data pointer across execution steps: the residency manager may move the
 * bytes out of RAM between steps. Layout is NCHW, dtype float32.
 */
#ifndef NTO_TENSOR_H
#define NTO_TENSOR_H

#include <stddef.h>
#include <stdint.h>

#define NTO_PAGE 4096u /* alignment and size granule of tensor buffers */

/* A 4-d NCHW shape. n is the batch dimension (1 for weights). */
typedef struct nto_shape {
  int n, c, h, w;
} nto_shape;

/* Number of elements n*c*h*w. */
size_t nto_shape_numel(nto_shape s);
/* Elements of one sample: c*h*w. */
size_t nto_shape_sample(nto_shape s);
/* 1 if all four dimensions are equal. */
int nto_shape_eq(nto_shape a, nto_shape b);
/* Writes "c:h:w" (or "n:c:h:w" when with_batch) into buf; returns buf. */
char *nto_shape_str(nto_shape s, int with_batch, char *buf, size_t len);

/* First index of the largest of x[0..k) (k >= 1): a row's predicted
 * class, or a one-hot label's class. Any thread. */
int nto_argmax(const float *x, int k);

/* Bytes rounded up to the page granule (4096); 0 stays 0. */
size_t nto_round_page(size_t bytes);

/* bytes in the binary unit that reads best, one decimal: "812.0 KiB",
 * "26.5 MiB", "1.2 GiB" (KiB below 1 MiB, up to EiB). Writes buf (32
 * bytes suffice) and returns it. Any thread. */
char *nto_format_bytes(uint64_t bytes, char *buf, size_t len);

/* What a tensor holds; decides whether it can be dropped, written, freed. */
typedef enum {
  NTO_ROLE_WEIGHT,     /* parameters and batch-norm running statistics */
  NTO_ROLE_OPT_STATE,  /* optimizer state: momentum, Adam m and v */
  NTO_ROLE_ACTIVATION, /* a layer output, or a tensor saved for backward */
  NTO_ROLE_GRAD,       /* dL/d(activation), one per graph edge */
  NTO_ROLE_PARAM_GRAD, /* dL/d(weight); transient within one backward step */
  NTO_ROLE_WORKSPACE,  /* scratch (im2col); transient, shared */
  NTO_ROLE_COUNT
} nto_role;

/* Where a tensor's bytes are. */
typedef enum {
  NTO_RES_NONE,     /* no content (not yet produced, or dead) */
  NTO_RES_RESIDENT, /* data points at valid bytes */
  NTO_RES_SWAPPED,  /* content lives only in the swap file */
} nto_res_state;

/* Descriptor of one tensor of the model. Owned by the model's tensor table. */
typedef struct nto_tensor {
  char name[96];   /* "<layer>:<what>", for messages */
  nto_shape shape; /* NCHW */
  nto_role role;
  size_t bytes;        /* numel * 4, rounded up to NTO_PAGE */
  int64_t swap_offset; /* byte offset in the swap file, -1 if none */
  nto_res_state state;
  float *data; /* valid only while state == NTO_RES_RESIDENT */
  int layer;   /* owning layer index, -1 for shared tensors */
} nto_tensor;

/* Element count of a tensor's shape. */
static inline size_t nto_tensor_numel(const nto_tensor *t) {
  return nto_shape_numel(t->shape);
}

/*
 * Page-aligned (4096) allocation of bytes (rounded up to 4096), zero-filled.
 * Returns NULL on failure. Free with nto_free_aligned. Any thread.
 */
float *nto_alloc_aligned(size_t bytes);
void nto_free_aligned(float *p);

/* Huge-page granule of nto_map_buffers: 2 MiB (x86-64 and arm64 with 4 KiB
 * base pages). */
#define NTO_HUGE_PAGE ((size_t)2 << 20)

/*
 * Anonymous mapping of bytes (rounded up to 4096; 0 maps one page) for
 * buffers that O_DIRECT requests read into and write from: the tensor
 * region, bench's bandwidth probe. Zero-filled on first touch, no swap
 * reservation (MAP_NORESERVE). When bytes >= NTO_HUGE_PAGE the mapping
 * starts on a 2 MiB boundary and asks for transparent huge pages
 * (madvise MADV_HUGEPAGE; honoured where
 * /sys/kernel/mm/transparent_hugepage/enabled is [always] or [madvise],
 * ignored where it is [never] or THP is not built in). A 9 MiB request
 * then pins and maps 5 pages instead of 2304 (docs/design.md). Returns
 * NULL (errno set) if the mapping fails. Release with
 * nto_unmap_buffers(p, bytes) with the same bytes. Any thread.
 */
void *nto_map_buffers(size_t bytes);
void nto_unmap_buffers(void *p, size_t bytes);

#endif /* NTO_TENSOR_H */
