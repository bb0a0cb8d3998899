/*
 * test_weights.c - nntrainer .bin and safetensors files: round trips
 * (bit-exact), the safetensors header layout, strict header parsing of
 * corrupt files, atomic saving (no temp file left, old file replaced only
 * on success), and tensors reached through fetch/store callbacks instead of
 * data pointers. Files live in a mkdtemp directory.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include "tmpdir.h"

#include "rng.h"
#include "weights.h"

#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

typedef tmpdir_fixture fixture;

static int setup(void **state) {
  return tmpdir_fixture_setup(state, "weights");
}

static int teardown(void **state) { return tmpdir_fixture_teardown(state); }

static void path_in(const fixture *fx, char *buf, size_t len,
                    const char *name) {
  snprintf(buf, len, "%s/%s", fx->dir, name);
}

static void assert_msg_has(const nto_err *err, const char *s) {
  if (strstr(err->msg, s) == NULL)
    fail_msg("message \"%s\" lacks \"%s\"", err->msg, s);
}

/* Number of entries of dir whose name contains ".tmp.". */
static int count_tmp(const char *dir) {
  DIR *d = opendir(dir);
  assert_non_null(d);
  int n = 0;
  struct dirent *e;
  while ((e = readdir(d)) != NULL)
    n += strstr(e->d_name, ".tmp.") != NULL;
  closedir(d);
  return n;
}

static unsigned char *slurp(const char *path, size_t *len) {
  FILE *f = fopen(path, "rb");
  assert_non_null(f);
  fseek(f, 0, SEEK_END);
  long n = ftell(f);
  fseek(f, 0, SEEK_SET);
  unsigned char *b = malloc((size_t)n + 1);
  assert_int_equal(fread(b, 1, (size_t)n, f), (size_t)n);
  fclose(f);
  b[n] = 0;
  *len = (size_t)n;
  return b;
}

static void spit(const char *path, const void *b, size_t len) {
  FILE *f = fopen(path, "wb");
  assert_non_null(f);
  assert_int_equal(fwrite(b, 1, len, f), len);
  fclose(f);
}

/* A small model: conv (4,3,3,3) + bias (4), bn mean (4), fc (5,2). */
enum { NT = 4 };
typedef struct {
  float conv[4 * 3 * 3 * 3], bias[4], mean[4], fc[5 * 2];
  nto_named_tensor t[NT];
} model;

static void model_init(model *m, uint64_t seed, const char *const names[NT]) {
  nto_rng r;
  nto_rng_seed(&r, seed);
  float *bufs[NT] = {m->conv, m->bias, m->mean, m->fc};
  int ndims[NT] = {4, 1, 1, 2};
  int dims[NT][4] = {{4, 3, 3, 3}, {4}, {4}, {5, 2}};
  memset(m->t, 0, sizeof m->t); /* no callbacks */
  for (int i = 0; i < NT; i++) {
    m->t[i].name = names[i];
    m->t[i].ndim = ndims[i];
    memcpy(m->t[i].dims, dims[i], sizeof dims[i]);
    m->t[i].data = bufs[i];
    for (size_t k = 0; k < nto_named_numel(&m->t[i]); k++)
      bufs[i][k] = (float)nto_rng_normal(&r) * 0.5f;
  }
  m->conv[0] = -0.0f;  /* bit patterns that must survive */
  m->bias[1] = 1e-42f; /* subnormal */
}

static const char *const names_plain[NT] = {"conv1.weight", "conv1.bias",
                                            "bn1.running_mean", "fc.weight"};
static const char *const names_odd[NT] = {"conv1.weight", "q\"uote\\back",
                                          "tab\tnl\nctl\x01", "caf\xc3\xa9"};

static void assert_model_equal(const model *a, const model *b) {
  for (int i = 0; i < NT; i++)
    assert_memory_equal(a->t[i].data, b->t[i].data,
                        nto_named_numel(&a->t[i]) * sizeof(float));
}

/* ----------------------------------------------------------------- .bin */

static void test_bin_round_trip(void **state) {
  fixture *fx = *state;
  char path[512];
  path_in(fx, path, sizeof path, "model.bin");
  model a, b;
  model_init(&a, 1, names_plain);
  model_init(&b, 2, names_plain);
  nto_err err = {0};
  if (nto_weights_save_bin(path, a.t, NT, &err))
    fail_msg("%s", err.msg);
  assert_int_equal(count_tmp(fx->dir), 0);
  size_t len;
  unsigned char *raw = slurp(path, &len);
  assert_int_equal(len, (108 + 4 + 4 + 10) * 4);
  /* No header: the raw concatenation in order. */
  assert_memory_equal(raw, a.conv, sizeof a.conv);
  assert_memory_equal(raw + 4 * 108, a.bias, sizeof a.bias);
  assert_memory_equal(raw + 4 * 116, a.fc, sizeof a.fc);
  free(raw);
  assert_int_equal(nto_weights_load_bin(path, b.t, NT, &err), 0);
  assert_model_equal(&a, &b);
}

/* Append len bytes of b (or len copies of byte fill when b is NULL). */
static void append(const char *path, const void *b, size_t len, int fill) {
  FILE *f = fopen(path, "ab");
  assert_non_null(f);
  for (size_t i = 0; i < len; i++)
    fputc(b ? ((const unsigned char *)b)[i] : fill, f);
  fclose(f);
}

/* nntrainer's training-mode .bin: after the 504 bytes of weights, filler
 * '1' bytes to 4096 (newer versions), "adam" with two moments of the 122
 * parameter floats (conv, bias, fc: 976 bytes; the running mean has
 * none), the epoch and iteration (8 bytes); each part optional. Loads the
 * weights; a trailer of another shape is refused. */
