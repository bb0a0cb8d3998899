/*
 * graph.h - the layer graph built from a loaded config.
 *
 * Layers are created from the config's layer sections through the registry,
 * properties applied (unknown keys are errors), `activation = X` on a layer
 * realized as a separate activation layer "<name>/activation" placed right
 * after it (references to <name> then mean the activated output, as in
 * nntrainer), `input_shape` on a non-input first layer realized as an input
 * layer "<name>/input", inputs wired by `input_layers` (default: the previous
 * section), sorted topologically (file order among ready layers), and
 * planned in that order (shapes, weights, workspace).
 *
 * Exactly one layer has no consumer: the output layer, the last in order.
 * A layer may feed several consumers; the executor sums their gradients.
 * Built and used on one thread.
 */
#ifndef NTO_GRAPH_H
#define NTO_GRAPH_H

#include "config.h"
#include "layer.h"

/* A consumer edge: layer `layer` reads the producer as its input `input`. */
typedef struct nto_edge {
  int layer;
  int input;
} nto_edge;

typedef struct nto_graph {
  nto_layer *layers; /* n_layers, topological order; [n_layers-1] = output */
  int n_layers;
  int batch;
  nto_edge **consumers; /* consumers[l]: n_consumers[l] edges, in order */
  int *n_consumers;
  int *file_pos; /* file_pos[l]: layer l's place in file order (sections in
                    order, a realized input or activation layer next to its
                    section), 0..n_layers-1 */
} nto_graph;

/*
 * Build and plan the graph of config c for batch size `batch` (>= 1).
 * Errors (NTO_ECONFIG / NTO_ESHAPE) name the file, the section and the key:
 * unknown type (lists the known ones), unknown key for the type, bad value,
 * missing/unknown input layer, cycle, wrong number of inputs, several
 * outputs, no layers, shape errors from plan. On error *g is freed.
 */
int nto_graph_build(nto_graph *g, const nto_config *c, int batch,
                    nto_err *err);

/*
 * Freeze every layer up to and including the one named `until` (in graph
 * order; case-insensitive), as INI `trainable = false` does, and plan the
 * graph again (a frozen layer may need less for its backward: layer.h
 * trainable). Returns 0, or NTO_ECONFIG naming `until` when no layer has
 * that name (c: the config the graph was built from, for messages).
 */
int nto_graph_freeze(nto_graph *g, const nto_config *c, const char *until,
                     nto_err *err);

/*
 * Frozen batch normalization layers normalize with the batch's statistics
 * in training and update the running ones (layer.h frozen_batch_stats),
 * instead of using the running statistics; plans the graph again. Returns
 * 0 or plan's error.
 */
int nto_graph_frozen_bn_batch(nto_graph *g, const nto_config *c,
                              nto_err *err);

/* Release the graph (layers' priv included). Safe on a zeroed graph. */
void nto_graph_free(nto_graph *g);

/*
 * The layers in nntrainer's order (its GraphCore::topologicalSort, which
 * its .bin weight files follow) into order[0..n_layers): a depth-first
 * search from each unvisited layer in file order that visits a layer's
 * consumers in file order, listed in reverse post-order. At a fork the
 * branch of the consumer LAST in the file comes first: in ResNet-18's
 * downsampling blocks the shortcut convolution precedes the main branch.
 * Returns 0 or NTO_ENOMEM.
 */
int nto_graph_nntrainer_order(const nto_graph *g, int *order, nto_err *err);

/* Index of the layer named name (case-insensitive), or -1. */
int nto_graph_find(const nto_graph *g, const char *name);

#endif /* NTO_GRAPH_H */
