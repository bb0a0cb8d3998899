/* graph.c - build the layer graph from a config. See graph.h. */
#include "graph.h"
#include "registry.h"

#include <ctype.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* A layer before sorting: the layer plus its unresolved input names. */
typedef struct proto {
  nto_layer l;
  char inputs[NTO_MAX_INPUTS][NTO_NAME_MAX];
  int out_idx[NTO_MAX_INPUTS]; /* nntrainer's "name(k)": output k of that
                                  layer (0 when not written) */
  int n_inputs;                /* -1: default (previous proto) */
  int section;                 /* config section index it came from */
  int redirect;        /* 1: references to this name mean the next proto (its
                          realized activation) */
  int realized;        /* 1: a realized activation, reading its base layer */
  const char *gen_key; /* the key of its section that added this layer
                          ("input_shape", "activation"), NULL: the section */
} proto;

typedef struct builder {
  const nto_config *c;
  proto *p;
  int n, cap;
  nto_err *err;
} builder;

static proto *push(builder *b) {
  if (b->n == b->cap) {
    int cap = b->cap ? b->cap * 2 : 32;
    proto *np = realloc(b->p, (size_t)cap * sizeof *np);
    if (!np)
      return NULL;
    b->p = np;
    b->cap = cap;
  }
  proto *p = &b->p[b->n++];
  memset(p, 0, sizeof *p);
  p->n_inputs = -1;
  return p;
}

/* Copy a name into a NTO_NAME_MAX buffer, truncating. */
static void set_name(char *dst, const char *src) {
  size_t n = strlen(src);
  if (n >= NTO_NAME_MAX)
    n = NTO_NAME_MAX - 1;
  memcpy(dst, src, n);
  dst[n] = '\0';
}

static int make_layer(nto_layer *l, const nto_layer_ops *ops,
                      const char *name) {
  set_name(l->name, name);
  l->ops = ops;
  l->trainable = 1;
  l->priv = calloc(1, ops->priv_size ? ops->priv_size : 1);
  if (!l->priv)
    return NTO_ENOMEM;
  if (ops->defaults)
    ops->defaults(l);
  return 0;
}

static void trim_copy(char *dst, size_t len, const char *s, size_t n) {
  while (n && isspace((unsigned char)*s))
    s++, n--;
  while (n && isspace((unsigned char)s[n - 1]))
    n--;
  if (n >= len)
    n = len - 1;
  memcpy(dst, s, n);
  dst[n] = '\0';
}

/* nntrainer's "name(k)" (how its exported INIs name output k of a
 * layer): k, with name cut to the layer's name; 0 for a plain name (-1
 * for "name(" without a number). */
static int output_index(char *name) {
  size_t n = strlen(name);
  char *open = strrchr(name, '(');
  if (!open || n < 3 || name[n - 1] != ')' || open == name)
    return 0;
  char *end;
  long k = strtol(open + 1, &end, 10);
  if (end != name + n - 1 || end == open + 1 || k < 0 || k > 1 << 20)
    return -1;
  *open = '\0';
  return (int)k;
}

/* Parse "a, b" into p->inputs (and "a(k)" into p->out_idx). */
static int parse_inputs(builder *b, proto *p, const char *sec, const char *v) {
  p->n_inputs = 0;
  const char *s = v;
  for (;;) {
    const char *comma = strchr(s, ',');
    size_t n = comma ? (size_t)(comma - s) : strlen(s);
    if (p->n_inputs == NTO_MAX_INPUTS)
      return nto_err_set(b->err, NTO_ECONFIG,
                         "%s: [%s] key 'input_layers': at most %d inputs, got "
                         "'%s'",
                         nto_section_file_of(b->c, sec), sec, NTO_MAX_INPUTS,
                         v);
    char *dst = p->inputs[p->n_inputs];
    trim_copy(dst, NTO_NAME_MAX, s, n);
    p->out_idx[p->n_inputs] = output_index(dst);
    if (p->out_idx[p->n_inputs] < 0)
      return nto_err_set(b->err, NTO_ECONFIG,
                         "%s: [%s] key 'input_layers': expected NAME or "
                         "NAME(OUTPUT), got '%s'",
                         nto_section_file_of(b->c, sec), sec, dst);
    if (dst[0] == '\0')
      return nto_err_set(b->err, NTO_ECONFIG,
                         "%s: [%s] key 'input_layers': expected a "
                         "comma-separated list of layer names, got '%s'",
                         nto_section_file_of(b->c, sec), sec, v);
    p->n_inputs++;
    if (!comma)
      break;
    s = comma + 1;
  }
  return 0;
}

