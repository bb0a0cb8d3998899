/*
 * conv2d.c - the `conv2d` layer: 2-d convolution (cross-correlation, as in
 * PyTorch's nn.Conv2d and nntrainer's Conv2DLayer), NCHW, float32.
 *
 *   out[n, f, oy, ox] = bias[f] + sum_{ci, ky, kx}
 *       weight[f, ci, ky, kx] * in[n, g*C/G + ci, oy*sh - pt + ky*dh,
 *                                                 ox*sw - pl + kx*dw]
 * with g = f / (F/G) the group of filter f, ci < C/G, and zero outside the
 * input (padding). Output size (PyTorch's formula):
 *   OH = (H + pt + pb - dh*(kh-1) - 1) / sh + 1, likewise OW.
 *
 * Keys: filters (required, >= 1), kernel_size ("kh,kw" or "k", required),
 * stride (default 1), padding (default 0; "same", "valid", "full", "p",
 * "rows,cols" or "top,bottom,left,right"), dilation (default 1), groups
 * (default 1; must divide C and filters), weight_initializer (default
 * xavier_uniform), bias_initializer (default zeros), disable_bias (default
 * false), weight_regularizer (l2norm | none, default none) and
 * weight_regularizer_constant (default 1), or their 2020 spellings
 * weight_decay and weight_decay_lambda (props.h nto_regularizer): the
 * weight's, not the bias's.
 *   "same": TensorFlow's rule, OH = ceil(H / sh), total padding
 *     max((OH-1)*sh + dh*(kh-1)+1 - H, 0), top = total/2, bottom = rest
 *     (the extra row goes to the bottom/right), likewise for columns.
 *   "valid": no padding. "full": dh*(kh-1) rows / dw*(kw-1) columns on
 *     each side (nntrainer's "full").
 *
 * Weights, in this order: "weight" (filters, C/G, kh, kw), export rank 4,
 * fan_in = C/G*kh*kw, fan_out = filters*kh*kw (PyTorch's fan rule);
 * "bias" (1, filters, 1, 1), export rank 1, unless disable_bias.
 *
 * Four kernels, chosen at plan:
 *   - Winograd F(2x2, 3x3) (winograd.h) for forward, dX and dW of a 3x3
 *     kernel with stride 1, no dilation, no groups, at least 16 input
 *     channels, top/left padding <= 2 and a filter transform of at most
 *     CONV_WINO_FILTER_BYTES (1 MiB: ResNet-18's stages of 64 and 128
 *     channels, not 256 or 512): 16 multiply-adds per 2x2 outputs and
 *     channel pair instead of 36. dW only from CONV_WINO_DW_MIN_TILES
 *     tiles per image (else im2col). Workspace: the filter transform (dW:
 *     dU), then a slot per compute thread for a block of tile rows (V and
 *     M within CONV_WINO_BLOCK_BYTES, 1 MiB), so ResNet-18's workspace
 *     does not grow;
 *   - im2col + cblas_sgemm (the general case), several images per GEMM;
 *   - 1x1 kernel, stride 1, no padding: the input of one image and group
 *     already is its column matrix (C/G, H*W), so a chunk of one image
 *     needs no im2col and no workspace; a chunk of several images gathers
 *     their inputs side by side (a plain copy) like im2col would;
 *   - depthwise (G == C > 1): a direct loop per image, no workspace,
 *     kernel taps outside and output rows inside, so that the valid
 *     columns of a tap are computed once and the inner loop has no bounds
 *     tests.
 *
 * Chunks (im2col and 1x1 paths). One GEMM per group covers a chunk of k
 * consecutive images: the column matrix of the chunk is
 *   col (K, k*OHW), K = C/G*kh*kw, image j in columns [j*OHW, (j+1)*OHW),
 * so the GEMM's N is k*OHW instead of OHW (ResNet-18's last stage at 32x32
 * has OHW = 16: per-image GEMMs that small are dominated by OpenBLAS's
 * packing and thread start-up, not by arithmetic). NCHW keeps images apart,
 * so a chunk's output (F/G, k*OHW) is computed into a buffer and scattered
 * (with the bias) into the images, and in backward dY of the chunk is
 * gathered into that buffer first:
 *   forward:  tmp (F/G, k*OHW) = Wg (F/G, K) . col; y <- scatter(tmp) + b
 *   backward: tmp <- gather(dY); dWg (+)= tmp . col^T (per chunk, in
 *             blocks of input channels); col <- Wg^T . tmp, then col2im
 *             per image into dX (dY gathered again for this pass).
 * A chunk of one image skips the buffer: it computes into y (and reads dY)
 * in place, exactly like the per-image kernel.
 *
 * Workspace bound. The workspace is one buffer shared by all layers (the
 * model allocates the largest request), so whatever one layer asks for
 * every run pays, resident or offloaded. It therefore never grows with the
 * batch: a chunk holds k = floor(CONV_CHUNK_BYTES / ((K + F/G) * OHW * 4))
 * images (at least 1, at most the batch), and the batch is split into
 * ceil(N / k) chunks of nearly equal size (sizes differ by at most one).
 *   workspace = (K + F/G) * k * OHW floats  if k > 1,
 *               K * OHW floats (one image's column matrix, 0 for 1x1) if
 *               k == 1.
 * So a slot of the workspace is at most max(CONV_CHUNK_BYTES, one image's
 * column matrix), and the workspace holds min(threads, chunks) slots (see
 * "Compute threads" below): a layer whose single image already exceeds the
 * bound keeps the
 * per-image kernel (its GEMMs are large anyway), and the whole batch is one
 * chunk only when it fits the bound. CONV_CHUNK_BYTES (2 MiB) is below the
 * largest single-image column matrix of ResNet-18 at 32x32 (2.25 MiB, the
 * 64-channel stage), so chunking costs ResNet-18 no extra memory, while
 * the small GEMMs of its last two stages (OHW = 64 and 16) get 3 and 6
 * images each (5 and 11 for the stride-2 convolutions entering them).
 * Backward reuses the same buffers: col first as the chunk's column matrix
 * (for dW), then as d(columns) (for dX, scattered by col2im).
 *
 * Compute threads (parallel.h). With OpenBLAS's threads alone, only the
 * GEMMs used both cores: im2col, col2im, the scatter and gather ran on the
 * executor while OpenBLAS's idle thread spun, and ResNet-18 at 2 threads
 * was barely faster than at 1. So the work is split over the compute
 * threads, each GEMM single-threaded (nto_parallel_for_blas):
 *   - forward and dX, when the batch has several chunks: whole chunks side
 *     by side, each in a workspace slot of its own (the workspace above
 *     times min(threads, chunks));
 *   - forward and dX of a batch that is one chunk: im2col (or the dY
 *     gather) by input channels (filters), then the GEMM in fixed blocks
 *     (CONV_BLOCKS) of filters (forward) or input channels (dX, each block
 *     then col2im into its own channels);
 *   - dW: chunk after chunk (it sums over them), each chunk's GEMM in fixed
 *     blocks of input channels, im2col of a block's rows included;
 *   - db: by filter.
 * Which GEMMs run depends on the plan only, never on the thread count (the
 * threads take whole chunks or blocks), so the results are the same bits
 * at any thread count (test_conv2d). OpenBLAS's own split would not give
 * that: it splits a GEMM by its thread count, and the sums round
 * differently.
 *
 * Summation order: dW sums over the images of a chunk inside the GEMM and
 * across chunks by GEMM accumulation (beta = 1); results differ from the
 * per-image kernel by rounding only.
 *
 * Winograd's blocks of tile rows are fixed by the plan and each is one
 * thread's (transforms and 16 single-threaded GEMMs); its dW is split by
 * transform positions, each summing over the blocks in order. So its
 * results too are the same bits at any thread count; they differ from
 * im2col's by rounding (test_conv2d holds both to a double reference).
 *
 * Backward needs the forward input (bwd_needs_input = 1), nothing saved.
 * The output is a pure function of input, weight and bias, so the forward
 * less its regularization term is also the replay (layer.h): the model may
 * recompute a cheap convolution's output in backward (replay_macs = C/G x
 * kh x kw multiply-adds per output element; never in place).
 * dW and db are written with "=" (summed over the batch within the call);
 * din is zeroed, then col2im adds into it. A NULL din or dw skips that part.
 *
 * Regularizer (l2norm, constant C): forward sets l->reg_loss to
 * 0.5 * C * ||W||; C * W is added to dW once it is computed, by backward
 * and by each call of backward_weight_rows to its rows (layer.h
 * nto_layer_reg_loss, nto_layer_reg_grad): elementwise, so rows computed
 * chunk by chunk in U steps get the term of the weight as it was before
 * their own chunk's update, as the whole gradient does.
 */
#include "clones.h"
#include "layer.h"
#include "parallel.h"
#include "registry.h"
#include "winograd.h"

#include <assert.h>
#include <cblas.h>
#include <limits.h>
#include <string.h>

#define CONV_DIM_MAX (1L << 24) /* largest accepted size property */
/* Workspace bound of a chunk of several images (see the top). */
#define CONV_CHUNK_BYTES ((size_t)2 << 20)

/* Largest filter transform (16 x filters x channels floats, in the
 * workspace during forward and dX) of a convolution that runs by Winograd
 * F(2x2, 3x3), and the bound of a Winograd block's V and M (see the top).
 * Larger bounds (4 MiB filters: ResNet-18's 256-channel stage too; 2 MiB
 * blocks) ran ResNet-18 b32 2-4% faster but grew the workspace from 4.5
 * to 8 MiB, and b10 gained nothing. */
#define CONV_WINO_FILTER_BYTES ((size_t)1 << 20)
#define CONV_WINO_BLOCK_BYTES ((size_t)1 << 20)
/* Fewer input channels keep im2col: the GEMMs' depth would be tiny (the
 * 3-channel stem of ResNet-18 ran 3.5x slower by Winograd). */
#define CONV_WINO_MIN_CHANNELS 16
/* dW by Winograd needs at least this many tiles per image: an image of
 * one tile (outputs up to 2x2) keeps im2col. There each tap's gradient
 * comes from few outputs, so it is often exactly zero (its outputs dead
 * after a ReLU), which im2col keeps and Winograd's transforms round to
 * noise of about 1e-7 of the gradient's scale; Adam's normalized steps
 * turn that noise into updates (test_offload's narrow_deep, 2x2: 1e-3
 * apart between the chunk-grads modes). */
