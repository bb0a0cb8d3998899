/*
 * tensors.h - the tensor table of a model: every tensor a training or
 * inference pass touches, with the decisions that fix which tensors exist.
 *
 * Built once from the graph (graph.h), in this order, so that tensor
 * indices (and with them checkpoints, which list persistent tensors in
 * table order) do not depend on anything else: per layer, its output
 * (a view, flatten or multiout, shares its input's), each weight with its
 * optimizer state (per update chunk) and its gradient (whole, or one tensor
 * of gradient rows per chunk), its saved tensors, and one input-gradient
 * tensor per input edge (or none: computed in place, or not needed); then
 * the recomputed twins; then the loss gradient.
 *
 * Update chunks. A weight larger than the update chunk has its optimizer
 * state in chunks of chunk_elems elements, each updated in a step of its
 * own (a U step, steps.h), so that its state is never in RAM at once.
 *
 * Gradient rows (nto_chunk_grads). Where a layer computes a weight's
 * gradient by rows (layer.h weight_row), the gradient of a weight of
 * several chunks may be computed chunk by chunk in its U steps, into one
 * small tensor per chunk, so that the whole gradient never exists
 * (ResNet-18 b10 window 1: 24.6 -> 19.8 MiB of resident tensors).
 *
 * Recomputed twins (nto_recompute). An output that backward may compute
 * again instead of keeping gets a twin tensor that an R step (steps.h)
 * writes right before its first backward reader, which reads the twin.
 *
 * Channel groups (nto_tensors_opts.group_bytes). A run of layers whose
 * outputs are large and whose arithmetic keeps channels apart is computed
 * group by group of channels, so that a step holds one group's share of
 * those outputs instead of all of them: a chain is a convolution without
 * groups (its producer, P), which computes a group of its filters from
 * its whole input, followed by per-channel layers (batch normalization,
 * an element-wise activation, a depthwise convolution: layer.h narrow),
 * each the single consumer of the one before. The chain ends (E) at the
 * first per-channel layer whose output is no larger than group_bytes (a
 * stride-2 depthwise convolution), or the last one before a layer that is
 * not per-channel. Each of its layers runs as one step per group (layer.h
 * nto_layer_narrow), group-major: F_P^0 .. F_E^0, F_P^1 .. F_E^1, ...;
 * backward from the last group down: B_E^{G-1} .. B_P^{G-1}, ... B_P^0.
 * The outputs of P and of the layers between (I) are one tensor per group
 * (their gradients too); E writes its group into its whole output, which
 * the layers after it read as usual (E's output is never recomputed); B_E
 * takes its group's share of the whole output gradient. P's input
 * gradient sums the groups' shares: the first (G-1) into the input
 * gradient, each other into a partial tensor added to it. A chain layer's
 * weights stay whole; its group steps read and write their channels'
 * blocks; the update runs in the last of its B steps (group 0). Results
 * are the same at every window (the steps are a property of the model and
 * batch); they differ from the ungrouped model by rounding (P's GEMMs have
 * other shapes, P's input gradient is a sum of G GEMMs), where batch
 * normalization, activations and depthwise convolutions are bit for bit
 * the same per channel (test_narrow).
 *
 * Frozen layers (layer.h trainable). A layer trains when it has a weight
 * it updates. Backward runs only where dL/d(output) is needed: at layers
 * that train and at every layer on a path from one to the loss. Below the
 * first trainable layer there is no backward at all: no input gradient,
 * no saved tensor or output kept for a backward step, and a frozen weight
 * is only read (never dirty, so never written to swap).
 *
 * Pure: no I/O, no threads; one thread builds and reads a table.
 */
#ifndef NTO_TENSORS_H
#define NTO_TENSORS_H

#include "graph.h"
#include "tensor.h"

#include <stddef.h>

/* Default update chunk (bytes): see nto_tensors_opts.update_chunk. */
#define NTO_UPDATE_CHUNK (1u << 20)

/* Where the gradient of a weight of several update chunks is computed:
 * whole in B_i, or chunk by chunk in its U steps, next to the update of
 * the chunk. Results differ by rounding between whole and chunked
 * gradients (bit-identical across windows either way). */