/*
 * nntrainer's built-in layer types (its app_context registrations) that
 * this trainer does not have, each with what it is, so that a refusal
 * names the feature: NULL for a type nntrainer does not have either.
 */
static const char *nntrainer_type(const char *type) {
  static const char *const kinds[][2] = {
      {"rnn", "a recurrent layer"},
      {"rnncell", "a recurrent layer"},
      {"lstm", "a recurrent layer (LSTM)"},
      {"lstmcell", "a recurrent layer (LSTM)"},
      {"zoneout_lstmcell", "a recurrent layer (LSTM)"},
      {"gru", "a recurrent layer (GRU)"},
      {"grucell", "a recurrent layer (GRU)"},
      {"time_dist", "a recurrent wrapper"},
      {"embedding", "an embedding layer"},
      {"split", "a split layer"},
      {"attention", "an attention layer"},
      {"mol_attention", "an attention layer"},
      {"multi_head_attention", "an attention layer"},
      {"positional_encoding", "a sequence layer"},
      {"layer_normalization", "layer normalization"},
      {"conv1d", "a 1-D convolution"},
      {"conv2d_transpose", "a transposed convolution"},
      {"upsample2d", "upsampling"},
      {"permute", "a permute layer"},
      {"reshape", "a reshape layer"},
      {"identity", "an identity layer"},
      {"centroid_knn", "a k-nearest-neighbour classifier"},
      {"preprocess_flip", "a preprocessing layer"},
      {"preprocess_translate", "a preprocessing layer"},
      {"preprocess_l2norm", "a preprocessing layer"},
      {"backbone_nnstreamer", "an external backbone"},
      {"backbone_tflite", "a TFLite backbone"},
      {"weight", "a weight layer"},
      {"tensor", "a tensor layer"},
      {"constant_derivative", "a test loss layer"},
  };
  for (size_t i = 0; i < sizeof kinds / sizeof kinds[0]; i++)
    if (nto_streq(type, kinds[i][0]))
      return kinds[i][1];
  return NULL;
}

/* The ops of section s's `type` into *ops; an error names a missing or
 * unknown type (listing the known ones). */
static int section_ops(builder *b, const nto_section *s,
                       const nto_layer_ops **ops) {
  const char *type = nto_section_get(s, "type");
  *ops = type ? nto_layer_find(type) : NULL;
  if (!type)
    return nto_err_set(b->err, NTO_ECONFIG, "%s: [%s] missing key 'type'",
                       nto_section_file_of(b->c, s->name), s->name);
  if (!*ops) {
    char list[512];
    nto_layer_type_list(list, sizeof list);
    const char *what = nntrainer_type(type);
    if (what)
      return nto_err_set(b->err, NTO_ECONFIG,
                         "%s: [%s] key 'type': nntrainer's '%s' layer is not "
                         "supported (%s; the layers here: %s)",
                         nto_section_file_of(b->c, s->name), s->name, type,
                         what, list);
    return nto_err_set(b->err, NTO_ECONFIG,
                       "%s: [%s] key 'type': unknown layer type '%s' "
                       "(expected one of: %s; not one of nntrainer's "
                       "built-in layers either: a custom plugin layer? "
                       "those are not supported)",
                       nto_section_file_of(b->c, s->name), s->name, type, list);
  }
  return 0;
}

/* A layer "<name>/<what>" of type ops that key `key` = value of section
 * si adds (value set as its key), pushed as the last proto into *out.
 * Returns 0, NTO_ENOMEM or the key's error. */
static int generated(builder *b, int si, const nto_layer_ops *ops,
                     const char *what, const char *key, const char *value,
                     proto **out) {
  const nto_section *s = &b->c->layers[si];
  proto *g = *out = push(b);
  char nm[NTO_NAME_MAX + 16];
  snprintf(nm, sizeof nm, "%s/%s", s->name, what);
  if (!g || make_layer(&g->l, ops, nm) != 0)
    return nto_err_set(b->err, NTO_ENOMEM, "out of memory");
  g->section = si;
  g->gen_key = key;
  int rc = ops->set_prop(&g->l, key, value, b->err);
  if (rc != 0)
    return nto_err_prefix(b->err, rc, "%s: [%s] key '%s': ",
                          nto_section_file_of(b->c, s->name), s->name, key);
  return 0;
}