#define CONV_WINO_DW_MIN_TILES 2

/* Test hook: when nonzero, plan uses it instead of CONV_CHUNK_BYTES and
 * CONV_WINO_BLOCK_BYTES (tests force small chunks and blocks with it).
 * Read by plan only; not for production. */
size_t nto_conv2d_chunk_bytes_for_tests;

/* Test hook: when nonzero, plan never chooses Winograd (tests of the
 * im2col kernels on 3x3 stride-1 shapes). Read by plan only. */
int nto_conv2d_no_winograd_for_tests;

enum { PAD_EXPLICIT, PAD_SAME, PAD_VALID, PAD_FULL };
enum { PATH_IM2COL, PATH_1X1, PATH_DEPTHWISE };

/* Geometry of one convolution, fixed by plan. */
typedef struct conv_geom {
  int c, h, w; /* input channels and size */
  int f;       /* filters (output channels) */
  int oh, ow;  /* output size */
  int kh, kw;  /* kernel size */
  int sh, sw;  /* stride */
  int dh, dw;  /* dilation */
  int pt, pl;  /* top and left padding (bottom/right are implicit) */
  int groups;  /* G */
  int cg, fg;  /* C/G input channels and F/G filters per group */
  int kcol;    /* cg*kh*kw: rows of a column matrix */
} conv_geom;

typedef struct conv_priv {
  /* properties */
  int filters;  /* 0 = not set (required) */
  int kh, kw;   /* 0 = not set (required) */
  int sh, sw;   /* stride */
  int dh, dw;   /* dilation */
  int pad_mode; /* PAD_* */
  int pad[4];   /* top, bottom, left, right (PAD_EXPLICIT) */
  int groups;
  nto_init_kind winit, binit;
  int disable_bias;
  nto_regularizer reg; /* the weight's */
  int depthwise;       /* a depthwise convolution narrowed to channels
                          (conv_narrow): the depthwise path even for one
                          channel, as the whole layer computes it */
  /* set by plan */
  conv_geom g;
  int path;  /* PATH_* */
  int chunk; /* images per GEMM (>= 1; 1 = per image) */
  /* compute threads the workspace has slots for (parallel.h, at plan), and
   * floats per slot (0: none). Depthwise: one slot per thread (stride-1
   * kernels). Chunks: one per thread when the batch has several chunks
   * (at most one per chunk), else 1. */
  int ws_slots;
  size_t ws_slot;
  /* Winograd F(2x2, 3x3) (winograd.h), 0 = im2col: forward and dX
   * (wino), dW (wino_dw: also needs CONV_WINO_DW_MIN_TILES); the forward
   * pass (x -> y), the dX pass (dY -> dX) and the dW pass, and the filter
   * transform's (or dU's) floats at the start of the workspace (the
   * blocks' slots after it). */
  int wino, wino_dw;
  nto_wino_plan wfwd, wdx, wdw;
  size_t wino_u;
  int iw; /* index of "weight" */
  int ib; /* index of "bias", -1 with disable_bias */
} conv_priv;

static void conv_defaults(nto_layer *l) {
  conv_priv *p = l->priv;
  p->sh = p->sw = 1;
  p->dh = p->dw = 1;
  p->pad_mode = PAD_EXPLICIT;
  p->groups = 1;
  p->winit = NTO_INIT_XAVIER_UNIFORM;
  p->binit = NTO_INIT_ZEROS;
  nto_regularizer_defaults(&p->reg);
}

/* "a,b" or "a" (replicated) with values in [min, CONV_DIM_MAX] into *a, *b.
 * Returns 0 or NTO_ECONFIG (message from the props.h parser). */
static int parse_pair(const char *v, long min, int *a, int *b, nto_err *err) {
  long x[2];
  int n;
  int rc = nto_parse_int_list(v, min, CONV_DIM_MAX, x, 2, &n, err);
  if (rc != 0)
    return rc;
  *a = (int)x[0];
  *b = (int)x[n - 1];
  return 0;
}

/* padding value: same | valid | full | p | rows,cols | t,b,l,r.
 * Returns 0 or NTO_ECONFIG. */
static int parse_padding(conv_priv *p, const char *v, nto_err *err) {
  static const char *const modes[] = {"same", "valid", "full", NULL};
  int m;
  if (nto_parse_enum(v, modes, &m, NULL) == 0) {
    p->pad_mode = PAD_SAME + m;
    return 0;
  }
  long x[4];
  int n = 0;
  if (nto_parse_int_list(v, 0, CONV_DIM_MAX, x, 4, &n, NULL) != 0 || n == 3)
    return nto_err_set(err, NTO_ECONFIG,
                       "expected same, valid, full, or 1, 2 or 4 "
                       "non-negative integers (p | rows,cols | "
                       "top,bottom,left,right), got '%s'",
                       v);
  p->pad_mode = PAD_EXPLICIT;
  if (n == 1) {
    p->pad[0] = p->pad[1] = p->pad[2] = p->pad[3] = (int)x[0];
  } else if (n == 2) {
    p->pad[0] = p->pad[1] = (int)x[0];
    p->pad[2] = p->pad[3] = (int)x[1];
  } else {
    for (int i = 0; i < 4; i++)
      p->pad[i] = (int)x[i];
  }
  return 0;
}

/* Applies one INI key. Returns 0, NTO_ENOKEY or NTO_ECONFIG (message).
 * A failing value leaves the property unchanged. */
static int conv_set_prop(nto_layer *l, const char *key, const char *value,
                         nto_err *err) {
  conv_priv *p = l->priv;
  long x;
  int rc;
  if (strcmp(key, "filters") == 0) {
    rc = nto_parse_int(value, 1, CONV_DIM_MAX, &x, err);
    if (rc == 0)
      p->filters = (int)x;
    return rc;
  }
  if (strcmp(key, "kernel_size") == 0)
    return parse_pair(value, 1, &p->kh, &p->kw, err);
  if (strcmp(key, "stride") == 0)
    return parse_pair(value, 1, &p->sh, &p->sw, err);
  if (strcmp(key, "dilation") == 0)
    return parse_pair(value, 1, &p->dh, &p->dw, err);
  if (strcmp(key, "padding") == 0)
    return parse_padding(p, value, err);
  if (strcmp(key, "groups") == 0) {
    rc = nto_parse_int(value, 1, CONV_DIM_MAX, &x, err);
    if (rc == 0)
      p->groups = (int)x;
    return rc;
  }
  rc = nto_parse_regularizer_key(key, value, &p->reg, err);
  if (rc != NTO_ENOKEY)
    return rc;
  return nto_parse_weight_bias_key(key, value, &p->winit, &p->binit,
                                   &p->disable_bias, err);
}

/* TensorFlow's "same" padding along one axis of size in, kernel k,
 * stride s, dilation d: writes the leading and trailing padding. */
static void same_padding(int in, int k, int s, int d, int *lead, int *trail) {
  long out = ((long)in + s - 1) / s;
  long total = (out - 1) * s + (long)d * (k - 1) + 1 - in;
  if (total < 0)
    total = 0;
  *lead = (int)(total / 2);
  *trail = (int)(total - total / 2);
}

/* Chunks of the batch. */
static int n_chunks(const conv_priv *p, int batch) {
  return (batch + p->chunk - 1) / p->chunk;
}

/* Row pitch and floats of the padded plane of the stride-1 depthwise
 * kernels (see depthwise_forward_s1). */
static size_t dw_pitch(const conv_geom *g) {
  return (size_t)g->ow + (size_t)(g->kw - 1) * g->dw;
}

static size_t dw_plane(const conv_geom *g) {
  size_t ph = (size_t)g->oh + (size_t)(g->kh - 1) * g->dh;
  return ph * dw_pitch(g) + (size_t)(g->kw - 1) * g->dw;
}

/* Can forward and dX of this geometry run by Winograd F(2x2, 3x3)? A 3x3
 * kernel, stride 1, no dilation, no groups, at least CONV_WINO_MIN_CHANNELS
 * input channels, top and left padding at most 2 (dX's padding is 2 - p),
 * a filter transform within CONV_WINO_FILTER_BYTES, tile rows within
 * NTO_WINO_ROW_MAX. */
static int winograd_fits(const conv_priv *p) {
  const conv_geom *g = &p->g;
  if (nto_conv2d_no_winograd_for_tests || p->path != PATH_IM2COL ||
      g->kh != 3 || g->kw != 3 || g->sh != 1 || g->sw != 1 || g->dh != 1 ||
      g->dw != 1 || g->groups != 1 || g->pt > 2 || g->pl > 2 ||
      g->c < CONV_WINO_MIN_CHANNELS)
    return 0;
  if ((size_t)g->f * (size_t)g->c >
      CONV_WINO_FILTER_BYTES / (16 * sizeof(float)))
    return 0;
  long row_fwd = 2 * (((long)g->ow + 1) / 2) + 2;
  long row_dx = 2 * (((long)g->w + 1) / 2) + 2;
  return row_fwd <= NTO_WINO_ROW_MAX && row_dx <= NTO_WINO_ROW_MAX;
}

/* Plans Winograd when it fits (p->wino, p->wino_dw): the three passes,
 * and the workspace: the filter transform plus the largest pass's slots,
 * or im2col's when dW keeps im2col and that is more. Returns 0 or
 * NTO_ESHAPE (sizes overflow). */
static int plan_winograd(nto_layer *l, nto_err *err) {
  conv_priv *p = l->priv;
  const conv_geom *g = &p->g;
  p->wino = winograd_fits(p);
  p->wino_dw = 0;
  if (!p->wino)
    return 0;
  p->wino_dw = ((g->oh + 1) / 2) * ((g->ow + 1) / 2) >= CONV_WINO_DW_MIN_TILES;
  size_t bound = nto_conv2d_chunk_bytes_for_tests
                     ? nto_conv2d_chunk_bytes_for_tests
                     : CONV_WINO_BLOCK_BYTES;
  size_t fl, bytes;
  if (nto_wino_plan_set(&p->wfwd, g->c, g->h, g->w, g->f, g->oh, g->ow, g->pt,
                        g->pl, l->batch, bound) != 0 ||
      nto_wino_plan_set(&p->wdx, g->f, g->oh, g->ow, g->c, g->h, g->w,
                        2 - g->pt, 2 - g->pl, l->batch, bound) != 0 ||
      nto_wino_plan_dw(&p->wdw, &p->wfwd, bound) != 0)
    goto too_large;
  p->wino_u = nto_wino_filter_floats(g->f, g->c);
  fl = nto_wino_ws_floats(&p->wfwd);
  if (nto_wino_ws_floats(&p->wdx) > fl)
    fl = nto_wino_ws_floats(&p->wdx);
  if (nto_wino_ws_floats(&p->wdw) > fl)
    fl = nto_wino_ws_floats(&p->wdw);
  if (__builtin_add_overflow(fl, p->wino_u, &fl) ||
      __builtin_mul_overflow(fl, sizeof(float), &bytes))
    goto too_large;
  if (p->wino_dw || bytes > l->ws_bytes)
    l->ws_bytes = bytes;
  return 0;
too_large:
  return nto_err_set(err, NTO_ESHAPE,
                     "Winograd workspace of %d x %dx%d values is too large",
                     g->c, g->h, g->w);
}