static void test_bin_training_trailer(void **state) {
  fixture *fx = *state;
  char path[512];
  path_in(fx, path, sizeof path, "train.bin");
  model a, b;
  model_init(&a, 1, names_plain);
  a.t[0].param = a.t[1].param = a.t[3].param = 1;
  nto_err err = {0};
  const struct {
    int pad, adam, counters, ok;
    size_t adam_bytes;
    const char *tag;
  } cases[] = {
      {1, 1, 1, 1, 976, "adam"}, {0, 1, 1, 1, 976, "adam"},
      {0, 0, 1, 1, 0, NULL},     {1, 0, 0, 1, 0, NULL},
      {1, 1, 0, 1, 976, "adam"}, {1, 1, 1, 0, 976, "adma"},
      {0, 1, 0, 0, 972, "adam"}, {0, 0, 0, 0, 7, NULL},
  };
  for (size_t c = 0; c < sizeof cases / sizeof *cases; c++) {
    unlink(path);
    assert_int_equal(nto_weights_save_bin(path, a.t, NT, &err), 0);
    if (cases[c].pad)
      append(path, NULL, 4096 - 504, '1');
    if (cases[c].tag)
      append(path, cases[c].tag, 4, 0);
    append(path, NULL, cases[c].adam_bytes, 0x3f);
    if (cases[c].counters)
      append(path, NULL, 8, 2);
    model_init(&b, 2, names_plain);
    b.t[0].param = b.t[1].param = b.t[3].param = 1;
    int rc = nto_weights_load_bin(path, b.t, NT, &err);
    if (cases[c].ok) {
      if (rc != 0)
        fail_msg("case %zu: %s", c, err.msg);
      assert_model_equal(&a, &b);
    } else {
      assert_int_equal(rc, NTO_EDATA);
      assert_msg_has(&err, "training-mode trailer");
    }
  }
  /* filler that is not all '1' */
  unlink(path);
  assert_int_equal(nto_weights_save_bin(path, a.t, NT, &err), 0);
  append(path, NULL, 100, '1');
  append(path, NULL, 4096 - 604, '2');
  assert_int_equal(nto_weights_load_bin(path, b.t, NT, &err), NTO_EDATA);
}

static void test_bin_wrong_size(void **state) {
  fixture *fx = *state;
  char path[512];
  path_in(fx, path, sizeof path, "model.bin");
  model a;
  model_init(&a, 1, names_plain);
  nto_err err = {0};
  assert_int_equal(nto_weights_save_bin(path, a.t, NT, &err), 0);
  a.t[3].dims[0] = 6; /* fc now (6, 2): 2 floats more expected */
  float big[12];
  a.t[3].data = big;
  assert_int_equal(nto_weights_load_bin(path, a.t, NT, &err), NTO_EDATA);
  assert_msg_has(&err, path);
  assert_msg_has(&err, "504"); /* actual */
  assert_msg_has(&err, "512"); /* expected */
  a.t[3].dims[0] = 4;
  assert_int_equal(nto_weights_load_bin(path, a.t, NT, &err), NTO_EDATA);
  assert_msg_has(&err, "496");
  path_in(fx, path, sizeof path, "missing.bin");
  assert_int_equal(nto_weights_load_bin(path, a.t, NT, &err), NTO_EIO);
  assert_msg_has(&err, path);
  assert_msg_has(&err, "No such file");
}

/* ---------------------------------------------------------- safetensors */

/* Header checks done without the library: length, JSON shape, offsets. */
static void check_header(const char *path, const model *m,
                         const char *const *escaped) {
  size_t len;
  unsigned char *f = slurp(path, &len);
  assert_true(len >= 8);
  uint64_t n = 0;
  for (int i = 7; i >= 0; i--)
    n = n << 8 | f[i];
  assert_true(n % 8 == 0);
  assert_true(8 + n <= len);
  char *h = (char *)f + 8;
  assert_int_equal(h[0], '{');
  size_t end = n;
  while (end > 0 && h[end - 1] == ' ')
    end--;
  assert_int_equal(h[end - 1], '}');
  assert_int_equal(n - end < 8, 1);
  char save = h[n];
  h[n] = '\0';
  assert_non_null(strstr(h, "\"__metadata__\":{\"format\":\"pt\""));
  assert_non_null(strstr(h, "\"step\":\"12\""));
  uint64_t at = 0;
  const char *p = h;
  for (int i = 0; i < NT; i++) {
    char key[128];
    snprintf(key, sizeof key, "\"%s\":{\"dtype\":\"F32\",\"shape\":[",
             escaped[i]);
    const char *k = strstr(h, key);
    if (k == NULL)
      fail_msg("header lacks %s: %s", key, h);
    assert_true(k >= p); /* tensors in the given order */
    const char *o = strstr(k, "\"data_offsets\":[");
    assert_non_null(o);
    unsigned long long b, e;
    assert_int_equal(sscanf(o, "\"data_offsets\":[%llu,%llu]", &b, &e), 2);
    assert_true(b == at); /* contiguous */
    assert_true(e - b == nto_named_numel(&m->t[i]) * 4);
    assert_memory_equal(f + 8 + n + b, m->t[i].data, e - b); /* LE host */
    at = e;
    p = o;
  }
  assert_true(8 + n + at == len);
  h[n] = save;
  free(f);
}

static const char *const meta[] = {
    "format", "pt", "step", "12", "note", "a \"quoted\"\\ value\n", NULL};