/* The input layer "<name>/input" that `input_shape` on a non-input layer
 * of section si adds. */
static int add_input_proto(builder *b, int si, const char *shape) {
  const nto_section *s = &b->c->layers[si];
  if (nto_section_get(s, "input_layers"))
    return nto_err_set(b->err, NTO_ECONFIG,
                       "%s: [%s] key 'input_shape': only allowed on a layer "
                       "without input_layers",
                       nto_section_file_of(b->c, s->name), s->name);
  proto *ip;
  int rc =
      generated(b, si, &nto_input_layer, "input", "input_shape", shape, &ip);
  if (rc == 0)
    ip->n_inputs = 0;
  return rc;
}

/* A layer key of nntrainer's first INI format and what replaced it, or
 * NULL. */
static const char *first_format_key(const char *key) {
  static const char *const keys[][2] = {
      {"hiddensize", "input_shape (input) or unit (fully_connected)"},
      {"bias_zero", "bias_initializer = zeros"},
      {"softmax", "activation = softmax"},
      {"id", "nothing: sections are taken in file order"},
  };
  for (size_t i = 0; i < sizeof keys / sizeof keys[0]; i++)
    if (!strcmp(key, keys[i][0]))
      return keys[i][1];
  return NULL;
}

/* Section s's keys into proto p (of ops): inputs, trainable, the layer's
 * own keys; *act: the value of `activation` on a non-activation layer. */
static int apply_keys(builder *b, const nto_section *s, proto *p,
                      const nto_layer_ops *ops, int skip_shape,
                      const char **act) {
  int is_input = ops == &nto_input_layer;
  for (int k = 0; k < s->n_kv; k++) {
    const char *key = s->kv[k].key, *val = s->kv[k].value;
    int rc = 0;
    if (!strcmp(key, "type") || !strcmp(key, "name") ||
        (skip_shape && !strcmp(key, "input_shape")))
      continue;
    if (!strcmp(key, "input_layers") || !strcmp(key, "input_layer")) {
      if (is_input)
        return nto_err_set(b->err, NTO_ECONFIG,
                           "%s: [%s] key '%s': an input layer takes no "
                           "inputs",
                           nto_section_file_of(b->c, s->name), s->name, key);
      rc = parse_inputs(b, p, s->name, val);
      if (rc != 0)
        return rc;
      continue;
    }
    if (!strcmp(key, "trainable")) {
      rc = nto_parse_bool(val, &p->l.trainable, b->err);
    } else if (!strcmp(key, "activation") && ops != &nto_activation_layer) {
      *act = val;
      continue;
    } else {
      rc = ops->set_prop(&p->l, key, val, b->err);
      if (rc == NTO_ENOKEY && first_format_key(key))
        return nto_err_set(b->err, NTO_ECONFIG,
                           "%s: [%s] key '%s': a key of nntrainer's first "
                           "INI format (2020), which nntrainer no longer "
                           "reads either: write %s",
                           nto_section_file_of(b->c, s->name), s->name, key,
                           first_format_key(key));
      if (rc == NTO_ENOKEY)
        return nto_err_set(b->err, NTO_ECONFIG,
                           "%s: [%s] unknown key '%s' for layer type '%s'",
                           nto_section_file_of(b->c, s->name), s->name, key,
                           ops->type);
    }
    if (rc != 0)
      return nto_err_prefix(b->err, rc, "%s: [%s] key '%s': ",
                            nto_section_file_of(b->c, s->name), s->name, key);
  }
  return 0;
}

/* The activation layer "<name>/activation" that `activation = act` on the
 * last proto (of section si) adds; later references to the layer read
 * it. */
static int add_activation_proto(builder *b, int si, const char *act) {
  proto *ap;
  int rc = generated(b, si, &nto_activation_layer, "activation", "activation",
                     act, &ap);
  if (rc != 0)
    return rc;
  proto *p = &b->p[b->n - 2]; /* push may have moved the array */
  ap->realized = 1;
  ap->n_inputs = 1;
  set_name(ap->inputs[0], p->l.name);
  p->redirect = 1;
  return 0;
}