typedef enum {
  NTO_CHUNK_GRADS_AUTO, /* by chunk where the layer's rows cache (the
                           batch's column matrix, layer.h
                           weight_rows_cache) is no larger than the whole
                           gradient: less memory at about the same time
                           (ResNet-18's last stage at batch 10); else
                           whole */
  NTO_CHUNK_GRADS_ON,   /* by chunk wherever the layer can (also without
                           a cache: slower, least memory) */
  NTO_CHUNK_GRADS_OFF,  /* always whole */
} nto_chunk_grads;

/* What backward recomputes instead of keeping it from the forward.
 * Recomputed outputs are bit for bit the forward's (layer.h replay), so
 * results never depend on this; memory and swap traffic do.
 *
 * Activations: an activation (relu, relu6, leaky_relu, tanh, none) whose
 * input is a batch_normalization output read by nothing else is written
 * again from what batch normalization's backward keeps anyway, in one
 * element-wise pass: ResNet-18 b10 window 1 moves 201.1 + 167.1 instead of
 * 220.4 + 187.1 MiB per iteration.
 *
 * Convolutions: a convolution's output read by one layer whose backward
 * reads it, cheap per output element (at most NTO_RECOMPUTE_MACS
 * multiply-adds: MobileNetV2's 1x1 expansions), from an input kept anyway,
 * with its first backward reader at most NTO_RECOMPUTE_SPAN layers on:
 * MobileNetV2 224 b10 window 4 moves 62.5 instead of 185.0 MiB each way
 * per iteration. */
typedef enum {
  NTO_RECOMPUTE_AUTO,        /* activations; convolutions too when the
                                tensors are offloaded, unless the memory
                                budget then refuses the model (tuner.h);
                                segments where the budget needs them
                                (model.h nto_model_create) or the caller
                                finds them faster (nto_segments_min_flops) */
  NTO_RECOMPUTE_ON,          /* activations and convolutions */
  NTO_RECOMPUTE_ACTIVATIONS, /* activations only */
  NTO_RECOMPUTE_OFF,         /* nothing: everything kept */
  NTO_RECOMPUTE_SEGMENTS,    /* activations, and convolutions of any cost
                                whose input is kept or recomputed itself
                                from a kept tensor (recompute_segments) */
  NTO_RECOMPUTE_CHEAP,       /* auto's plan without its fallbacks and
                                choices: activations, and cheap
                                convolutions when offloaded */
} nto_recompute;

/* Multiply-adds per output element up to which a convolution's output is
 * recomputed. Recomputing one element costs 2 x this many flops; keeping
 * it offloaded costs writing and reading 4 bytes: at 100 GFLOP/s of
 * small-K GEMM and 1.3 GB/s of swap each way (an x86-64 server core and
 * SSD), 256 multiply-adds (5 ns) cost less than the 8 bytes of I/O
 * (6 ns), and on flash far less. */
#define NTO_RECOMPUTE_MACS 256

/* Layers from a recomputed convolution to the first backward reader of
 * its output: conv -> batch_normalization -> activation -> its reader. A
 * longer span (ResNet's stem, read by a residual block) would keep the
 * twin through that block's backward, at its memory peak. */
#define NTO_RECOMPUTE_SPAN 3

typedef struct nto_tensors_opts {
  size_t update_chunk;         /* bytes; 0: NTO_UPDATE_CHUNK */
  nto_chunk_grads chunk_grads; /* default (0): auto */
  int opt_states;              /* optimizer state tensors per weight
                                  chunk (optimizer.h nto_opt_state_count) */
  nto_opt_state_format state_format; /* how they are stored (optimizer.h):
                                        a state tensor of a chunk of n
                                        elements in format f has the shape
                                        of ceil(nto_opt_state_bytes(f, n)
                                        / 4) floats */
  int recompute_act;           /* recompute activations */
  int recompute_conv;          /* recompute cheap convolutions */
  int recompute_segments;      /* with recompute_conv: convolutions of any
                                  cost, also from an input recomputed from
                                  a kept tensor (an activation after batch
                                  normalization of a kept input): segment
                                  recomputation as in gradient
                                  checkpointing (Chen et al. 2016), one
                                  segment per block of ResNet (its first
                                  convolution again from the block's
                                  input), where storage is slower than the
                                  replay */
  int segments_max;            /* with recompute_segments: at most this
                                  many segment convolutions (those only
                                  its rules recompute), the fewest
                                  multiply-adds per output element first,
                                  then the larger output, then the earlier
                                  layer; 0: all of them */
  size_t group_bytes;          /* channel groups: chains whose outputs
                                  are larger are computed in G groups, G
                                  the largest of those outputs' bytes over
                                  this, rounded up; 0: none */
  int compute_input_grad;      /* also dL/d(input batch) (tests) */
  int fused;                   /* the loss gradient is the last layer's
                                  input gradient (loss.h) */
  int logits_layer;            /* the layer whose output the loss reads */
} nto_tensors_opts;

