/*
 * registry.h - maps INI layer `type` names to layer ops tables.
 * One source file per layer type in layers/ defines `nto_<type>_layer`.
 * Read-only tables; any thread.
 */
#ifndef NTO_REGISTRY_H
#define NTO_REGISTRY_H

#include "layer.h"

extern const nto_layer_ops nto_input_layer;
extern const nto_layer_ops nto_conv2d_layer;
extern const nto_layer_ops nto_batch_normalization_layer;
extern const nto_layer_ops nto_activation_layer;
extern const nto_layer_ops nto_addition_layer;
extern const nto_layer_ops nto_concat_layer;
extern const nto_layer_ops nto_pooling2d_layer;
extern const nto_layer_ops nto_flatten_layer;
extern const nto_layer_ops nto_fully_connected_layer;
extern const nto_layer_ops nto_dropout_layer;
extern const nto_layer_ops nto_multiout_layer;

/*
 * Ops for an INI type name (case-insensitive), including aliases
 * ("output" -> multiout, "fc" -> fully_connected, "bn" ->
 * batch_normalization), or NULL if unknown.
 */
const nto_layer_ops *nto_layer_find(const char *type);

/* Writes "input, conv2d, ..." (the accepted names) into buf. */
void nto_layer_type_list(char *buf, size_t len);

#endif /* NTO_REGISTRY_H */