/* Turn one config section into one to three protos. */
static int add_section(builder *b, int si) {
  const nto_section *s = &b->c->layers[si];
  const nto_layer_ops *ops;
  int rc = section_ops(b, s, &ops);
  if (rc != 0)
    return rc;
  const char *shape = nto_section_get(s, "input_shape");
  int is_input = ops == &nto_input_layer;
  int insert_input = shape && !is_input;
  if (insert_input && (rc = add_input_proto(b, si, shape)) != 0)
    return rc;
  proto *p = push(b);
  if (!p || make_layer(&p->l, ops, s->name) != 0)
    return nto_err_set(b->err, NTO_ENOMEM, "out of memory");
  p->section = si;
  if (is_input)
    p->n_inputs = 0;
  if (insert_input) {
    char nm_input[NTO_NAME_MAX + 8];
    snprintf(nm_input, sizeof nm_input, "%s/input", s->name);
    p->n_inputs = 1;
    set_name(p->inputs[0], nm_input);
  }
  const char *act = NULL;
  rc = apply_keys(b, s, p, ops, insert_input, &act);
  if (rc == 0 && act && !nto_streq(act, "none"))
    rc = add_activation_proto(b, si, act);
  return rc;
}

/* Layer names are unique (case-insensitive, as references are resolved):
 * a section cannot take the name of a layer that another section's
 * `activation` or `input_shape` key adds, e.g. [conv1/activation] next to
 * [conv1] with activation = relu. */
static int check_names(const builder *b) {
  for (int j = 1; j < b->n; j++)
    for (int i = 0; i < j; i++) {
      if (!nto_streq(b->p[i].l.name, b->p[j].l.name))
        continue;
      const proto *sec = b->p[j].gen_key ? &b->p[i] : &b->p[j];
      const proto *gen = sec == &b->p[i] ? &b->p[j] : &b->p[i];
      const char *sname = b->c->layers[sec->section].name;
      if (!gen->gen_key)
        return nto_err_set(
            b->err, NTO_ECONFIG, "%s: [%s]: layer name '%s' given twice",
            nto_section_file_of(b->c, sname), sname, sec->l.name);
      return nto_err_set(b->err, NTO_ECONFIG,
                         "%s: [%s]: layer name '%s' is already the name of "
                         "the %s layer that [%s] key '%s' adds",
                         nto_section_file_of(b->c, sname), sname, sec->l.name,
                         gen->realized ? "activation" : "input",
                         b->c->layers[gen->section].name, gen->gen_key);
    }
  return 0;
}

/* Index of the proto a reference to `name` means, or -1. */
static int resolve(const builder *b, const char *name, int follow) {
  for (int i = 0; i < b->n; i++)
    if (nto_streq(b->p[i].l.name, name))
      return b->p[i].redirect && follow ? i + 1 : i;
  return -1;
}

/* Fill in[] of every proto with proto indices (before sorting). */
static int wire(builder *b) {
  for (int i = 0; i < b->n; i++) {
    proto *p = &b->p[i];
    const char *sec = b->c->layers[p->section].name;
    if (p->n_inputs < 0) { /* default: the previous section's output */
      int prev = i - 1;
      while (prev >= 0 && b->p[prev].section == p->section)
        prev--;
      if (prev < 0)
        return nto_err_set(b->err, NTO_ECONFIG,
                           "%s: [%s] missing key 'input_layers' (the first "
                           "layer must be an input layer or have "
                           "input_shape)",
                           nto_section_file_of(b->c, sec), sec);
      p->n_inputs = 1;
      set_name(p->inputs[0], b->p[prev].l.name);
    }
    p->l.n_in = p->n_inputs;
    for (int k = 0; k < p->n_inputs; k++) {
      int j = resolve(b, p->inputs[k], !p->realized);
      if (j < 0)
        return nto_err_set(b->err, NTO_ECONFIG,
                           "%s: [%s] key 'input_layers': unknown layer '%s'",
                           nto_section_file_of(b->c, sec), sec, p->inputs[k]);
      /* a multiout layer gives every consumer the same tensor: output k
       * of it is that tensor; other layers have output 0 only */
      if (p->out_idx[k] != 0 && b->p[j].l.ops != &nto_multiout_layer)
        return nto_err_set(b->err, NTO_ECONFIG,
                           "%s: [%s] key 'input_layers': '%s(%d)': layer "
                           "'%s' has one output, (0)",
                           nto_section_file_of(b->c, sec), sec, p->inputs[k],
                           p->out_idx[k], p->inputs[k]);
      p->l.in[k] = j;
    }
    const nto_layer_ops *ops = p->l.ops;
    if ((p->l.n_in < ops->min_inputs || p->l.n_in > ops->max_inputs) &&
        ops->min_inputs == ops->max_inputs)
      return nto_err_set(b->err, NTO_ECONFIG,
                         "%s: [%s] key 'input_layers': layer type '%s' takes "
                         "%d input%s, got %d",
                         nto_section_file_of(b->c, sec), sec, ops->type,
                         ops->min_inputs, ops->min_inputs == 1 ? "" : "s",
                         p->l.n_in);
    if (p->l.n_in < ops->min_inputs || p->l.n_in > ops->max_inputs)
      return nto_err_set(b->err, NTO_ECONFIG,
                         "%s: [%s] key 'input_layers': layer type '%s' takes "
                         "%d to %d inputs, got %d",
                         nto_section_file_of(b->c, sec), sec, ops->type,
                         ops->min_inputs, ops->max_inputs, p->l.n_in);
  }
  return 0;
}