/* Test hooks: does this planned conv2d layer run forward and dX (dW) by
 * Winograd? Not for production. */
int nto_conv2d_is_winograd_for_tests(const nto_layer *l) {
  return ((const conv_priv *)l->priv)->wino;
}

int nto_conv2d_is_winograd_dw_for_tests(const nto_layer *l) {
  return ((const conv_priv *)l->priv)->wino_dw;
}

/* The geometry of input and kernel (p->g's sizes, channels per group,
 * the column matrix's rows). Returns 0, NTO_ECONFIG (groups not dividing
 * C and filters) or NTO_ESHAPE (sizes beyond int). */
static int plan_geom(nto_layer *l, nto_err *err) {
  conv_priv *p = l->priv;
  nto_shape in = l->in_shape[0];
  conv_geom *g = &p->g;
  memset(g, 0, sizeof *g);
  g->c = in.c;
  g->h = in.h;
  g->w = in.w;
  g->f = p->filters;
  g->kh = p->kh;
  g->kw = p->kw;
  g->sh = p->sh;
  g->sw = p->sw;
  g->dh = p->dh;
  g->dw = p->dw;
  g->groups = p->groups;
  if (g->c % g->groups != 0 || g->f % g->groups != 0)
    return nto_err_set(err, NTO_ECONFIG,
                       "groups %d must divide both input channels %d and "
                       "filters %d",
                       g->groups, g->c, g->f);
  g->cg = g->c / g->groups;
  g->fg = g->f / g->groups;
  /* Sizes that int arithmetic (and BLAS) must hold: C/G*kh*kw (the rows of
   * a column matrix, fan_in) and filters*kh*kw (fan_out). */
  long long kcol = (long long)g->cg * g->kh * g->kw;
  long long fan_out = (long long)g->f * g->kh * g->kw;
  if (kcol > INT_MAX || fan_out > INT_MAX)
    return nto_err_set(err, NTO_ESHAPE,
                       "kernel %dx%d is too large for %d input channels per "
                       "group and %d filters (channels x kh x kw and filters "
                       "x kh x kw must be at most %d)",
                       g->kh, g->kw, g->cg, g->f, INT_MAX);
  g->kcol = (int)kcol;
  l->replay_macs = g->kcol; /* the replay is the forward: kcol per output */
  return 0;
}

/* The padding pad[0..4) (top, bottom, left, right) of the padding mode for
 * a dilated kernel of ekh x ekw. */
static void padding(const conv_priv *p, long ekh, long ekw, int pad[4]) {
  const conv_geom *g = &p->g;
  switch (p->pad_mode) {
  case PAD_SAME:
    same_padding(g->h, g->kh, g->sh, g->dh, &pad[0], &pad[1]);
    same_padding(g->w, g->kw, g->sw, g->dw, &pad[2], &pad[3]);
    break;
  case PAD_VALID:
    pad[0] = pad[1] = pad[2] = pad[3] = 0;
    break;
  case PAD_FULL:
    pad[0] = pad[1] = (int)(ekh - 1);
    pad[2] = pad[3] = (int)(ekw - 1);
    break;
  default:
    memcpy(pad, p->pad, 4 * sizeof *pad);
    break;
  }
}

/* The padding pad[0..4) and the output size (p->g, l->out_shape). Returns 0
 * or NTO_ESHAPE (a kernel larger than the padded input, sizes beyond
 * int). */
static int plan_output(nto_layer *l, int pad[4], nto_err *err) {
  conv_priv *p = l->priv;
  conv_geom *g = &p->g;
  long ekh = (long)g->dh * (g->kh - 1) + 1; /* dilated kernel extent */
  long ekw = (long)g->dw * (g->kw - 1) + 1;
  if (ekh > INT_MAX || ekw > INT_MAX)
    return nto_err_set(err, NTO_ESHAPE, "kernel %ldx%ld (dilated) is too large",
                       ekh, ekw);
  padding(p, ekh, ekw, pad);
  long ph = (long)g->h + pad[0] + pad[1], pw = (long)g->w + pad[2] + pad[3];
  if (ekh > ph || ekw > pw)
    return nto_err_set(err, NTO_ESHAPE,
                       "kernel %ldx%ld (dilated) larger than padded input "
                       "%ldx%ld",
                       ekh, ekw, ph, pw);
  /* Input coordinates (oy*sh - pt + ky*dh) stay within the padded input. */
  if (ph > INT_MAX || pw > INT_MAX)
    return nto_err_set(err, NTO_ESHAPE, "padded input %ldx%ld is too large", ph,
                       pw);
  g->pt = pad[0];
  g->pl = pad[2];
  g->oh = (int)((ph - ekh) / g->sh + 1);
  g->ow = (int)((pw - ekw) / g->sw + 1);
  l->out_shape = (nto_shape){l->batch, g->f, g->oh, g->ow};
  return 0;
}

/* Depthwise stride 1: per slot 2 planes + OH*P floats
 * (depthwise_forward_s1), rounded up to 64 bytes. */
static int plan_depthwise_ws(nto_layer *l, nto_err *err) {
  conv_priv *p = l->priv;
  const conv_geom *g = &p->g;
  size_t fl;
  if (__builtin_mul_overflow((size_t)g->oh, dw_pitch(g), &fl) ||
      __builtin_add_overflow(fl, 2 * dw_plane(g) + 15, &fl) ||
      __builtin_mul_overflow(fl / 16 * 16, (size_t)p->ws_slots, &l->ws_bytes) ||
      __builtin_mul_overflow(l->ws_bytes, sizeof(float), &l->ws_bytes))
    return nto_err_set(err, NTO_ESHAPE,
                       "depthwise workspace for %dx%d is too large", g->h,
                       g->w);
  p->ws_slot = fl / 16 * 16;
  return 0;
}

/* im2col and 1x1: the chunk of images (within CONV_CHUNK_BYTES) and a
 * workspace slot per thread that gets a chunk. */
static int plan_im2col_ws(nto_layer *l, nto_err *err) {
  conv_priv *p = l->priv;
  const conv_geom *g = &p->g;
  /* One image's column matrix, and one image's share of a chunk (its
   * columns plus its part of the output/dY buffer), in bytes. */
  size_t ohw = (size_t)g->oh * g->ow, col1, per_img;
  if (__builtin_mul_overflow((size_t)g->kcol, ohw, &col1) ||
      __builtin_mul_overflow(col1, sizeof(float), &col1) ||
      __builtin_mul_overflow((size_t)g->kcol + (size_t)g->fg, ohw, &per_img) ||
      __builtin_mul_overflow(per_img, sizeof(float), &per_img))
    goto too_large;
  size_t bound = nto_conv2d_chunk_bytes_for_tests
                     ? nto_conv2d_chunk_bytes_for_tests
                     : CONV_CHUNK_BYTES;
  size_t k = bound / per_img, slot = 0;
  if (k > (size_t)l->batch)
    k = (size_t)l->batch;
  if (k > INT_MAX / ohw) /* k*OHW is a BLAS int */
    k = INT_MAX / ohw;
  if (k > 1) {
    /* balance: the fewest chunks of at most k images, evenly filled */
    size_t nch = ((size_t)l->batch + k - 1) / k;
    k = ((size_t)l->batch + nch - 1) / nch;
    p->chunk = (int)k;
    slot = k * per_img;
  } else if (p->path == PATH_IM2COL) {
    slot = col1;
  }
  /* a slot per thread that gets a chunk; several slots start at 64-byte
   * boundaries */
  int nch = n_chunks(p, l->batch);
  p->ws_slots = nch < 2 ? 1 : nch < p->ws_slots ? nch : p->ws_slots;
  p->ws_slot = slot / sizeof(float);
  if (p->ws_slots > 1)
    p->ws_slot = (p->ws_slot + 15) / 16 * 16;
  if (__builtin_mul_overflow(p->ws_slot * sizeof(float), (size_t)p->ws_slots,
                             &l->ws_bytes))
    goto too_large;
  return 0;
too_large:
  return nto_err_set(err, NTO_ESHAPE,
                     "im2col workspace of %d x %dx%d values is too large",
                     g->kcol, g->oh, g->ow);
}

/* The path (depthwise, 1x1, im2col) for padding pad[0..4), and its
 * workspace. */
static int plan_path(nto_layer *l, const int pad[4], nto_err *err) {
  conv_priv *p = l->priv;
  const conv_geom *g = &p->g;
  if ((g->groups == g->c && g->c > 1) || p->depthwise)
    p->path = PATH_DEPTHWISE;
  else if (g->kh == 1 && g->kw == 1 && g->sh == 1 && g->sw == 1 &&
           pad[0] == 0 && pad[1] == 0 && pad[2] == 0 && pad[3] == 0)
    p->path = PATH_1X1;
  else
    p->path = PATH_IM2COL;
  p->chunk = 1;
  p->ws_slots = nto_parallel_threads();
  p->ws_slot = 0;
  if (p->path == PATH_DEPTHWISE && g->sh == 1 && g->sw == 1)
    return plan_depthwise_ws(l, err);
  if (p->path != PATH_DEPTHWISE)
    return plan_im2col_ws(l, err);
  return 0;
}

/*
 * out_shape = (N, filters, OH, OW); requests weight and bias; workspace as
 * described at the top. Returns 0, NTO_ECONFIG (missing key, groups not
 * dividing C and filters) or NTO_ESHAPE (kernel larger than padded input).
 */
