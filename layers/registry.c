/* registry.c - the table of layer types. See registry.h. */
#include "registry.h"

#include <string.h>

typedef struct {
  const char *name;
  const nto_layer_ops *ops;
} entry;

static const entry table[] = {
    {"input", &nto_input_layer},
    {"conv2d", &nto_conv2d_layer},
    {"batch_normalization", &nto_batch_normalization_layer},
    {"bn", &nto_batch_normalization_layer},
    {"activation", &nto_activation_layer},
    {"addition", &nto_addition_layer},
    {"concat", &nto_concat_layer},
    {"pooling2d", &nto_pooling2d_layer},
    {"flatten", &nto_flatten_layer},
    {"fully_connected", &nto_fully_connected_layer},
    {"fc", &nto_fully_connected_layer},
    {"dropout", &nto_dropout_layer},
    {"multiout", &nto_multiout_layer},
    {"output", &nto_multiout_layer},
};

const nto_layer_ops *nto_layer_find(const char *type) {
  for (size_t i = 0; i < sizeof table / sizeof table[0]; i++)
    if (nto_streq(table[i].name, type))
      return table[i].ops;
  return NULL;
}

void nto_layer_type_list(char *buf, size_t len) {
  buf[0] = '\0';
  for (size_t i = 0; i < sizeof table / sizeof table[0]; i++) {
    if (i)
      strncat(buf, ", ", len - strlen(buf) - 1);
    strncat(buf, table[i].name, len - strlen(buf) - 1);
  }
}