static void test_safetensors_round_trip(void **state) {
  fixture *fx = *state;
  char path[512];
  path_in(fx, path, sizeof path, "model.safetensors");
  model a, b;
  model_init(&a, 3, names_odd);
  model_init(&b, 4, names_odd);
  nto_err err = {0};
  if (nto_safetensors_save(path, a.t, NT, meta, &err))
    fail_msg("%s", err.msg);
  assert_int_equal(count_tmp(fx->dir), 0);
  static const char *const escaped[NT] = {"conv1.weight", "q\\\"uote\\\\back",
                                          "tab\\tnl\\nctl\\u0001",
                                          "caf\xc3\xa9"};
  check_header(path, &a, escaped);
  /* Load in another order: names are looked up. */
  nto_named_tensor rev[NT];
  for (int i = 0; i < NT; i++)
    rev[i] = b.t[NT - 1 - i];
  if (nto_safetensors_load(path, rev, NT, &err))
    fail_msg("%s", err.msg);
  assert_model_equal(&a, &b);
  /* A subset. */
  float bias[4] = {0};
  nto_named_tensor one = {
      .name = "q\"uote\\back", .ndim = 1, .dims = {4}, .data = bias};
  assert_int_equal(nto_safetensors_load(path, &one, 1, &err), 0);
  assert_memory_equal(bias, a.bias, sizeof bias);
  /* No metadata, no tensors: still valid files. */
  assert_int_equal(nto_safetensors_save(path, a.t, NT, NULL, &err), 0);
  assert_int_equal(nto_safetensors_load(path, b.t, NT, &err), 0);
  assert_int_equal(nto_safetensors_save(path, NULL, 0, NULL, &err), 0);
  size_t len;
  unsigned char *f = slurp(path, &len);
  assert_int_equal(len, 16);
  assert_memory_equal(f + 8, "{}      ", 8);
  free(f);
  assert_int_equal(nto_safetensors_load(path, NULL, 0, &err), 0);
}

static void test_safetensors_mismatch(void **state) {
  fixture *fx = *state;
  char path[512];
  path_in(fx, path, sizeof path, "model.safetensors");
  model a;
  model_init(&a, 3, names_plain);
  nto_err err = {0};
  assert_int_equal(nto_safetensors_save(path, a.t, NT, meta, &err), 0);
  float buf[108];
  nto_named_tensor t = {
      .name = "conv2.weight", .ndim = 4, .dims = {4, 3, 3, 3}, .data = buf};
  assert_int_equal(nto_safetensors_load(path, &t, 1, &err), NTO_EDATA);
  assert_msg_has(&err, path);
  assert_msg_has(&err, "conv2.weight");
  nto_named_tensor s = {
      .name = "conv1.weight", .ndim = 4, .dims = {3, 4, 3, 3}, .data = buf};
  assert_int_equal(nto_safetensors_load(path, &s, 1, &err), NTO_EDATA);
  assert_msg_has(&err, "shape [4, 3, 3, 3], expected [3, 4, 3, 3]");
  nto_named_tensor r = {
      .name = "conv1.weight", .ndim = 2, .dims = {12, 9}, .data = buf};
  assert_int_equal(nto_safetensors_load(path, &r, 1, &err), NTO_EDATA);
  /* Requests are all matched before data is read: buf untouched. */
  for (int i = 0; i < 108; i++)
    buf[i] = 7.0f;
  nto_named_tensor two[2] = {
      {.name = "conv1.weight", .ndim = 4, .dims = {4, 3, 3, 3}, .data = buf},
      {.name = "nope", .ndim = 1, .dims = {1}, .data = buf}};
  assert_int_equal(nto_safetensors_load(path, two, 2, &err), NTO_EDATA);
  assert_true(buf[0] == 7.0f && buf[107] == 7.0f);
  path_in(fx, path, sizeof path, "missing.safetensors");
  assert_int_equal(nto_safetensors_load(path, a.t, NT, &err), NTO_EIO);
  assert_msg_has(&err, path);
}

/* Write a safetensors file by hand: header text (unpadded), then data. */
static void write_st(const char *path, const char *hdr, uint64_t hlen_field,
                     const void *data, size_t dlen) {
  size_t hl = strlen(hdr);
  unsigned char *b = malloc(8 + hl + dlen);
  for (int i = 0; i < 8; i++)
    b[i] = (unsigned char)(hlen_field >> (8 * i));
  memcpy(b + 8, hdr, hl);
  if (dlen)
    memcpy(b + 8 + hl, data, dlen);
  spit(path, b, 8 + hl + dlen);
  free(b);
}

/* Malformed headers written to path (with data[0..2] after them), each
 * refused with its message, the tensor t (reading into out) untouched. */