static int conv_plan(nto_layer *l, nto_err *err) {
  conv_priv *p = l->priv;
  nto_layer_plan_reset(l);
  l->bwd_needs_input = 1;
  if (p->filters == 0)
    return nto_err_set(err, NTO_ECONFIG, "key 'filters' is required");
  if (p->kh == 0)
    return nto_err_set(err, NTO_ECONFIG, "key 'kernel_size' is required");
  if (l->n_in != 1)
    return nto_err_set(err, NTO_ESHAPE, "expected 1 input, got %d", l->n_in);
  int pad[4];
  int rc = plan_geom(l, err);
  if (rc == 0)
    rc = plan_output(l, pad, err);
  if (rc == 0)
    rc = plan_path(l, pad, err);
  if (rc == 0)
    rc = plan_winograd(l, err);
  if (rc != 0)
    return rc;
  const conv_geom *g = &p->g;
  p->iw =
      nto_layer_add_weight(l, "weight", (nto_shape){g->f, g->cg, g->kh, g->kw},
                           4, p->winit, g->kcol, g->f * g->kh * g->kw, 1);
  l->w[p->iw].l2 = nto_regularizer_l2(&p->reg);
  p->ib = -1;
  if (!p->disable_bias)
    p->ib = nto_layer_add_weight(l, "bias", (nto_shape){1, g->f, 1, 1}, 1,
                                 p->binit, g->kcol, g->f * g->kh * g->kw, 1);
  return 0;
}

/* Output columns ox in [*lo, *hi) read input columns ix = x0 + ox*s
 * inside [0, w); the others are padding. Callers index an input row as
 * row[x0 + ox*s], never forming a pointer before the row. */
static void valid_cols(long x0, int s, int w, int ow, int *lo, int *hi) {
  long a = x0 >= 0 ? 0 : (-x0 + s - 1) / s;
  long b = x0 >= w ? 0 : ((long)w - x0 + s - 1) / s;
  if (a > ow)
    a = ow;
  if (b > ow)
    b = ow;
  if (b < a)
    b = a;
  *lo = (int)a;
  *hi = (int)b;
}

/* True when im2col is the identity (1x1, stride 1, no padding): column
 * row ci is input channel ci. */
static int im2col_is_copy(const conv_geom *g) {
  return g->kh == 1 && g->kw == 1 && g->sh == 1 && g->sw == 1 && g->pt == 0 &&
         g->pl == 0 && g->oh == g->h && g->ow == g->w;
}

/*
 * col: (cg*kh*kw, oh*ow) with row stride ld <- x: (cg, h, w), one image
 * and group, the rows of input channels [c0, c1) only. Row
 * (ci*kh + ky)*kw + kx, column oy*ow + ox holds
 * x[ci, oy*sh - pt + ky*dh, ox*sw - pl + kx*dw], or 0 outside x.
 */
NTO_CLONES static void im2col(const conv_geom *g, const float *x, float *col,
                              size_t ld, int c0, int c1) {
  size_t hw = (size_t)g->h * g->w;
  if (im2col_is_copy(g)) {
    for (int ci = c0; ci < c1; ci++)
      memcpy(col + (size_t)ci * ld, x + (size_t)ci * hw, hw * sizeof *col);
    return;
  }
  /* Loops rather than memset/memcpy calls: most pieces are empty or a
   * few floats long (a 3x3 kernel with padding 1 has one zero column at
   * either end of a row, and ResNet-18's last stage has OW = 4). */
  for (int ci = c0; ci < c1; ci++) {
    const float *xc = x + (size_t)ci * hw;
    for (int ky = 0; ky < g->kh; ky++) {
      for (int kx = 0; kx < g->kw; kx++) {
        float *row = col + (size_t)((ci * g->kh + ky) * g->kw + kx) * ld;
        long x0 = (long)kx * g->dw - g->pl; /* ix at ox = 0 */
        int lo, hi;
        valid_cols(x0, g->sw, g->w, g->ow, &lo, &hi);
        for (int oy = 0; oy < g->oh; oy++) {
          float *r = row + (size_t)oy * g->ow;
          int iy = oy * g->sh - g->pt + ky * g->dh;
          if (iy < 0 || iy >= g->h) {
            for (int ox = 0; ox < g->ow; ox++)
              r[ox] = 0.0f;
            continue;
          }
          const float *xr = xc + (size_t)iy * g->w; /* input row */
          for (int ox = 0; ox < lo; ox++)
            r[ox] = 0.0f;
          if (g->sw == 1)
            for (int ox = lo; ox < hi; ox++)
              r[ox] = xr[x0 + ox];
          else
            for (int ox = lo; ox < hi; ox++)
              r[ox] = xr[x0 + (long)ox * g->sw];
          for (int ox = hi; ox < g->ow; ox++)
            r[ox] = 0.0f;
        }
      }
    }
  }
}

/*
 * dx: (cg, h, w) += col2im(dcol: (cg*kh*kw, oh*ow) with row stride ld),
 * input channels [c0, c1) only: the adjoint of im2col, every column entry
 * is added to the input element it was copied from.
 */
NTO_CLONES static void col2im_add(const conv_geom *g, const float *dcol,
                                  size_t ld, float *dx, int c0, int c1) {
  size_t hw = (size_t)g->h * g->w;
  for (int ci = c0; ci < c1; ci++) {
    float *xc = dx + (size_t)ci * hw;
    for (int ky = 0; ky < g->kh; ky++) {
      for (int kx = 0; kx < g->kw; kx++) {
        const float *row = dcol + (size_t)((ci * g->kh + ky) * g->kw + kx) * ld;
        long x0 = (long)kx * g->dw - g->pl;
        int lo, hi;
        valid_cols(x0, g->sw, g->w, g->ow, &lo, &hi);
        for (int oy = 0; oy < g->oh; oy++) {
          int iy = oy * g->sh - g->pt + ky * g->dh;
          if (iy < 0 || iy >= g->h)
            continue;
          const float *r = row + (size_t)oy * g->ow;
          float *xr = xc + (size_t)iy * g->w;
          if (g->sw == 1)
            for (int ox = lo; ox < hi; ox++)
              xr[x0 + ox] += r[ox];
          else
            for (int ox = lo; ox < hi; ox++)
              xr[x0 + (long)ox * g->sw] += r[ox];
        }
      }
    }
  }
}

/* y: (fg, oh*ow) <- bias: (fg) broadcast along each row, or 0 if NULL. */
static void fill_bias(float *y, const float *bias, int fg, size_t ohw) {
  for (int f = 0; f < fg; f++) {
    float v = bias ? bias[f] : 0.0f;
    float *r = y + (size_t)f * ohw;
    for (size_t i = 0; i < ohw; i++)
      r[i] = v;
  }
}

/*
 * Depthwise forward, one image: y: (C*m, oh, ow) <- x: (C, h, w),
 * w: (C*m, 1, kh, kw), bias: (C*m) or NULL; m = fg (channel multiplier),
 * filter f reads input channel f / m. Loops run over kernel taps outside
 * and output rows inside, with the valid columns of each tap computed once,
 * so the inner loop has no bounds tests; each output still sums its taps in
 * (ky, kx) order from 0, then adds the bias.
 */
NTO_CLONES static void depthwise_forward(const conv_geom *g, const float *x,
                                         const float *w, const float *bias,
                                         float *y, int c0, int c1) {
  size_t hw = (size_t)g->h * g->w, ohw = (size_t)g->oh * g->ow;
  size_t kk = (size_t)g->kh * g->kw;
  for (int f = c0 * g->fg; f < c1 * g->fg; f++) {
    const float *xc = x + (size_t)(f / g->fg) * hw;
    const float *wf = w + (size_t)f * kk;
    float *yf = y + (size_t)f * ohw;
    for (size_t i = 0; i < ohw; i++)
      yf[i] = 0.0f;
    for (int ky = 0; ky < g->kh; ky++) {
      for (int kx = 0; kx < g->kw; kx++) {
        float wv = wf[(size_t)ky * g->kw + kx];
        long x0 = (long)kx * g->dw - g->pl;
        int lo, hi;
        valid_cols(x0, g->sw, g->w, g->ow, &lo, &hi);
        for (int oy = 0; oy < g->oh; oy++) {
          int iy = oy * g->sh - g->pt + ky * g->dh;
          if (iy < 0 || iy >= g->h)
            continue;
          const float *xr = xc + (size_t)iy * g->w;
          float *yr = yf + (size_t)oy * g->ow;
          if (g->sw == 1)
            for (int ox = lo; ox < hi; ox++)
              yr[ox] += wv * xr[x0 + ox];
          else
            for (int ox = lo; ox < hi; ox++)
              yr[ox] += wv * xr[x0 + (long)ox * g->sw];
        }
      }
    }
    float b = bias ? bias[f] : 0.0f;
    for (size_t i = 0; i < ohw; i++)
      yf[i] += b;
  }
}

/*
 * Depthwise backward, one image: dx: (C, h, w) += W^T dy (dx may be NULL),
 * dw: (C*m, 1, kh, kw) += dy * x (dw may be NULL); shapes as in
 * depthwise_forward, loops in the same order. The caller zeroes dx and dw
 * before the first image. A tap's dW sum over the image goes into
 * DW_LANES partial sums (column ox into lane ox % DW_LANES), added
 * pairwise at the end: one chain of dependent adds would run at the
 * latency of an add, lanes vectorize.
 */
#define DW_LANES 8
_Static_assert(DW_LANES == 8, "dw_lanes_total adds 8 lanes");

/* The DW_LANES partial sums of a dW tap, added pairwise. */
static float dw_lanes_total(const float *a) {
  return ((a[0] + a[1]) + (a[2] + a[3])) + ((a[4] + a[5]) + (a[6] + a[7]));
}