typedef struct nto_tensors {
  nto_graph *g;       /* borrowed; layers' w[].tensor and saved[].tensor are set
                         by nto_tensors_build */
  int L;              /* layers */
  unsigned char *bwd; /* per layer: the training pass needs dL/d(its
                         output): the layer trains, or one it reads from,
                         directly or not, does (its B step computes
                         something; steps.c keeps an empty one for the
                         last and the input layer) */
  nto_tensor *t;      /* the table: n entries */
  int n, cap;
  int *out_t;      /* per layer: output tensor */
  int **edge_t;    /* per layer, per input edge: gradient tensor or -1 */
  int loss_grad_t; /* dL/d(out of last layer), -1 when fused */
  int (*pgrad_t)[NTO_MAX_WEIGHTS]; /* per layer, weight: whole gradient, -1 */
  /* Optimizer state: n_chunk[i][j] chunks of at most chunk_elems
   * elements; state_t[i][j][2k+q] is state q of chunk k (-1: none). */
  int (*n_chunk)[NTO_MAX_WEIGHTS];
  int *(*state_t)[NTO_MAX_WEIGHTS];
  size_t chunk_elems;
  /* Gradient rows: dw_first[i][j] + k is the tensor of the rows covering
   * chunk k (-1: whole gradient), dw_row[i][j] the row length, dw_cache the
   * layer's rows cache (layer.h weight_rows_cache) or -1. */
  int (*dw_first)[NTO_MAX_WEIGHTS];
  int (*dw_row)[NTO_MAX_WEIGHTS];
  int (*dw_cache)[NTO_MAX_WEIGHTS];
  /* Recomputed twins: re_t[t] (t < n_re) the twin of t, -1: kept;
   * re_at[i] the layer before whose B step layer i's R step runs, -1;
   * re_again[i] the layer before whose B step a second R step of layer
   * i runs, -1: none (a cheap convolution whose twin a segment needs
   * early, made again for its own reader rather than held in between);
   * re_conv[i]: that R step replays convolution i itself, else the batch
   * normalization before activation i, then i. */
  int *re_t, n_re;
  int *re_at, *re_again;
  unsigned char *re_conv;
  /* seg_conv[i]: convolution i is recomputed as a segment convolution
   * (o.segments_max); seg_candidates: how many there are without that
   * limit. */
  unsigned char *seg_conv;
  int seg_candidates;
  /* Channel groups: groups[i] the groups of layer i's steps (1: whole),
   * chain[i] its role ('P', 'I', 'E', 0: none); gl[i][g] its narrowed
   * copy for group g; gout[i][g] (P, I) the output tensor of group g (and
   * out_t[i] = gout[i][0]); gedge[i][g] (I, E) the tensor of group g of
   * dL/d(its input); gdout[i][g] (E) group g of dL/d(its output), as its
   * B step copies it from the whole; gpart[i] (P) the partial input
   * gradient (-1: none); gscratch[i] (E) a group of its output. NULL
   * arrays where no layer is grouped. */
  int *groups;
  char *chain;
  struct nto_group_layer **gl;
  int **gout, **gedge, **gdout;
  int *gpart, *gscratch;
  nto_tensors_opts o;
} nto_tensors;

/* Layer i narrowed to group g: channels [c0, c1) of its output, its
 * weights' and saved tensors' windows (layer.h nto_layer_narrow). */
typedef struct nto_group_layer {
  nto_layer l;
  int c0, c1;
  size_t w_off[NTO_MAX_WEIGHTS], s_off[NTO_MAX_SAVED];
} nto_group_layer;

/*
 * Build the table of graph g (borrowed; must outlive tt) with options o.
 * Returns 0 or NTO_ENOMEM; on error nto_tensors_free releases what was
 * built.
 */