static void corrupt_headers(const char *path, nto_named_tensor *t,
                            const float *data, const float *out) {
  nto_err err = {0};
  static const struct {
    const char *hdr;
    const char *what;
    const char *expect; /* in the message */
  } cases[] = {
      {"{\"w\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]}",
       "unterminated object", "expected '}'"},
      {"{\"w\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,16]}}",
       "offsets outside the file", "outside the data section"},
      {"{\"w\":{\"dtype\":\"F32\",\"shape\":[3],\"data_offsets\":[0,8]}}",
       "size does not match shape", "shape need 12"},
      {"{\"w\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[8,0]}}",
       "begin > end", "outside the data section"},
      {"{\"w\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]}} x",
       "trailing garbage", "trailing characters"},
      {"{\"w\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]},"
       "\"w\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]}}",
       "duplicate key", "duplicate key"},
      {"{\"w\":{\"dtype\":\"F32\",\"shape\":[02],\"data_offsets\":[0,8]}}",
       "leading zero", "leading zero"},
      {"{\"w\":{\"dtype\":\"F32\",\"shape\":[-2],\"data_offsets\":[0,8]}}",
       "negative dimension", "non-negative"},
      {"{\"w\":{\"dtype\":\"F32\",\"shape\":[2.0],\"data_offsets\":[0,8]}}",
       "fractional dimension", "expected an integer"},
      {"{\"w\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8,9]}}",
       "three offsets", "2 elements"},
      {"{\"w\":{\"dtype\":\"F32\",\"shape\":[2]}}", "no offsets", "lacks"},
      {"{\"\\q\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]}}",
       "bad escape", "invalid escape"},
      {"{\"w\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8],}}",
       "trailing comma", "expected a string"},
      {"{'w':{}}", "single quotes", "expected a string"},
      {"{\"__metadata__\":{\"a\":1},"
       "\"w\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]}}",
       "non-string metadata", "must be strings"},
      {"{\"w\":{\"dtype\":\"F16\",\"shape\":[4],\"data_offsets\":[0,8]}}",
       "not F32", "dtype F16"},
      {"{\"w\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]},"
       "\"v\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[4,8]}}",
       "overlapping tensors", "contiguous"},
      {"{\"w\\u0000\":{\"dtype\":\"F32\",\"shape\":[2],"
       "\"data_offsets\":[0,8]}}",
       "NUL in a name", "NUL character"},
      {"{\"w\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]}}"
       "\xff",
       "invalid UTF-8 outside strings", "trailing characters"},
      {"{\"\xc3(\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]}}",
       "invalid UTF-8 in a name", "invalid UTF-8"},
      {"{\"w\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8],"
       "\"x\":[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[["
       "[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[["
       "]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]"
       "]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]}}",
       "unknown key nested 70 deep", "nesting too deep"},
      {"{\"w\":[]}", "a tensor that is not an object", "expected '{'"},
      {"[]", "not an object", "expected '{'"},
      {"", "empty header", "header length 0"},
  };
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    write_st(path, cases[i].hdr, strlen(cases[i].hdr), data, 2 * sizeof *data);
    int rc = nto_safetensors_load(path, t, 1, &err);
    if (rc != NTO_EDATA)
      fail_msg("case %zu (%s): rc %d, %s", i, cases[i].what, rc, err.msg);
    if (strstr(err.msg, cases[i].expect) == NULL)
      fail_msg("case %zu (%s): \"%s\" lacks \"%s\"", i, cases[i].what, err.msg,
               cases[i].expect);
    assert_msg_has(&err, path);
    assert_true(out[0] == 9.0f && out[1] == 9.0f);
  }
}

/* Bad lengths and sections around a valid header, and a valid header from
 * another writer, at path: as corrupt_headers. */
static void corrupt_lengths(const char *path, nto_named_tensor *t,
                            const float *data, float *out) {
  nto_err err = {0};
  /* Header length larger than the file. */
  const char *ok =
      "{\"w\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]}}";
  write_st(path, ok, 1000, data, 2 * sizeof *data);
  assert_int_equal(nto_safetensors_load(path, t, 1, &err), NTO_EDATA);
  assert_msg_has(&err, path);
  assert_msg_has(&err, "header length 1000");
  write_st(path, ok, UINT64_MAX, data, 2 * sizeof *data);
  assert_int_equal(nto_safetensors_load(path, t, 1, &err), NTO_EDATA);
  /* Too short for the length field. */
  spit(path, "abc", 3);
  assert_int_equal(nto_safetensors_load(path, t, 1, &err), NTO_EDATA);
  assert_msg_has(&err, path);
  /* Tensors not covering the data section. */
  float three[3] = {1, 2, 3};
  write_st(path, ok, strlen(ok), three, sizeof three);
  assert_int_equal(nto_safetensors_load(path, t, 1, &err), NTO_EDATA);
  assert_msg_has(&err, "cover 8 bytes of a data section of 12 bytes");
  /* Data truncated after the header. */
  write_st(path, ok, strlen(ok), data, 4);
  assert_int_equal(nto_safetensors_load(path, t, 1, &err), NTO_EDATA);
  assert_true(out[0] == 9.0f);

  /* Valid JSON from another writer: whitespace, unknown keys, escapes,
   * other dtypes, metadata first or last. */
  const char *other =
      " { \"v\\u00e9\\ud83d\\ude00\" : { \"shape\" : [ 2 ] , \"extra\" : "
      "{\"a\":[1,-2.5e3,true,false,null]}, \"data_offsets\" : [ 0 , 8 ] , "
      "\"dtype\" : \"F32\" } , \"i\":{\"dtype\":\"I8\",\"shape\":[1,2],"
      "\"data_offsets\":[8,10]},\n\"__metadata__\" : { \"k\\/\" : \"v\" } }\t";
  unsigned char d2[10];
  memcpy(d2, data, 8);
  d2[8] = 1;
  d2[9] = 2;
  write_st(path, other, strlen(other), d2, sizeof d2);
  nto_named_tensor u = {
      .name = "v\xc3\xa9\xf0\x9f\x98\x80", .ndim = 1, .dims = {2}, .data = out};
  if (nto_safetensors_load(path, &u, 1, &err))
    fail_msg("%s", err.msg);
  assert_memory_equal(out, data, 2 * sizeof *data);
  nto_named_tensor i8 = {.name = "i", .ndim = 2, .dims = {1, 2}, .data = out};
  assert_int_equal(nto_safetensors_load(path, &i8, 1, &err), NTO_EDATA);
  assert_msg_has(&err, "dtype I8");
}