NTO_CLONES static void depthwise_backward(const conv_geom *g, const float *x,
                                          const float *w, const float *dy,
                                          float *dx, float *dw, int c0,
                                          int c1) {
  size_t hw = (size_t)g->h * g->w, ohw = (size_t)g->oh * g->ow;
  size_t kk = (size_t)g->kh * g->kw;
  for (int f = c0 * g->fg; f < c1 * g->fg; f++) {
    size_t ci = (size_t)(f / g->fg);
    const float *xc = x + ci * hw;
    float *dxc = dx ? dx + ci * hw : NULL;
    const float *wf = w + (size_t)f * kk;
    float *dwf = dw ? dw + (size_t)f * kk : NULL;
    const float *dyf = dy + (size_t)f * ohw;
    for (int ky = 0; ky < g->kh; ky++) {
      for (int kx = 0; kx < g->kw; kx++) {
        size_t wi = (size_t)ky * g->kw + kx;
        float wv = wf[wi], s[DW_LANES] = {0};
        long x0 = (long)kx * g->dw - g->pl;
        int lo, hi;
        valid_cols(x0, g->sw, g->w, g->ow, &lo, &hi);
        for (int oy = 0; oy < g->oh; oy++) {
          int iy = oy * g->sh - g->pt + ky * g->dh;
          if (iy < 0 || iy >= g->h)
            continue;
          const float *dyr = dyf + (size_t)oy * g->ow;
          size_t row = (size_t)iy * g->w; /* input row */
          if (dwf) {
            const float *xr = xc + row;
            const float *xs = xr + x0;
            long sw = g->sw;
            int ox = lo;
            for (; ox + DW_LANES <= hi; ox += DW_LANES)
              for (int j = 0; j < DW_LANES; j++)
                s[j] += xs[(ox + j) * sw] * dyr[ox + j];
            for (int j = 0; ox < hi; ox++, j++)
              s[j] += xs[ox * sw] * dyr[ox];
          }
          if (dxc) {
            float *dxr = dxc + row;
            if (g->sw == 1)
              for (int ox = lo; ox < hi; ox++)
                dxr[x0 + ox] += wv * dyr[ox];
            else
              for (int ox = lo; ox < hi; ox++)
                dxr[x0 + (long)ox * g->sw] += wv * dyr[ox];
          }
        }
        if (dwf)
          dwf[wi] += dw_lanes_total(s);
      }
    }
  }
}

/*
 * Stride-1 depthwise kernels on a padded plane. With stride 1 the padded
 * input of a channel is P = OW + (kw-1)*dw columns wide and
 * PH = OH + (kh-1)*dh rows high, and output (oy, ox) reads padded element
 * (oy + ky*dh, ox + kx*dw). Flattened with row pitch P, output i = oy*P + ox
 * reads padded element i + ky*dh*P + kx*dw: each tap is one long
 * vectorizable loop over OH*P outputs (the P - OW columns past each row's
 * end are computed and dropped), instead of OH short rows with their own
 * bounds. The plane has (kw-1)*dw zeros of slack after its last row for the
 * reads of those dropped columns. Workspace: 2 planes + OH*P floats.
 */
/* xp (dw_plane floats) <- channel xc (h, w) at row pt, column pl of a zero
 * plane of pitch dw_pitch. */
static void dw_pad(const conv_geom *g, const float *xc, float *xp) {
  size_t pitch = dw_pitch(g);
  memset(xp, 0, dw_plane(g) * sizeof *xp);
  for (int iy = 0; iy < g->h; iy++)
    memcpy(xp + (size_t)(iy + g->pt) * pitch + g->pl, xc + (size_t)iy * g->w,
           (size_t)g->w * sizeof *xp);
}

/* Stride-1 depthwise forward, one image (shapes as depthwise_forward);
 * each output sums its taps in (ky, kx) order from 0, then adds the bias
 * (taps in the padding add w * 0). ws: dw_plane + OH*P floats. */
NTO_CLONES static void depthwise_forward_s1(const conv_geom *g, const float *x,
                                            const float *w, const float *bias,
                                            float *y, float *ws, int c0,
                                            int c1) {
  size_t hw = (size_t)g->h * g->w, ohw = (size_t)g->oh * g->ow;
  size_t kk = (size_t)g->kh * g->kw, pitch = dw_pitch(g);
  size_t n = (size_t)g->oh * pitch; /* flat outputs, dropped ones included */
  float *xp = ws, *acc = ws + dw_plane(g);
  for (int f = c0 * g->fg; f < c1 * g->fg; f++) {
    if (f % g->fg == 0)
      dw_pad(g, x + (size_t)(f / g->fg) * hw, xp);
    const float *wf = w + (size_t)f * kk;
    for (size_t i = 0; i < n; i++)
      acc[i] = 0.0f;
    for (int ky = 0; ky < g->kh; ky++)
      for (int kx = 0; kx < g->kw; kx++) {
        float wv = wf[(size_t)ky * g->kw + kx];
        const float *src = xp + (size_t)ky * g->dh * pitch + (size_t)kx * g->dw;
        for (size_t i = 0; i < n; i++)
          acc[i] += wv * src[i];
      }
    float b = bias ? bias[f] : 0.0f, *yf = y + (size_t)f * ohw;
    for (int oy = 0; oy < g->oh; oy++) {
      const float *a = acc + (size_t)oy * pitch;
      float *yr = yf + (size_t)oy * g->ow;
      for (int ox = 0; ox < g->ow; ox++)
        yr[ox] = a[ox] + b;
    }
  }
}

/*
 * Stride-1 depthwise backward, one image (shapes and accumulation as
 * depthwise_backward): dY of a filter is laid out with pitch P (zeros in
 * the dropped columns), so that dW of a tap is one dot product of it with
 * the shifted padded input (DW_LANES partial sums), and dX of the padded
 * plane gets each tap as one shifted axpy; dX then takes the plane's
 * interior. ws: 2 * dw_plane + OH*P floats.
 */
NTO_CLONES static void depthwise_backward_s1(const conv_geom *g, const float *x,
                                             const float *w, const float *dy,
                                             float *dx, float *dw, float *ws,
                                             int c0, int c1) {
  size_t hw = (size_t)g->h * g->w, ohw = (size_t)g->oh * g->ow;
  size_t kk = (size_t)g->kh * g->kw, pitch = dw_pitch(g);
  size_t n = (size_t)g->oh * pitch, plane = dw_plane(g);
  float *xp = ws, *dxp = ws + plane, *dyp = ws + 2 * plane;
  for (int c = c0; c < c1; c++) {
    if (dw)
      dw_pad(g, x + (size_t)c * hw, xp);
    if (dx)
      memset(dxp, 0, plane * sizeof *dxp);
    for (int f = c * g->fg; f < (c + 1) * g->fg; f++) {
      const float *dyf = dy + (size_t)f * ohw;
      for (int oy = 0; oy < g->oh; oy++) {
        float *r = dyp + (size_t)oy * pitch;
        memcpy(r, dyf + (size_t)oy * g->ow, (size_t)g->ow * sizeof *r);
        for (size_t ox = (size_t)g->ow; ox < pitch; ox++)
          r[ox] = 0.0f;
      }
      for (int ky = 0; ky < g->kh; ky++)
        for (int kx = 0; kx < g->kw; kx++) {
          size_t wi = (size_t)ky * g->kw + kx;
          size_t off = (size_t)ky * g->dh * pitch + (size_t)kx * g->dw;
          if (dw) {
            float a[DW_LANES] = {0};
            const float *src = xp + off;
            size_t i = 0;
            for (; i + DW_LANES <= n; i += DW_LANES)
              for (int j = 0; j < DW_LANES; j++)
                a[j] += src[i + j] * dyp[i + j];
            for (; i < n; i++)
              a[i % DW_LANES] += src[i] * dyp[i];
            dw[(size_t)f * kk + wi] += dw_lanes_total(a);
          }
          if (dx) {
            float wv = w[(size_t)f * kk + wi], *dst = dxp + off;
            for (size_t i = 0; i < n; i++)
              dst[i] += wv * dyp[i];
          }
        }
    }
    if (dx) {
      float *dxc = dx + (size_t)c * hw;
      for (int iy = 0; iy < g->h; iy++) {
        const float *r = dxp + (size_t)(iy + g->pt) * pitch + g->pl;
        float *d = dxc + (size_t)iy * g->w;
        for (int ix = 0; ix < g->w; ix++)
          d[ix] += r[ix];
      }
    }
  }
}

/*
 * A depthwise pass over input channels [c0, c1) of every image
 * (parallel.h): the channels of a range, their filters and their dX are
 * its own, and each filter's dW sums its images in order, so the split
 * does not change the results. Forward when dy is NULL; workspace slot
 * `slot` of the stride-1 kernels (conv_priv ws_slots, ws_slot floats).
 */
typedef struct dw_job {
  const nto_layer *l;
  const float *x, *w, *bias, *dy;
  float *y, *dx, *dw, *ws;
} dw_job;

static void dw_range(void *ctx, size_t c0, size_t c1, int slot) {
  const dw_job *j = ctx;
  const conv_priv *p = j->l->priv;
  const conv_geom *g = &p->g;
  size_t in_img = (size_t)g->c * g->h * g->w;
  size_t out_img = (size_t)g->f * g->oh * g->ow;
  float *ws = j->ws ? j->ws + (size_t)slot * p->ws_slot : NULL;
  int s1 = g->sh == 1 && g->sw == 1, a = (int)c0, b = (int)c1;
  for (int n = 0; n < j->l->batch; n++) {
    const float *xn = j->x + (size_t)n * in_img;
    if (!j->dy) {
      float *yn = j->y + (size_t)n * out_img;
      if (s1)
        depthwise_forward_s1(g, xn, j->w, j->bias, yn, ws, a, b);
      else
        depthwise_forward(g, xn, j->w, j->bias, yn, a, b);
      continue;
    }
    const float *dyn = j->dy + (size_t)n * out_img;
    float *dxn = j->dx ? j->dx + (size_t)n * in_img : NULL;
    if (s1)
      depthwise_backward_s1(g, xn, j->w, dyn, dxn, j->dw, ws, a, b);
    else
      depthwise_backward(g, xn, j->w, dyn, dxn, j->dw, a, b);
  }
}

/* Blocks: a GEMM that is not split by chunks of images is split into
 * min(n, CONV_BLOCKS) fixed blocks of its filters (forward), input channels
 * (dX, dW) or rows, block b of n items being [n*b/nb, n*(b+1)/nb). Each
 * block is a single-threaded GEMM and the threads take whole blocks, so
 * the GEMMs (and their rounding) are the same at any thread count. */
#define CONV_BLOCKS 4

static int conv_blocks(int n) { return n < CONV_BLOCKS ? n : CONV_BLOCKS; }

static void block_range(int n, size_t b, int *lo, int *hi) {
  int nb = conv_blocks(n);
  *lo = (int)((long)n * (long)b / nb);
  *hi = (int)((long)n * (long)(b + 1) / nb);
}

/* Chunk c of nch over a batch of n: its first image and size (sizes
 * differ by at most one). */
static void chunk_range(int n, int nch, int c, int *n0, int *k) {
  int base = n / nch, rem = n % nch;
  *n0 = c * base + (c < rem ? c : rem);
  *k = base + (c < rem);
}