/* Kahn's algorithm, taking ready layers in file order. order[] gets the
 * proto indices. A cycle is reported with one of its layers. */
static int topo_sort(builder *b, int *order) {
  int n = b->n, done = 0;
  char *placed = calloc((size_t)n, 1);
  if (!placed)
    return nto_err_set(b->err, NTO_ENOMEM, "out of memory");
  while (done < n) {
    int progress = 0;
    for (int i = 0; i < n; i++) {
      if (placed[i])
        continue;
      int ready = 1;
      for (int k = 0; k < b->p[i].l.n_in && ready; k++)
        ready = placed[b->p[i].l.in[k]];
      if (!ready)
        continue;
      placed[i] = 1;
      order[done++] = i;
      progress = 1;
      break; /* restart: keeps file order among ready layers */
    }
    if (!progress) {
      int i = 0;
      while (placed[i])
        i++;
      free(placed);
      return nto_err_set(
          b->err, NTO_ECONFIG,
          "%s: [%s] key 'input_layers': cycle in the layer "
          "graph through '%s'",
          nto_section_file_of(b->c, b->c->layers[b->p[i].section].name),
          b->c->layers[b->p[i].section].name, b->p[i].l.name);
    }
  }
  free(placed);
  return 0;
}

int nto_graph_nntrainer_order(const nto_graph *g, int *order, nto_err *err) {
  int n = g->n_layers, top = 0, done = 0;
  int *by_file = malloc((size_t)n * sizeof *by_file);
  int *stack = malloc((size_t)n * sizeof *stack);
  int *next = calloc((size_t)n, sizeof *next); /* consumers tried */
  char *seen = calloc((size_t)n, 1);
  if (!by_file || !stack || !next || !seen) {
    free(by_file), free(stack), free(next), free(seen);
    return nto_err_set(err, NTO_ENOMEM, "out of memory");
  }
  for (int i = 0; i < n; i++)
    by_file[g->file_pos[i]] = i;
  /* post-order into order[] from the end: reverse post-order */
  for (int r = 0; r < n; r++) {
    if (seen[by_file[r]])
      continue;
    seen[by_file[r]] = 1;
    stack[top++] = by_file[r];
    while (top > 0) {
      int v = stack[top - 1], best = -1;
      for (int k = 0; k < g->n_consumers[v]; k++) { /* next in file order */
        int c = g->consumers[v][k].layer;
        if (!seen[c] && g->file_pos[c] >= next[v] &&
            (best < 0 || g->file_pos[c] < g->file_pos[best]))
          best = c;
      }
      if (best < 0) {
        order[n - 1 - done++] = v;
        top--;
        continue;
      }
      next[v] = g->file_pos[best] + 1;
      seen[best] = 1;
      stack[top++] = best;
    }
  }
  free(by_file), free(stack), free(next), free(seen);
  return 0;
}

int nto_graph_find(const nto_graph *g, const char *name) {
  for (int i = 0; i < g->n_layers; i++)
    if (nto_streq(g->layers[i].name, name))
      return i;
  return -1;
}

void nto_graph_free(nto_graph *g) {
  for (int i = 0; i < g->n_layers; i++)
    free(g->layers[i].priv);
  if (g->consumers)
    for (int i = 0; i < g->n_layers; i++)
      free(g->consumers[i]);
  free(g->layers);
  free(g->consumers);
  free(g->n_consumers);
  free(g->file_pos);
  memset(g, 0, sizeof *g);
}