static void test_safetensors_corrupt(void **state) {
  fixture *fx = *state;
  char path[512];
  path_in(fx, path, sizeof path, "bad.safetensors");
  float data[2] = {1.5f, -2.0f}, out[2] = {9.0f, 9.0f};
  nto_named_tensor t = {.name = "w", .ndim = 1, .dims = {2}, .data = out};
  corrupt_headers(path, &t, data, out);
  corrupt_lengths(path, &t, data, out);
}

/* ------------------------------------------- initial weights (partial) */

/* b's fc.weight another shape (5,3) and a tensor the file lacks: the other
 * three load from a's safetensors, fc.weight and the new tensor keep their
 * values, and match[] says which and why. */
static void load_init_partial(const char *path, const model *a) {
  model b;
  model_init(&b, 4, names_plain);
  float fc3[15], extra[3] = {5, 5, 5};
  for (int k = 0; k < 15; k++)
    fc3[k] = 6.0f;
  nto_named_tensor ts[NT + 1];
  memcpy(ts, b.t, sizeof b.t);
  ts[3].dims[1] = 3;
  ts[3].data = fc3;
  ts[4] = (nto_named_tensor){
      .name = "head.bias", .ndim = 1, .dims = {3}, .data = extra};
  nto_weight_match mt[NT + 1];
  nto_weights_format fmt;
  int unused = -1;
  nto_err err = {0};
  if (nto_weights_load_init(path, ts, NT + 1, mt, &fmt, &unused, &err))
    fail_msg("%s", err.msg);
  assert_int_equal(fmt, NTO_WEIGHTS_SAFETENSORS);
  assert_int_equal(unused, 0); /* fc.weight is named, only reshaped */
  for (int i = 0; i < 3; i++) {
    assert_int_equal(mt[i].status, NTO_MATCH_LOADED);
    assert_memory_equal(ts[i].data, a->t[i].data,
                        nto_named_numel(&a->t[i]) * sizeof(float));
  }
  assert_int_equal(mt[3].status, NTO_MATCH_SHAPE);
  assert_int_equal(mt[3].ndim, 2);
  assert_true(mt[3].dims[0] == 5 && mt[3].dims[1] == 2);
  assert_true(fc3[0] == 6.0f && fc3[14] == 6.0f);
  assert_int_equal(mt[4].status, NTO_MATCH_ABSENT);
  assert_true(extra[0] == 5.0f && extra[2] == 5.0f);
}

/* Partial loads by name and shape (safetensors), whole .bin files, and
 * the errors that change nothing: no tensor matching, a named tensor not
 * F32, a truncated file, a .bin of another size. */
static void test_load_init(void **state) {
  fixture *fx = *state;
  char st[512], bin[512];
  path_in(fx, st, sizeof st, "init.safetensors");
  path_in(fx, bin, sizeof bin, "init.bin");
  model a, c;
  model_init(&a, 3, names_plain);
  nto_err err = {0};
  assert_int_equal(nto_safetensors_save(st, a.t, NT, meta, &err), 0);
  assert_int_equal(nto_weights_save_bin(bin, a.t, NT, &err), 0);
  load_init_partial(st, &a);

  nto_weight_match mt[NT];
  nto_weights_format fmt;
  int unused;
  model_init(&c, 5, names_plain);
  if (nto_weights_load_init(bin, c.t, NT, mt, &fmt, &unused, &err))
    fail_msg("%s", err.msg);
  assert_int_equal(fmt, NTO_WEIGHTS_BIN);
  for (int i = 0; i < NT; i++)
    assert_int_equal(mt[i].status, NTO_MATCH_LOADED);
  assert_model_equal(&a, &c);

  static const char *const other[NT] = {"x.weight", "x.bias", "y.mean",
                                        "z.weight"};
  model d, d0;
  model_init(&d, 6, other);
  model_init(&d0, 6, other);
  assert_int_equal(nto_weights_load_init(st, d.t, NT, mt, &fmt, &unused, &err),
                   NTO_EDATA);
  assert_msg_has(&err, st);
  assert_msg_has(&err, "no tensor of the model");
  assert_int_equal(unused, NT);
  assert_model_equal(&d, &d0);

  /* an I8 tensor the model does not name is skipped; a named F16 is not */
  const char *hdr = "{\"i\":{\"dtype\":\"I8\",\"shape\":[4],"
                    "\"data_offsets\":[0,4]},\"conv1.bias\":{\"dtype\":"
                    "\"F16\",\"shape\":[4],\"data_offsets\":[4,12]}}";
  unsigned char bytes[12] = {0};
  write_st(st, hdr, strlen(hdr), bytes, sizeof bytes);
  model_init(&d, 6, names_plain);
  model_init(&d0, 6, names_plain);
  assert_int_equal(nto_weights_load_init(st, d.t, NT, mt, &fmt, &unused, &err),
                   NTO_EDATA);
  assert_msg_has(&err, "\"conv1.bias\" has dtype F16");
  assert_model_equal(&d, &d0);

  /* truncated: the header's offsets run past the end */
  assert_int_equal(nto_safetensors_save(st, a.t, NT, meta, &err), 0);
  size_t len;
  unsigned char *b = slurp(st, &len);
  spit(st, b, len - 8);
  free(b);
  assert_int_equal(nto_weights_load_init(st, d.t, NT, mt, &fmt, &unused, &err),
                   NTO_EDATA);
  assert_msg_has(&err, "outside the data section");
  assert_model_equal(&d, &d0);
  b = slurp(st, &len);
  spit(st, b, 40); /* within the header: still read as safetensors */
  free(b);
  assert_int_equal(nto_weights_load_init(st, d.t, NT, mt, &fmt, &unused, &err),
                   NTO_EDATA);
  assert_msg_has(&err, "header length");
  assert_model_equal(&d, &d0);
  b = slurp(bin, &len);
  spit(bin, b, len - 4);
  free(b);
  assert_int_equal(nto_weights_load_init(bin, d.t, NT, mt, &fmt, &unused, &err),
                   NTO_EDATA);
  assert_msg_has(&err, bin);
  assert_model_equal(&d, &d0);
}