/*
 * Column matrix (kcol, k*OHW) of group gi of the k images from x (image j
 * in columns [j*OHW, (j+1)*OHW)), built in col; one image of a 1x1 kernel
 * (PATH_1X1) is its own column matrix and is returned in place.
 */
static const float *chunk_columns(const conv_priv *p, const float *x, int gi,
                                  int k, float *col) {
  const conv_geom *g = &p->g;
  size_t in_img = (size_t)g->c * g->h * g->w, ohw = (size_t)g->oh * g->ow;
  const float *xg = x + (size_t)gi * g->cg * g->h * g->w;
  if (k == 1 && p->path == PATH_1X1)
    return xg;
  for (int j = 0; j < k; j++)
    im2col(g, xg + (size_t)j * in_img, col + (size_t)j * ohw, (size_t)k * ohw,
           0, g->cg);
  return col;
}

/* dY rows (filters) [f0, f0 + m) of the k images from dy side by side,
 * (m, k*OHW), gathered in tmp; one image's rows already are that matrix
 * and are returned in place. */
static const float *chunk_dy(const conv_geom *g, const float *dy, int f0, int m,
                             int k, float *tmp) {
  size_t out_img = (size_t)g->f * g->oh * g->ow, ohw = (size_t)g->oh * g->ow;
  size_t ld = (size_t)k * ohw;
  const float *d = dy + (size_t)f0 * ohw;
  if (k == 1)
    return d;
  for (int j = 0; j < k; j++)
    for (int fi = 0; fi < m; fi++)
      memcpy(tmp + (size_t)fi * ld + (size_t)j * ohw,
             d + (size_t)j * out_img + (size_t)fi * ohw, ohw * sizeof *tmp);
  return tmp;
}

/*
 * A pass over chunks [c0, c1) of the batch, in workspace slot `slot`
 * (parallel.h): the chunks' images, their outputs (forward) or their dX
 * (backward) are the range's own, so the chunks can run side by side.
 */
typedef struct chunk_job {
  const nto_layer *l;
  const float *x, *w, *bias, *dy; /* whole batch */
  float *y, *dx, *ws;
} chunk_job;

/* ws + off, or NULL when there is no workspace (a model whose layers need
 * none gets none; the offset is then never used). */
static float *ws_at(float *ws, size_t off) { return ws ? ws + off : NULL; }

/*
 * The GEMM of a batch that is one chunk, split into blocks (see
 * CONV_BLOCKS): group gi, the chunk's column matrix src (kcol, ld) and dY
 * dyc (fg, ld), ld = batch*OHW; tmp and col in workspace slot 0.
 */
typedef struct block_job {
  const chunk_job *j;
  int gi;
  const float *src, *dyc;
  float *col, *tmp;
} block_job;

/* im2col rows of input channels [c0, c1) of group gi, all images. */
static void columns_range(void *ctx, size_t c0, size_t c1, int slot) {
  const block_job *bj = ctx;
  const nto_layer *l = bj->j->l;
  const conv_geom *g = &((const conv_priv *)l->priv)->g;
  size_t in_img = (size_t)g->c * g->h * g->w, ohw = (size_t)g->oh * g->ow;
  const float *xg = bj->j->x + (size_t)bj->gi * g->cg * g->h * g->w;
  (void)slot;
  for (int i = 0; i < l->batch; i++)
    im2col(g, xg + (size_t)i * in_img, bj->col + (size_t)i * ohw,
           (size_t)l->batch * ohw, (int)c0, (int)c1);
}

/* Forward, filter blocks [b0, b1) of group gi: y rows (with the bias). */
static void forward_blocks(void *ctx, size_t b0, size_t b1, int slot) {
  const block_job *bj = ctx;
  const nto_layer *l = bj->j->l;
  const conv_geom *g = &((const conv_priv *)l->priv)->g;
  size_t out_img = (size_t)g->f * g->oh * g->ow, ohw = (size_t)g->oh * g->ow;
  size_t ld = (size_t)l->batch * ohw;
  const float *wg = bj->j->w + (size_t)bj->gi * g->fg * g->kcol;
  const float *bg = bj->j->bias ? bj->j->bias + (size_t)bj->gi * g->fg : NULL;
  float *yg = bj->j->y + (size_t)bj->gi * g->fg * ohw;
  (void)slot;
  for (size_t b = b0; b < b1; b++) {
    int f0, f1;
    block_range(g->fg, b, &f0, &f1);
    int m = f1 - f0;
    const float *wb = wg + (size_t)f0 * g->kcol;
    if (l->batch == 1) { /* in place: y rows (m, ohw) = bias + wb . src */
      float *yb = yg + (size_t)f0 * ohw;
      fill_bias(yb, bg ? bg + f0 : NULL, m, ohw);
      cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, m, (int)ohw,
                  g->kcol, 1.0f, wb, g->kcol, bj->src, (int)ohw, 1.0f, yb,
                  (int)ohw);
      continue;
    }
    float *tb = bj->tmp + (size_t)f0 * ld; /* tmp rows (m, ld) */
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, m, (int)ld, g->kcol,
                1.0f, wb, g->kcol, bj->src, (int)ld, 0.0f, tb, (int)ld);
    for (int i = 0; i < l->batch; i++)
      for (int fi = f0; fi < f1; fi++) {
        const float *t = bj->tmp + (size_t)fi * ld + (size_t)i * ohw;
        float *r = yg + (size_t)i * out_img + (size_t)fi * ohw;
        float v = bg ? bg[fi] : 0.0f;
        for (size_t q = 0; q < ohw; q++)
          r[q] = t[q] + v;
      }
  }
}

/* Forward of a batch that is one chunk: columns by input channels, then the
 * GEMM by filter blocks, per group. */
static void forward_one_chunk(const chunk_job *j) {
  const nto_layer *l = j->l;
  const conv_priv *p = l->priv;
  const conv_geom *g = &p->g;
  size_t ld = (size_t)l->batch * g->oh * g->ow;
  for (int gi = 0; gi < g->groups; gi++) {
    block_job bj = {j, gi, NULL, NULL, j->ws, ws_at(j->ws, g->kcol * ld)};
    if (l->batch == 1 && p->path == PATH_1X1) {
      bj.src = j->x + (size_t)gi * g->cg * g->h * g->w;
    } else {
      nto_parallel_for((size_t)g->cg, 1, 0, columns_range, &bj);
      bj.src = bj.col;
    }
    nto_parallel_for_blas((size_t)conv_blocks(g->fg), 1, 0, forward_blocks,
                          &bj);
  }
}

/* dY rows [f0, f1) of group gi, all images side by side, into tmp. */
static void gather_range(void *ctx, size_t f0, size_t f1, int slot) {
  const block_job *bj = ctx;
  const nto_layer *l = bj->j->l;
  const conv_geom *g = &((const conv_priv *)l->priv)->g;
  size_t ld = (size_t)l->batch * g->oh * g->ow;
  (void)slot;
  chunk_dy(g, bj->j->dy, bj->gi * g->fg + (int)f0, (int)(f1 - f0), l->batch,
           bj->tmp + f0 * ld);
}

/* dX, input channel blocks [b0, b1) of group gi: their rows of
 * d(columns) = wg^T . dyc, then col2im into their channels of every image
 * (zeroed first); one 1x1 image: the GEMM writes dX itself. */
static void dx_blocks(void *ctx, size_t b0, size_t b1, int slot) {
  const block_job *bj = ctx;
  const nto_layer *l = bj->j->l;
  const conv_priv *p = l->priv;
  const conv_geom *g = &p->g;
  size_t in_img = (size_t)g->c * g->h * g->w, hw = (size_t)g->h * g->w;
  size_t ohw = (size_t)g->oh * g->ow, ld = (size_t)l->batch * ohw;
  size_t kk = (size_t)g->kh * g->kw, xoff = (size_t)bj->gi * g->cg * hw;
  const float *wg = bj->j->w + (size_t)bj->gi * g->fg * g->kcol;
  int in_place = l->batch == 1 && p->path == PATH_1X1;
  (void)slot;
  for (size_t b = b0; b < b1; b++) {
    int c0, c1;
    block_range(g->cg, b, &c0, &c1);
    int rows = (int)((size_t)(c1 - c0) * kk);
    float *dcol = in_place ? bj->j->dx + xoff + (size_t)c0 * hw
                           : bj->col + (size_t)c0 * kk * ld;
    /* dcol (rows, ld) = wg[:, c0*kk ..]^T (rows, fg) . dyc (fg, ld) */
    cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, rows, (int)ld, g->fg,
                1.0f, wg + (size_t)c0 * kk, g->kcol, bj->dyc, (int)ld, 0.0f,
                dcol, (int)ld);
    if (in_place)
      continue;
    for (int i = 0; i < l->batch; i++) {
      float *dxi = bj->j->dx + (size_t)i * in_img + xoff;
      memset(dxi + (size_t)c0 * hw, 0, (size_t)(c1 - c0) * hw * sizeof *dxi);
      col2im_add(g, bj->col + (size_t)i * ohw, ld, dxi, c0, c1);
    }
  }
}

/* dX of a batch that is one chunk: dY gathered by filters, then the GEMM
 * and col2im by input channel blocks, per group. */
static void dx_one_chunk(const chunk_job *j) {
  const nto_layer *l = j->l;
  const conv_geom *g = &((const conv_priv *)l->priv)->g;
  size_t ld = (size_t)l->batch * g->oh * g->ow;
  for (int gi = 0; gi < g->groups; gi++) {
    block_job bj = {j, gi, NULL, NULL, j->ws, ws_at(j->ws, g->kcol * ld)};
    if (l->batch == 1) {
      bj.dyc = j->dy + (size_t)gi * g->fg * ld;
    } else {
      nto_parallel_for((size_t)g->fg, 1, 0, gather_range, &bj);
      bj.dyc = bj.tmp;
    }
    nto_parallel_for_blas((size_t)conv_blocks(g->cg), 1, 0, dx_blocks, &bj);
  }
}

/* Runs a pass over the batch: with several chunks, fn over them side by
 * side on the compute threads (each GEMM single-threaded,
 * nto_parallel_for_blas); a batch of one chunk by blocks (one(j)). Which
 * GEMMs run depends on the plan only, so the results are the same at any
 * thread count. */