/* Adopt protos in topological order; build consumer lists. */
static int adopt(nto_graph *g, builder *b, const int *order) {
  int n = b->n;
  int *pos = malloc((size_t)n * sizeof *pos);
  g->layers = calloc((size_t)n, sizeof *g->layers);
  g->consumers = calloc((size_t)n, sizeof *g->consumers);
  g->n_consumers = calloc((size_t)n, sizeof *g->n_consumers);
  g->file_pos = calloc((size_t)n, sizeof *g->file_pos);
  if (!pos || !g->layers || !g->consumers || !g->n_consumers || !g->file_pos) {
    free(pos);
    return nto_err_set(b->err, NTO_ENOMEM, "out of memory");
  }
  for (int i = 0; i < n; i++)
    pos[order[i]] = i;
  for (int i = 0; i < n; i++) {
    g->file_pos[i] = order[i]; /* protos are pushed in file order */
    g->layers[i] = b->p[order[i]].l;
    b->p[order[i]].l.priv = NULL; /* now owned by g */
    for (int k = 0; k < g->layers[i].n_in; k++)
      g->layers[i].in[k] = pos[g->layers[i].in[k]];
  }
  g->n_layers = n;
  free(pos);
  for (int i = 0; i < n; i++) {
    nto_layer *l = &g->layers[i];
    for (int k = 0; k < l->n_in; k++) {
      int p = l->in[k];
      nto_edge *e =
          realloc(g->consumers[p], (size_t)(g->n_consumers[p] + 1) * sizeof *e);
      if (!e)
        return nto_err_set(b->err, NTO_ENOMEM, "out of memory");
      e[g->n_consumers[p]++] = (nto_edge){.layer = i, .input = k};
      g->consumers[p] = e;
    }
  }
  return 0;
}

/* Exactly one layer without consumers, and it must be last in order. */
static int check_outputs(const nto_graph *g, const nto_config *c,
                         nto_err *err) {
  int outs = 0, first = -1, second = -1;
  for (int i = 0; i < g->n_layers; i++)
    if (g->n_consumers[i] == 0) {
      if (outs == 0)
        first = i;
      else if (outs == 1)
        second = i;
      outs++;
    }
  if (outs > 1)
    return nto_err_set(err, NTO_ECONFIG,
                       "%s: layers '%s' and '%s' both have no consumer; "
                       "exactly one output layer is supported",
                       c->path, g->layers[first].name, g->layers[second].name);
  if (first != g->n_layers - 1) {
    /* The executor runs the loss on the last layer in order. */
    return nto_err_set(err, NTO_ECONFIG,
                       "%s: layer '%s' has no consumer but is not the last "
                       "layer of the graph",
                       c->path, g->layers[first].name);
  }
  return 0;
}

/*
 * Largest tensor (output, weight, saved tensor) accepted, in values: the
 * layers index tensors with int arithmetic (e.g. n*c planes, oh*ow cells),
 * and 8 GiB is far beyond any device this trains on.
 */
#define TENSOR_VALUES_MAX INT_MAX

/* Values of a tensor of shape s, or 0 if a dimension is < 1 or there are
 * more than TENSOR_VALUES_MAX. */
static size_t checked_numel(nto_shape s) {
  if (s.n < 1 || s.c < 1 || s.h < 1 || s.w < 1)
    return 0;
  size_t v;
  if (__builtin_mul_overflow((size_t)s.n, (size_t)s.c, &v) ||
      __builtin_mul_overflow(v, (size_t)s.h, &v) ||
      __builtin_mul_overflow(v, (size_t)s.w, &v) || v > TENSOR_VALUES_MAX)
    return 0;
  return v;
}