/* ---------------------------------------------------------- atomic saves */

static void test_failed_save_leaves_nothing(void **state) {
  fixture *fx = *state;
  char path[512], sub[512];
  model a;
  model_init(&a, 5, names_plain);
  nto_err err = {0};
  /* Into a nonexistent directory. */
  path_in(fx, path, sizeof path, "nodir/model.bin");
  assert_int_equal(nto_weights_save_bin(path, a.t, NT, &err), NTO_EIO);
  assert_msg_has(&err, path);
  assert_int_equal(nto_safetensors_save(path, a.t, NT, meta, &err), NTO_EIO);
  /* Over a non-empty directory: the temp file is written, the rename
   * fails, the temp file is removed and the directory is untouched. */
  path_in(fx, sub, sizeof sub, "occupied");
  assert_int_equal(mkdir(sub, 0755), 0);
  path_in(fx, path, sizeof path, "occupied/keep");
  spit(path, "keep", 4);
  assert_int_equal(nto_weights_save_bin(sub, a.t, NT, &err), NTO_EIO);
  assert_msg_has(&err, sub);
  assert_int_equal(count_tmp(fx->dir), 0);
  assert_int_equal(nto_safetensors_save(sub, a.t, NT, meta, &err), NTO_EIO);
  assert_int_equal(count_tmp(fx->dir), 0);
  struct stat st;
  assert_int_equal(stat(path, &st), 0);
  assert_int_equal(st.st_size, 4);
  /* Invalid arguments fail before anything is created. */
  path_in(fx, path, sizeof path, "model.safetensors");
  a.t[1].name = "bad\xff utf8";
  assert_int_equal(nto_safetensors_save(path, a.t, NT, meta, &err), NTO_EINVAL);
  a.t[1].name = "conv1.weight"; /* duplicate */
  assert_int_equal(nto_safetensors_save(path, a.t, NT, meta, &err), NTO_EINVAL);
  a.t[1].name = "conv1.bias";
  a.t[1].ndim = 5;
  assert_int_equal(nto_weights_save_bin(path, a.t, NT, &err), NTO_EINVAL);
  assert_int_equal(access(path, F_OK), -1);
  assert_int_equal(count_tmp(fx->dir), 0);
}

static void test_save_replaces_existing(void **state) {
  fixture *fx = *state;
  char bin[512], st[512];
  path_in(fx, bin, sizeof bin, "model.bin");
  path_in(fx, st, sizeof st, "model.safetensors");
  char junk[3000];
  memset(junk, 'x', sizeof junk);
  spit(bin, junk, sizeof junk);
  spit(st, junk, sizeof junk);
  model a, b;
  model_init(&a, 6, names_plain);
  model_init(&b, 7, names_plain);
  nto_err err = {0};
  assert_int_equal(nto_weights_save_bin(bin, a.t, NT, &err), 0);
  assert_int_equal(nto_safetensors_save(st, a.t, NT, meta, &err), 0);
  assert_int_equal(count_tmp(fx->dir), 0);
  assert_int_equal(nto_weights_load_bin(bin, b.t, NT, &err), 0);
  assert_model_equal(&a, &b);
  model_init(&b, 7, names_plain);
  assert_int_equal(nto_safetensors_load(st, b.t, NT, &err), 0);
  assert_model_equal(&a, &b);
  /* A second save with other values replaces the first. */
  model_init(&b, 8, names_plain);
  assert_int_equal(nto_safetensors_save(st, b.t, NT, meta, &err), 0);
  assert_int_equal(nto_safetensors_load(st, a.t, NT, &err), 0);
  assert_model_equal(&a, &b);
  /* Relative path in the current directory (directory fsync of "."). */
  char cwd[512];
  assert_non_null(getcwd(cwd, sizeof cwd));
  assert_int_equal(chdir(fx->dir), 0);
  int rc = nto_weights_save_bin("rel.bin", a.t, NT, &err);
  assert_int_equal(chdir(cwd), 0);
  assert_int_equal(rc, 0);
}

/* ------------------------------------------- tensors not in RAM (callbacks)
 *
 * Tensors with data NULL are reached through fetch/store callbacks, backed
 * here by arrays of the test (standing in for a swap file), with a fault
 * that can be injected on one index.
 */

enum { NB = NT + 1 }; /* the model's tensors plus an empty one */

typedef struct {
  float *vals[NB]; /* backing array of each index */
  size_t len[NB];  /* its floats */
  int fail_index;  /* -1: none; else fetch/store of this index fails */
  int fail_code;   /* what the failing call returns */
  int fill_err;    /* the failing call fills err (the contract) */
  int fetches, stores;
} backing;

static int fetch_cb(void *ctx, int index, float *dst, nto_err *err) {
  backing *b = ctx;
  b->fetches++;
  assert_in_range(index, 0, NB - 1);
  assert_true(b->len[index] > 0); /* never called for empty tensors */
  if (index == b->fail_index)
    return b->fill_err ? nto_err_set(err, b->fail_code,
                                     "swap.bin: slot %d: read failed", index)
                       : b->fail_code;
  memcpy(dst, b->vals[index], b->len[index] * sizeof *dst);
  return 0;
}