static void run_chunks(const conv_priv *p, int batch, nto_range_fn fn,
                       void (*one)(const chunk_job *), chunk_job *j) {
  int nch = n_chunks(p, batch);
  if (nch >= 2)
    nto_parallel_for_blas((size_t)nch, 1, p->ws_slots, fn, j);
  else
    one(j);
}

/* Forward of chunks [c0, c1): im2col, one GEMM per group, bias. */
static void forward_chunks(void *ctx, size_t c0, size_t c1, int slot) {
  const chunk_job *j = ctx;
  const nto_layer *l = j->l;
  const conv_priv *p = l->priv;
  const conv_geom *g = &p->g;
  const float *w = j->w, *bias = j->bias;
  size_t in_img = (size_t)g->c * g->h * g->w;
  size_t out_img = (size_t)g->f * g->oh * g->ow;
  size_t ohw = (size_t)g->oh * g->ow;
  float *ws = ws_at(j->ws, (size_t)slot * p->ws_slot);
  int nch = n_chunks(p, l->batch);
  for (int c = (int)c0; c < (int)c1; c++) {
    int n0, k;
    chunk_range(l->batch, nch, c, &n0, &k);
    const float *x = j->x + (size_t)n0 * in_img;
    float *y = j->y + (size_t)n0 * out_img;
    size_t ld = (size_t)k * ohw; /* columns of the chunk */
    float *col = ws, *tmp = ws_at(ws, g->kcol * ld);
    for (int gi = 0; gi < g->groups; gi++) {
      const float *wg = w + (size_t)gi * g->fg * g->kcol;
      const float *bg = bias ? bias + (size_t)gi * g->fg : NULL;
      const float *src = chunk_columns(p, x, gi, k, col);
      if (k == 1) {
        /* one image: compute in place, 1x1 reads the input directly */
        float *yg = y + (size_t)gi * g->fg * ohw;
        fill_bias(yg, bg, g->fg, ohw);
        /* yg (fg, ohw) += wg (fg, kcol) . col (kcol, ohw) */
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, g->fg, (int)ohw,
                    g->kcol, 1.0f, wg, g->kcol, src, (int)ohw, 1.0f, yg,
                    (int)ohw);
        continue;
      }
      /* tmp (fg, k*ohw) = wg (fg, kcol) . col (kcol, k*ohw) */
      cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, g->fg, (int)ld,
                  g->kcol, 1.0f, wg, g->kcol, src, (int)ld, 0.0f, tmp, (int)ld);
      for (int j = 0; j < k; j++) {
        float *yg = y + (size_t)j * out_img + (size_t)gi * g->fg * ohw;
        for (int fi = 0; fi < g->fg; fi++) {
          const float *t = tmp + (size_t)fi * ld + (size_t)j * ohw;
          float *r = yg + (size_t)fi * ohw, v = bg ? bg[fi] : 0.0f;
          for (size_t i = 0; i < ohw; i++)
            r[i] = t[i] + v;
        }
      }
    }
  }
}

/* f->in[0]: (N, C, H, W) -> f->out: (N, F, OH, OW). ws: see the top.
 * Writes nothing else: also the replay. */
static void conv_output(nto_layer *l, const nto_fwd *f) {
  conv_priv *p = l->priv;
  const float *w = f->w[p->iw];
  const float *bias = p->ib >= 0 ? f->w[p->ib] : NULL;
  if (p->path == PATH_DEPTHWISE) {
    dw_job j = {l, f->in[0], w, bias, NULL, f->out, NULL, NULL, f->ws};
    nto_parallel_for((size_t)p->g.c, 1, p->ws_slots, dw_range, &j);
    return;
  }
  if (p->wino) {
    nto_wino_filter(w, p->g.f, p->g.c, f->ws);
    nto_wino_run(&p->wfwd, f->in[0], f->ws, 0, bias, f->ws + p->wino_u, f->out);
    return;
  }
  chunk_job j = {l, f->in[0], w, bias, NULL, f->out, NULL, f->ws};
  run_chunks(p, l->batch, forward_chunks, forward_one_chunk, &j);
}

/* The output (conv_output) and l->reg_loss. */
static void conv_forward(nto_layer *l, const nto_fwd *f) {
  l->reg_loss = nto_layer_reg_loss(l, f->w);
  conv_output(l, f);
}

/* dX of chunks [c0, c1): zeroed, then per group one GEMM into the columns
 * and col2im (or, one 1x1 image, one GEMM straight into dX). */
static void dx_chunks(void *ctx, size_t c0, size_t c1, int slot) {
  const chunk_job *j = ctx;
  const nto_layer *l = j->l;
  const conv_priv *p = l->priv;
  const conv_geom *g = &p->g;
  size_t in_img = (size_t)g->c * g->h * g->w;
  size_t out_img = (size_t)g->f * g->oh * g->ow;
  size_t hw = (size_t)g->h * g->w, ohw = (size_t)g->oh * g->ow;
  float *ws = ws_at(j->ws, (size_t)slot * p->ws_slot);
  int nch = n_chunks(p, l->batch);
  for (int c = (int)c0; c < (int)c1; c++) {
    int n0, k;
    chunk_range(l->batch, nch, c, &n0, &k);
    const float *dy = j->dy + (size_t)n0 * out_img;
    float *dx = j->dx + (size_t)n0 * in_img;
    size_t ld = (size_t)k * ohw; /* columns of the chunk */
    float *col = ws, *tmp = ws_at(ws, g->kcol * ld);
    /* the GEMM writes every element of a single 1x1 image's dX (beta = 0);
     * col2im accumulates */
    int in_place = k == 1 && p->path == PATH_1X1;
    if (!in_place)
      memset(dx, 0, (size_t)k * in_img * sizeof *dx);
    for (int gi = 0; gi < g->groups; gi++) {
      const float *wg = j->w + (size_t)gi * g->fg * g->kcol;
      size_t xoff = (size_t)gi * g->cg * hw;
      /* dyc (fg, ld): dY of the chunk's images side by side */
      const float *dyc = chunk_dy(g, dy, gi * g->fg, g->fg, k, tmp);
      /* dcol (kcol, ld) = wg^T (kcol, fg) . dyc (fg, ld); for a single
       * 1x1 image the column matrix is dx itself. */
      float *dcol = in_place ? dx + xoff : col;
      cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, g->kcol, (int)ld,
                  g->fg, 1.0f, wg, g->kcol, dyc, (int)ld, 0.0f, dcol, (int)ld);
      if (!in_place)
        for (int i = 0; i < k; i++)
          col2im_add(g, col + (size_t)i * ohw, ld,
                     dx + (size_t)i * in_img + xoff, 0, g->cg);
    }
  }
}

/* db (F) = sum of dY over images and positions, filters [f0, f1); in
 * double, four partial sums (one chain of dependent adds would run at the
 * latency of an add). Each filter is one range's: the same bits at any
 * thread count. */
typedef struct db_job {
  const nto_layer *l;
  const float *dy; /* (N, F, OH, OW) */
  float *db;       /* (F) */
} db_job;

static void db_range(void *ctx, size_t f0, size_t f1, int slot) {
  const db_job *j = ctx;
  const conv_geom *g = &((const conv_priv *)j->l->priv)->g;
  size_t out_img = (size_t)g->f * g->oh * g->ow, ohw = (size_t)g->oh * g->ow;
  (void)slot;
  for (size_t fi = f0; fi < f1; fi++) {
    double s[4] = {0.0, 0.0, 0.0, 0.0};
    for (int n = 0; n < j->l->batch; n++) {
      const float *d = j->dy + (size_t)n * out_img + fi * ohw;
      size_t i = 0;
      for (; i + 4 <= ohw; i += 4)
        for (int q = 0; q < 4; q++)
          s[q] += d[i + q];
      for (; i < ohw; i++)
        s[0] += d[i];
    }
    j->db[fi] = (float)((s[0] + s[1]) + (s[2] + s[3]));
  }
}

/*
 * dW rows of one chunk of k images and one group, by input channel blocks
 * (CONV_BLOCKS) [b0, b1): the block's rows of the column matrix (cached,
 * im2col into col, or the input itself for one 1x1 image), then
 *   dwg[:, c0*kh*kw .. c1*kh*kw) (+)= dyc (m, k*OHW) . rows^T
 * (beta 0 for the first chunk, 1 after). Blocks write disjoint rows of col
 * and columns of dwg.
 */
typedef struct dw_cols_job {
  const conv_priv *p;
  const float *xg;     /* the group's input of the chunk's first image */
  const float *cached; /* the chunk's columns, row stride ldx, or NULL */
  size_t ldx;
  const float *dyc; /* (m, k*OHW) */
  float *col;       /* (kcol, k*OHW) */
  int k, m;
  float beta;
  float *dwg; /* (m, kcol) */
} dw_cols_job;

static void dw_cols_range(void *ctx, size_t b0, size_t b1, int slot) {
  const dw_cols_job *j = ctx;
  const conv_geom *g = &j->p->g;
  size_t in_img = (size_t)g->c * g->h * g->w, ohw = (size_t)g->oh * g->ow;
  size_t ld = (size_t)j->k * ohw, kk = (size_t)g->kh * g->kw;
  (void)slot;
  for (size_t b = b0; b < b1; b++) {
    int c0, c1;
    block_range(g->cg, b, &c0, &c1);
    const float *rows;
    size_t ldx = ld;
    if (j->cached) {
      rows = j->cached + (size_t)c0 * kk * j->ldx;
      ldx = j->ldx;
    } else if (j->k == 1 && j->p->path == PATH_1X1) {
      rows = j->xg + (size_t)c0 * ohw; /* channel ci is row ci */
    } else {
      for (int i = 0; i < j->k; i++)
        im2col(g, j->xg + (size_t)i * in_img, j->col + (size_t)i * ohw, ld, c0,
               c1);
      rows = j->col + (size_t)c0 * kk * ld;
    }
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, j->m,
                (int)((size_t)(c1 - c0) * kk), (int)ld, 1.0f, j->dyc, (int)ld,
                rows, (int)ldx, j->beta, j->dwg + (size_t)c0 * kk, g->kcol);
  }
}