int nto_tensors_build(nto_tensors *tt, nto_graph *g, const nto_tensors_opts *o,
                      nto_err *err);
void nto_tensors_free(nto_tensors *tt);

/* Is layer l the graph's input layer? */
int nto_is_input(const nto_layer *l);

/* Does layer l train (update a weight)? */
int nto_layer_trains(const nto_layer *l);

/* Is weight j of layer i updated (gradient computed whole or by chunk)? */
int nto_tensors_updated(const nto_tensors *tt, int i, int j);

/* Elements [*off, *off + *len) of chunk k of weight j of layer i. */
void nto_tensors_chunk(const nto_tensors *tt, int i, int j, int k, size_t *off,
                       size_t *len);

/* Rows [*r0, *r1) of row length dw_row[i][j] covering chunk k. */
void nto_tensors_chunk_rows(const nto_tensors *tt, int i, int j, int k, int *r0,
                            int *r1);

/* Does U step k of weight j of layer i (gradient by chunk) read the
 * layer's inputs? Its backward does, unless the rows cache built by the
 * first U step stands in for them. */
int nto_tensors_rows_read_input(const nto_tensors *tt, int i, int j, int k);

/* The tensor backward reads for t: its recomputed twin, or t (t < 0:
 * t). */
int nto_tensors_bwd(const nto_tensors *tt, int t);

/* The tensor holding dL/d(out of layer i) once B_i gathered it: the loss
 * gradient for the last layer, else its first consumer's edge. */
int nto_tensors_dout(const nto_tensors *tt, int i);

/* Add state tensor q of chunk k of weight j of layer i (after the build:
 * nto_model_set_optimizer with an optimizer of more state). Returns its
 * index or -1 when out of memory. */
int nto_tensors_add_state(nto_tensors *tt, int i, int j, int k, int q);

/* Recomputed outputs: layer i's (1/0), and the convolutions'. */
int nto_tensors_recomputed(const nto_tensors *tt, int i);
int nto_tensors_recomputed_convs(const nto_tensors *tt);
/* Segment convolutions recomputed (tensors_opts segments_max), and how many
 * recompute_segments would recompute without a limit (*candidates, may
 * be NULL). */
int nto_tensors_segment_convs(const nto_tensors *tt, int *candidates);

/* Channel groups of layer i's steps (1: not in a chain). */
static inline int nto_tensors_groups(const nto_tensors *tt, int i) {
  return tt->groups ? tt->groups[i] : 1;
}
/* Role of layer i in a chain: 'P', 'I', 'E', or 0. */
static inline int nto_tensors_chain(const nto_tensors *tt, int i) {
  return tt->chain ? tt->chain[i] : 0;
}
/* Layer i's narrowed copy for group g (NULL: not grouped). */
const nto_group_layer *nto_tensors_glayer(const nto_tensors *tt, int i, int g);
/* The tensor layer i's step of group g writes its output into: the group's
 * own (P, I), else the whole output (out_t). */
int nto_tensors_gout(const nto_tensors *tt, int i, int g);
/* The tensor layer i's step of group g reads as input k: the group's
 * output of the chain layer before it (I, E), else the whole input. */
int nto_tensors_gin(const nto_tensors *tt, int i, int k, int g);
/* The tensor layer i's B step of group g writes dL/d(input k) into (-1:
 * none): the group's (I, E); for P the input gradient itself in the first
 * B step (group G-1) and the partial tensor in the others; else edge_t. */
int nto_tensors_gedge(const nto_tensors *tt, int i, int k, int g);
/* The tensor holding group g of dL/d(out of layer i) as its B step of
 * group g reads it: the chain layer after it's group edge (P, I), the
 * group's copy (E), else nto_tensors_dout. */
int nto_tensors_gdout(const nto_tensors *tt, int i, int g);
/* Chains (channel groups) and their layers. */
int nto_tensors_chains(const nto_tensors *tt, int *layers);

/* Is tensor t persistent (a weight or optimizer state)? */
static inline int nto_tensor_persistent(const nto_tensor *t) {
  return t->role == NTO_ROLE_WEIGHT || t->role == NTO_ROLE_OPT_STATE;
}

#endif /* NTO_TENSORS_H */