static int store_cb(void *ctx, int index, const float *src, nto_err *err) {
  backing *b = ctx;
  b->stores++;
  assert_in_range(index, 0, NB - 1);
  assert_true(b->len[index] > 0);
  if (index == b->fail_index)
    return b->fill_err ? nto_err_set(err, b->fail_code,
                                     "swap.bin: slot %d: write failed", index)
                       : b->fail_code;
  memcpy(b->vals[index], src, b->len[index] * sizeof *src);
  return 0;
}

/*
 * Descriptors ts[NB] for model m plus an empty tensor "empty" (dims {0}):
 * the indices set in swapped (bit i) get data NULL and callbacks backed by
 * m's arrays through bk; the others keep their data pointers.
 */
static void describe(nto_named_tensor ts[NB], model *m, backing *bk,
                     unsigned swapped) {
  memset(ts, 0, NB * sizeof *ts);
  memcpy(ts, m->t, sizeof m->t);
  ts[NT].name = "empty";
  ts[NT].ndim = 1;
  ts[NT].dims[0] = 0;
  memset(bk, 0, sizeof *bk);
  bk->fail_index = -1;
  bk->fill_err = 1;
  for (int i = 0; i < NB; i++) {
    bk->vals[i] = ts[i].data;
    bk->len[i] = nto_named_numel(&ts[i]);
    if (swapped >> i & 1) {
      ts[i].data = NULL;
      ts[i].fetch = fetch_cb;
      ts[i].store = store_cb;
      ts[i].ctx = bk;
      ts[i].index = i;
    }
  }
}

static void assert_same_file(const char *a, const char *b) {
  size_t la, lb;
  unsigned char *fa = slurp(a, &la), *fb = slurp(b, &lb);
  assert_int_equal(la, lb);
  assert_memory_equal(fa, fb, la);
  free(fa);
  free(fb);
}

static void test_callback_round_trip(void **state) {
  fixture *fx = *state;
  char ref_bin[512], ref_st[512], mix_bin[512], mix_st[512];
  path_in(fx, ref_bin, sizeof ref_bin, "ref.bin");
  path_in(fx, ref_st, sizeof ref_st, "ref.safetensors");
  path_in(fx, mix_bin, sizeof mix_bin, "mix.bin");
  path_in(fx, mix_st, sizeof mix_st, "mix.safetensors");
  model a, b;
  model_init(&a, 11, names_plain);
  nto_named_tensor ts[NB];
  backing bk;
  nto_err err = {0};
  /* Reference files: every tensor through its data pointer. */
  describe(ts, &a, &bk, 0);
  assert_int_equal(nto_weights_save_bin(ref_bin, ts, NB, &err), 0);
  assert_int_equal(nto_safetensors_save(ref_st, ts, NB, meta, &err), 0);
  assert_int_equal(bk.fetches, 0);
  /* conv weight, bn mean and the empty tensor through callbacks. */
  describe(ts, &a, &bk, 1u << 0 | 1u << 2 | 1u << NT);
  if (nto_weights_save_bin(mix_bin, ts, NB, &err))
    fail_msg("%s", err.msg);
  assert_int_equal(bk.fetches, 2);
  if (nto_safetensors_save(mix_st, ts, NB, meta, &err))
    fail_msg("%s", err.msg);
  assert_int_equal(bk.fetches, 4);
  assert_int_equal(count_tmp(fx->dir), 0);
  assert_same_file(mix_bin, ref_bin);
  assert_same_file(mix_st, ref_st);
  /* Every tensor through callbacks: the same files again. */
  describe(ts, &a, &bk, ~0u);
  assert_int_equal(nto_weights_save_bin(mix_bin, ts, NB, &err), 0);
  assert_int_equal(nto_safetensors_save(mix_st, ts, NB, meta, &err), 0);
  assert_int_equal(bk.fetches, 2 * NT);
  assert_same_file(mix_bin, ref_bin);
  assert_same_file(mix_st, ref_st);

  /* Load into b with the other tensors (bias, fc) behind callbacks. */
  for (int f = 0; f < 2; f++) {
    model_init(&b, 12, names_plain);
    describe(ts, &b, &bk, 1u << 1 | 1u << 3 | 1u << NT);
    int rc = f ? nto_safetensors_load(mix_st, ts, NB, &err)
               : nto_weights_load_bin(mix_bin, ts, NB, &err);
    if (rc)
      fail_msg("%s", err.msg);
    assert_int_equal(bk.stores, 2);
    assert_model_equal(&a, &b); /* callback-backed arrays are b's */
  }
  /* safetensors looks names up: callbacks in another order work too. */
  model_init(&b, 13, names_plain);
  describe(ts, &b, &bk, ~0u);
  nto_named_tensor rev[NB];
  for (int i = 0; i < NB; i++)
    rev[i] = ts[NB - 1 - i];
  assert_int_equal(nto_safetensors_load(mix_st, rev, NB, &err), 0);
  assert_int_equal(bk.stores, NT);
  assert_model_equal(&a, &b);
}