/* Every tensor layer l planned is of a size the model can handle. */
static int check_sizes(const nto_layer *l, const nto_config *c, nto_err *err) {
  char a[64];
  nto_shape o = l->out_shape;
  if (o.n < 1 || o.c < 1 || o.h < 1 || o.w < 1)
    return nto_err_set(err, NTO_ESHAPE,
                       "%s: [%s]: invalid output shape %s (n:c:h:w)", c->path,
                       l->name, nto_shape_str(o, 1, a, sizeof a));
  if (checked_numel(l->out_shape) == 0)
    return nto_err_set(err, NTO_ESHAPE,
                       "%s: [%s]: output shape %s (n:c:h:w) is too large (at "
                       "most %d values per tensor)",
                       c->path, l->name,
                       nto_shape_str(l->out_shape, 1, a, sizeof a),
                       TENSOR_VALUES_MAX);
  for (int j = 0; j < l->n_w; j++)
    if (checked_numel(l->w[j].shape) == 0)
      return nto_err_set(err, NTO_ESHAPE,
                         "%s: [%s]: weight '%s' of shape %s is too large (at "
                         "most %d values per tensor)",
                         c->path, l->name, l->w[j].name,
                         nto_shape_str(l->w[j].shape, 1, a, sizeof a),
                         TENSOR_VALUES_MAX);
  for (int j = 0; j < l->n_saved; j++)
    if (checked_numel(l->saved[j].shape) == 0)
      return nto_err_set(err, NTO_ESHAPE,
                         "%s: [%s]: saved tensor '%s' of shape %s is too large "
                         "(at most %d values per tensor)",
                         c->path, l->name, l->saved[j].name,
                         nto_shape_str(l->saved[j].shape, 1, a, sizeof a),
                         TENSOR_VALUES_MAX);
  if (l->ws_bytes / sizeof(float) > TENSOR_VALUES_MAX)
    return nto_err_set(err, NTO_ESHAPE,
                       "%s: [%s]: workspace of %zu bytes is too large (at most "
                       "%d values)",
                       c->path, l->name, l->ws_bytes, TENSOR_VALUES_MAX);
  return 0;
}

static int plan_all(nto_graph *g, const nto_config *c, nto_err *err) {
  for (int i = 0; i < g->n_layers; i++) {
    nto_layer *l = &g->layers[i];
    l->batch = g->batch;
    for (int k = 0; k < l->n_in; k++)
      l->in_shape[k] = g->layers[l->in[k]].out_shape;
    int rc = l->ops->plan(l, err);
    if (rc != 0)
      return nto_err_prefix(err, rc, "%s: [%s]: ", c->path, l->name);
    if (l->out_shape.n != g->batch)
      return nto_err_set(err, NTO_ESHAPE, "%s: [%s]: invalid output shape",
                         c->path, l->name);
    if ((rc = check_sizes(l, c, err)) != 0)
      return rc;
  }
  return 0;
}

int nto_graph_freeze(nto_graph *g, const nto_config *c, const char *until,
                     nto_err *err) {
  int last = nto_graph_find(g, until);
  if (last < 0)
    return nto_err_set(err, NTO_ECONFIG,
                       "--freeze-until %s: %s has no layer of that name", until,
                       c->path);
  for (int i = 0; i <= last; i++)
    g->layers[i].trainable = 0;
  return plan_all(g, c, err);
}

int nto_graph_frozen_bn_batch(nto_graph *g, const nto_config *c, nto_err *err) {
  for (int i = 0; i < g->n_layers; i++)
    g->layers[i].frozen_batch_stats =
        g->layers[i].ops == &nto_batch_normalization_layer;
  return plan_all(g, c, err);
}

int nto_graph_build(nto_graph *g, const nto_config *c, int batch,
                    nto_err *err) {
  memset(g, 0, sizeof *g);
  g->batch = batch;
  builder b = {.c = c, .err = err};
  int rc = 0;
  int *order = NULL;
  if (c->n_layers == 0) {
    rc = nto_err_set(err, NTO_ECONFIG, "%s: no layer sections", c->path);
    goto out;
  }
  for (int i = 0; i < c->n_layers && rc == 0; i++)
    rc = add_section(&b, i);
  if (rc == 0)
    rc = check_names(&b);
  if (rc == 0)
    rc = wire(&b);
  if (rc == 0) {
    order = malloc((size_t)b.n * sizeof *order);
    rc = order ? topo_sort(&b, order)
               : nto_err_set(err, NTO_ENOMEM, "out of memory");
  }
  if (rc == 0)
    rc = adopt(g, &b, order);
  if (rc == 0)
    rc = check_outputs(g, c, err);
  if (rc == 0)
    rc = plan_all(g, c, err);
out:
  for (int i = 0; i < b.n; i++)
    free(b.p[i].l.priv);
  free(b.p);
  free(order);
  if (rc != 0)
    nto_graph_free(g);
  return rc;
}