/* dW (F, C/G, kh, kw) by im2col ("="), from b->in[0] and b->dout. */
static void dw_im2col(const nto_layer *l, const nto_bwd *b, float *dw) {
  const conv_priv *p = l->priv;
  const conv_geom *g = &p->g;
  size_t in_img = (size_t)g->c * g->h * g->w;
  size_t out_img = (size_t)g->f * g->oh * g->ow;
  size_t hw = (size_t)g->h * g->w, ohw = (size_t)g->oh * g->ow;
  /* dW sums over the whole batch: chunk after chunk, in workspace slot 0,
   * each chunk's GEMM in fixed blocks of input channels (CONV_BLOCKS) that
   * the compute threads share out */
  int nch = n_chunks(p, l->batch);
  for (int c = 0; c < nch; c++) {
    int n0, k;
    chunk_range(l->batch, nch, c, &n0, &k);
    const float *dy = b->dout + (size_t)n0 * out_img;
    size_t ld = (size_t)k * ohw; /* columns of the chunk */
    float *tmp = ws_at(b->ws, g->kcol * ld);
    for (int gi = 0; gi < g->groups; gi++) {
      dw_cols_job j = {
          .p = p,
          .xg = b->in[0] + (size_t)n0 * in_img + (size_t)gi * g->cg * hw,
          /* dyc (fg, ld): dY of the chunk's images side by side */
          .dyc = chunk_dy(g, dy, gi * g->fg, g->fg, k, tmp),
          .col = b->ws,
          .k = k,
          .m = g->fg,
          .beta = n0 == 0 ? 0.0f : 1.0f, /* the first chunk writes */
          .dwg = dw + (size_t)gi * g->fg * g->kcol};
      nto_parallel_for_blas((size_t)conv_blocks(g->cg), 1, 0, dw_cols_range,
                            &j);
    }
  }
}

/*
 * dout: (N, F, OH, OW), in[0]: (N, C, H, W) -> din[0]: (N, C, H, W),
 * dw[weight]: (F, C/G, kh, kw), dw[bias]: (F); each written with "=" and
 * skipped when NULL.
 */
static void conv_backward(nto_layer *l, const nto_bwd *b) {
  conv_priv *p = l->priv;
  const conv_geom *g = &p->g;
  const float *w = b->w[p->iw];
  float *dw = b->dw[p->iw];
  float *db = p->ib >= 0 ? b->dw[p->ib] : NULL;
  float *din = b->din[0];
  size_t in_img = (size_t)g->c * g->h * g->w;

  if (db) {
    db_job j = {l, b->dout, db};
    nto_parallel_for((size_t)g->f, 1, 0, db_range, &j);
  }
  if (!dw && !din)
    return;
  if (p->path == PATH_DEPTHWISE) {
    if (din)
      memset(din, 0, (size_t)l->batch * in_img * sizeof *din);
    if (dw)
      memset(dw, 0, (size_t)g->f * g->kcol * sizeof *dw);
    dw_job j = {l, b->in[0], w, NULL, b->dout, NULL, din, dw, b->ws};
    nto_parallel_for((size_t)g->c, 1, p->ws_slots, dw_range, &j);
    if (dw)
      nto_layer_reg_grad(l, p->iw, w, dw, (size_t)g->f * g->kcol);
    return;
  }
  /* dW, then dX (its filter transform where dW's workspace was) */
  if (dw && p->wino_dw)
    nto_wino_dw(&p->wdw, b->in[0], b->dout, 0, g->f, b->ws, NULL, 0, dw);
  else if (dw)
    dw_im2col(l, b, dw);
  if (dw)
    nto_layer_reg_grad(l, p->iw, w, dw, (size_t)g->f * g->kcol);
  if (din && p->wino) {
    nto_wino_filter(w, g->f, g->c, b->ws);
    nto_wino_run(&p->wdx, b->dout, b->ws, 1, NULL, b->ws + p->wino_u, din);
  } else if (din) {
    chunk_job j = {l, NULL, w, NULL, b->dout, NULL, din, b->ws};
    run_chunks(p, l->batch, dx_chunks, dx_one_chunk, &j);
  }
}

/* The regularizer's term of rows [r0, r1) of dW, in dst (layer.h
 * nto_layer_reg_grad): b->w[j] is read only with a regularizer (a test
 * may pass none). */
static void rows_reg_grad(const nto_layer *l, const nto_bwd *b, int j, int r0,
                          int r1, float *dst) {
  const conv_priv *p = l->priv;
  if (!(l->w[j].l2 > 0.0f))
    return;
  size_t row = (size_t)p->g.kcol;
  nto_layer_reg_grad(l, j, b->w[j] + (size_t)r0 * row, dst,
                     (size_t)(r1 - r0) * row);
}

/* Rows of the weight gradient: one filter (C/G*kh*kw elements); not for
 * depthwise kernels (their weights are small) or the bias. */
static int conv_weight_row(const nto_layer *l, int j) {
  const conv_priv *p = l->priv;
  return j == p->iw && p->path != PATH_DEPTHWISE ? p->g.kcol : 0;
}

/*
 * Floats of the column cache of the weight's rows: the column matrix of the
 * whole batch per group, (G, K, N*OHW), image n in columns [n*OHW,
 * (n+1)*OHW) of each group's matrix; with dW by Winograd, V of the batch
 * (nto_wino_dw_cache_floats); 0 where there is none (not the weight, or
 * one image of a 1x1 kernel: its input is its column matrix).
 */
static size_t conv_weight_rows_cache(const nto_layer *l, int j) {
  const conv_priv *p = l->priv;
  const conv_geom *g = &p->g;
  if (conv_weight_row(l, j) == 0 || (l->batch == 1 && p->path == PATH_1X1))
    return 0;
  if (p->wino_dw)
    return nto_wino_dw_cache_floats(&p->wdw);
  return (size_t)g->groups * g->kcol * l->batch * g->oh * g->ow;
}

/*
 * dst ((r1 - r0), kcol) = rows [r0, r1) of dW: the same GEMMs as
 * conv_backward's dW, restricted to the filters r0..r1-1 of each group
 * (each element sums over the same images in the same order; OpenBLAS may
 * still round a row differently with fewer rows: test_conv2d checks the
 * rows within rounding). With a cache (conv_weight_rows_cache floats) the
 * column matrices come from it (fill: im2col of the batch into it first)
 * instead of an im2col per call; the GEMMs are the same, only their B
 * operand's leading dimension differs, so the rows are the same bits.
 */
static void conv_backward_weight_rows(nto_layer *l, const nto_bwd *b, int j,
                                      int r0, int r1, float *dst, float *cache,
                                      int fill) {
  conv_priv *p = l->priv;
  const conv_geom *g = &p->g;
  assert(j == p->iw && p->path != PATH_DEPTHWISE && 0 <= r0 && r0 < r1 &&
         r1 <= g->f);
  size_t in_img = (size_t)g->c * g->h * g->w, hw = (size_t)g->h * g->w;
  size_t out_img = (size_t)g->f * g->oh * g->ow, ohw = (size_t)g->oh * g->ow;
  size_t cache_ld = (size_t)l->batch * ohw; /* columns of the cache */
  if (p->wino_dw) {
    nto_wino_dw(&p->wdw, b->in[0], b->dout, r0, r1, b->ws, cache, fill, dst);
    rows_reg_grad(l, b, j, r0, r1, dst);
    return;
  }
  if (cache && fill) {
    chunk_job cj = {.l = l, .x = b->in[0]};
    for (int gi = 0; gi < g->groups; gi++) {
      block_job bj = {
          .j = &cj, .gi = gi, .col = cache + (size_t)gi * g->kcol * cache_ld};
      nto_parallel_for((size_t)g->cg, 1, 0, columns_range, &bj);
    }
  }
  /* A U step after the cache was filled is not handed the input (in[0]
   * NULL): no offset may be applied to it, not even zero (C11 6.5.6). */
  const float *x = b->in[0];
  int nch = n_chunks(p, l->batch);
  for (int c = 0; c < nch; c++) {
    int n0, k;
    chunk_range(l->batch, nch, c, &n0, &k);
    const float *dy = b->dout + (size_t)n0 * out_img;
    size_t ld = (size_t)k * ohw;
    float *tmp = ws_at(b->ws, g->kcol * ld);
    for (int gi = r0 / g->fg; gi <= (r1 - 1) / g->fg; gi++) {
      int fa = r0 > gi * g->fg ? r0 : gi * g->fg; /* filters [fa, fb) */
      int fb = r1 < (gi + 1) * g->fg ? r1 : (gi + 1) * g->fg;
      dw_cols_job jb = {
          .p = p,
          .xg = x ? x + (size_t)n0 * in_img + (size_t)gi * g->cg * hw : NULL,
          .cached =
              cache ? cache + (size_t)gi * g->kcol * cache_ld + (size_t)n0 * ohw
                    : NULL,
          .ldx = cache_ld,
          .dyc = chunk_dy(g, dy, fa, fb - fa, k, tmp),
          .col = b->ws,
          .k = k,
          .m = fb - fa,
          .beta = n0 == 0 ? 0.0f : 1.0f,
          .dwg = dst + (size_t)(fa - r0) * g->kcol};
      nto_parallel_for_blas((size_t)conv_blocks(g->cg), 1, 0, dw_cols_range,
                            &jb);
    }
  }
  rows_reg_grad(l, b, j, r0, r1, dst);
}

/* ops.narrow: a block of `channels` filters of a convolution without
 * groups (NTO_NARROW_OUTPUT), or `channels` channels of a depthwise one
 * (one filter per input channel: NTO_NARROW_CHANNELS). */
static int conv_narrow(nto_layer *l, int mode, int channels) {
  conv_priv *p = l->priv;
  if (mode == NTO_NARROW_OUTPUT && p->groups == 1) {
    p->filters = channels;
    return 0;
  }
  if (mode == NTO_NARROW_CHANNELS && p->groups > 1 &&
      p->groups == l->in_shape[0].c && p->filters == p->groups) {
    p->filters = p->groups = channels;
    p->depthwise = 1;
    l->in_shape[0].c = channels;
    return 0;
  }
  return NTO_EINVAL;
}

const nto_layer_ops nto_conv2d_layer = {
    .type = "conv2d",
    .priv_size = sizeof(conv_priv),
    .min_inputs = 1,
    .max_inputs = 1,
    .defaults = conv_defaults,
    .set_prop = conv_set_prop,
    .plan = conv_plan,
    .forward = conv_forward,
    .backward = conv_backward,
    .replay = conv_output,
    .weight_row = conv_weight_row,
    .weight_rows_cache = conv_weight_rows_cache,
    .backward_weight_rows = conv_backward_weight_rows,
    .narrow = conv_narrow,
};