static void test_callback_fetch_fails(void **state) {
  fixture *fx = *state;
  char bin[512], st[512], fresh[512];
  path_in(fx, bin, sizeof bin, "model.bin");
  path_in(fx, st, sizeof st, "model.safetensors");
  path_in(fx, fresh, sizeof fresh, "fresh.bin");
  spit(bin, "old", 3);
  spit(st, "old", 3);
  model a;
  model_init(&a, 21, names_plain);
  nto_named_tensor ts[NB];
  backing bk;
  nto_err err = {0};
  static const int codes[] = {NTO_EIO, NTO_ENOMEM};
  for (int k = 0; k < 2; k++) {
    for (int f = 0; f < 2; f++) {
      const char *path = f ? st : bin;
      describe(ts, &a, &bk, 1u << 0 | 1u << 2);
      bk.fail_index = 2;
      bk.fail_code = codes[k];
      int rc = f ? nto_safetensors_save(path, ts, NB, meta, &err)
                 : nto_weights_save_bin(path, ts, NB, &err);
      assert_int_equal(rc, codes[k]); /* the callback's code, as is */
      assert_int_equal(err.code, codes[k]);
      assert_int_equal(bk.fetches, 2); /* stopped at the failing one */
      assert_msg_has(&err, path);
      assert_msg_has(&err, "\"bn1.running_mean\"");
      assert_msg_has(&err, "swap.bin: slot 2: read failed");
      /* No temp file left, the old file untouched. */
      assert_int_equal(count_tmp(fx->dir), 0);
      size_t len;
      unsigned char *old = slurp(path, &len);
      assert_int_equal(len, 3);
      assert_memory_equal(old, "old", 3);
      free(old);
    }
  }
  /* No file at all before: none after. */
  describe(ts, &a, &bk, 1u << 3);
  bk.fail_index = 3;
  bk.fail_code = NTO_EIO;
  assert_int_equal(nto_weights_save_bin(fresh, ts, NB, &err), NTO_EIO);
  assert_int_equal(access(fresh, F_OK), -1);
  /* A callback that fails without a message still gets one. */
  bk.fill_err = 0;
  bk.fail_code = NTO_EDATA;
  nto_err_set(&err, NTO_EDATA, "stale message");
  assert_int_equal(nto_weights_save_bin(fresh, ts, NB, &err), NTO_EDATA);
  assert_null(strstr(err.msg, "stale"));
  assert_msg_has(&err, fresh);
  assert_msg_has(&err, "fetch failed");
  /* A positive return breaks the contract: refused, not taken as success. */
  bk.fail_code = 1;
  assert_int_equal(nto_weights_save_bin(fresh, ts, NB, &err), NTO_EINVAL);
  assert_msg_has(&err, "returned 1");
  assert_int_equal(access(fresh, F_OK), -1);
  assert_int_equal(count_tmp(fx->dir), 0);
  /* data NULL without fetch: refused before any file is created. */
  ts[3].fetch = NULL;
  assert_int_equal(nto_weights_save_bin(fresh, ts, NB, &err), NTO_EINVAL);
  assert_msg_has(&err, "fc.weight");
  assert_int_equal(nto_safetensors_save(fresh, ts, NB, NULL, &err), NTO_EINVAL);
  assert_int_equal(access(fresh, F_OK), -1);
  assert_int_equal(count_tmp(fx->dir), 0);
}

static void test_callback_store_fails(void **state) {
  fixture *fx = *state;
  char bin[512], st[512];
  path_in(fx, bin, sizeof bin, "model.bin");
  path_in(fx, st, sizeof st, "model.safetensors");
  model a, b;
  model_init(&a, 31, names_plain);
  nto_named_tensor ts[NB];
  backing bk;
  nto_err err = {0};
  describe(ts, &a, &bk, 0);
  assert_int_equal(nto_weights_save_bin(bin, ts, NB, &err), 0);
  assert_int_equal(nto_safetensors_save(st, ts, NB, meta, &err), 0);
  for (int f = 0; f < 2; f++) {
    const char *path = f ? st : bin;
    model_init(&b, 32, names_plain);
    describe(ts, &b, &bk, 1u << 1 | 1u << 3);
    bk.fail_index = 3;
    bk.fail_code = NTO_ENOMEM;
    int rc = f ? nto_safetensors_load(path, ts, NB, &err)
               : nto_weights_load_bin(path, ts, NB, &err);
    assert_int_equal(rc, NTO_ENOMEM);
    assert_int_equal(err.code, NTO_ENOMEM);
    assert_int_equal(bk.stores, 2);
    assert_msg_has(&err, path);
    assert_msg_has(&err, "\"fc.weight\"");
    assert_msg_has(&err, "swap.bin: slot 3: write failed");
    /* The tensors before the failing one were loaded. */
    assert_memory_equal(b.bias, a.bias, sizeof b.bias);
    /* data NULL without store: refused before reading. */
    model_init(&b, 32, names_plain);
    describe(ts, &b, &bk, 1u << 1);
    ts[1].store = NULL;
    rc = f ? nto_safetensors_load(path, ts, NB, &err)
           : nto_weights_load_bin(path, ts, NB, &err);
    assert_int_equal(rc, NTO_EINVAL);
    assert_msg_has(&err, "conv1.bias");
    model c;
    model_init(&c, 32, names_plain);
    assert_model_equal(&b, &c);
  }
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test_setup_teardown(test_bin_round_trip, setup, teardown),
      cmocka_unit_test_setup_teardown(test_load_init, setup, teardown),
      cmocka_unit_test_setup_teardown(test_bin_wrong_size, setup, teardown),
      cmocka_unit_test_setup_teardown(test_bin_training_trailer, setup,
                                      teardown),
      cmocka_unit_test_setup_teardown(test_safetensors_round_trip, setup,
                                      teardown),
      cmocka_unit_test_setup_teardown(test_safetensors_mismatch, setup,
                                      teardown),
      cmocka_unit_test_setup_teardown(test_safetensors_corrupt, setup,
                                      teardown),
      cmocka_unit_test_setup_teardown(test_failed_save_leaves_nothing, setup,
                                      teardown),
      cmocka_unit_test_setup_teardown(test_save_replaces_existing, setup,
                                      teardown),
      cmocka_unit_test_setup_teardown(test_callback_round_trip, setup,
                                      teardown),
      cmocka_unit_test_setup_teardown(test_callback_fetch_fails, setup,
                                      teardown),
      cmocka_unit_test_setup_teardown(test_callback_store_fails, setup,
                                      teardown),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
