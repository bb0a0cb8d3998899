/*
 * json.c - the strict JSON cursor. See json.h.
 *
 * DESIGN
 * A recursive-descent reader driven by the caller: each function reads
 * one token or value at the cursor (after whitespace) and leaves the
 * cursor after it. The open containers form a stack (level[], at most
 * max_depth): each level counts the members or elements begun, so that
 * nto_json_key / nto_json_next know whether a ',' must come first, and
 * closes itself when its '}' or ']' is read. Strings are decoded into a
 * sink: a growing malloc'd buffer, the caller's fixed buffer, or nothing
 * (checking only). An object opened with NTO_JSON_UNIQUE keeps a copy of
 * every key in a hash set (open addressing on a 64-bit FNV-1a hash), so
 * that a duplicate is found in constant time however many members there
 * are (a safetensors header has one per tensor).
 */
#include "json.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* --------------------------------------------------------------- errors */

int nto_json_fail(nto_json *j, const char *what) {
  j->failed = 1;
  j->at = j->origin + j->pos;
  snprintf(j->what, sizeof j->what, "%s", what);
  return nto_err_set(j->err, NTO_EDATA, "byte %llu: %s",
                     (unsigned long long)j->at, j->what);
}

const char *nto_json_error(const nto_json *j, uint64_t *at) {
  if (!j->failed)
    return NULL;
  if (at)
    *at = j->at;
  return j->what;
}

static int oom(nto_json *j) {
  return nto_err_set(j->err, NTO_ENOMEM, "out of memory");
}

/* ------------------------------------------------------------ the cursor */

void nto_json_init(nto_json *j, const char *text, size_t len, uint64_t origin,
                   int max_depth, nto_err *err) {
  memset(j, 0, sizeof *j);
  j->s = text;
  j->len = len;
  j->origin = origin;
  j->max_depth = max_depth < 1                    ? 1
                 : max_depth > NTO_JSON_MAX_DEPTH ? NTO_JSON_MAX_DEPTH
                                                  : max_depth;
  j->err = err;
}

/* The next character after whitespace (not consumed), or -1 at the end. */
static int peek_char(nto_json *j) {
  while (j->pos < j->len && (j->s[j->pos] == ' ' || j->s[j->pos] == '\t' ||
                             j->s[j->pos] == '\n' || j->s[j->pos] == '\r'))
    j->pos++;
  return j->pos < j->len ? (unsigned char)j->s[j->pos] : -1;
}

nto_json_type nto_json_peek(nto_json *j) {
  int c = peek_char(j);
  if (c == '{')
    return NTO_JSON_OBJECT;
  if (c == '[')
    return NTO_JSON_ARRAY;
  if (c == '"')
    return NTO_JSON_STRING;
  if (c == '-' || (c >= '0' && c <= '9'))
    return NTO_JSON_NUMBER;
  if (c == 't' || c == 'f')
    return NTO_JSON_BOOL;
  return c == 'n' ? NTO_JSON_NULL : NTO_JSON_NONE;
}

int nto_json_eof(nto_json *j) { return peek_char(j) == -1; }

/* Read the character c, else fail with "expected 'c'". */
static int expect(nto_json *j, char c) {
  if (peek_char(j) != (unsigned char)c) {
    char what[32];
    snprintf(what, sizeof what, "expected '%c'", c);
    return nto_json_fail(j, what);
  }
  j->pos++;
  return 0;
}

/* ----------------------------------------------------------- the key set */

typedef struct key_slot {
  uint64_t hash;
  char *key; /* NULL: empty */
} key_slot;

struct nto_json_keys {
  key_slot *v;
  size_t cap, n; /* cap: a power of two, at most half full */
};

static uint64_t fnv1a(const char *s) {
  uint64_t h = 0xcbf29ce484222325ull;
  for (; *s; s++) {
    h ^= (unsigned char)*s;
    h *= 0x100000001b3ull;
  }
  return h;
}

static void keys_free(struct nto_json_keys *k) {
  if (!k)
    return;
  for (size_t i = 0; i < k->cap; i++)
    free(k->v[i].key);
  free(k->v);
  free(k);
}

/* Put s into slot table v (cap slots) unless it is there: 1 if it was. */
static int keys_put(key_slot *v, size_t cap, uint64_t h, char *s) {
  size_t i = (size_t)h & (cap - 1);
  for (; v[i].key; i = (i + 1) & (cap - 1))
    if (v[i].hash == h && strcmp(v[i].key, s) == 0)
      return 1;
  v[i].hash = h;
  v[i].key = s;
  return 0;
}

/* Add a copy of key to k. Returns 0, 1 if it was there already, -1 if
 * out of memory. */
static int keys_add(struct nto_json_keys *k, const char *key) {
  if (2 * (k->n + 1) > k->cap) {
    size_t cap = k->cap ? 2 * k->cap : 16;
    key_slot *v = calloc(cap, sizeof *v);
    if (!v)
      return -1;
    for (size_t i = 0; i < k->cap; i++)
      if (k->v[i].key)
        keys_put(v, cap, k->v[i].hash, k->v[i].key);
    free(k->v);
    k->v = v;
    k->cap = cap;
  }
  size_t n = strlen(key) + 1;
  char *copy = malloc(n);
  if (!copy)
    return -1;
  memcpy(copy, key, n);
  if (keys_put(k->v, k->cap, fnv1a(copy), copy)) {
    free(copy);
    return 1;
  }
  k->n++;
  return 0;
}

/* ------------------------------------------------------------ containers */

/* Open a container at the cursor's c ('{' or '['). */
static int open_level(nto_json *j, char c, unsigned flags) {
  if (peek_char(j) != (unsigned char)c) {
    char what[32];
    snprintf(what, sizeof what, "expected '%c'", c);
    return nto_json_fail(j, what);
  }
  if (j->depth >= j->max_depth)
    return nto_json_fail(j, "nesting too deep");
  nto_json_level *l = &j->level[j->depth];
  memset(l, 0, sizeof *l);
  l->close = c == '{' ? '}' : ']';
  if ((flags & NTO_JSON_UNIQUE) && !(l->keys = calloc(1, sizeof *l->keys)))
    return oom(j);
  j->pos++;
  j->depth++;
  return 0;
}

static void close_level(nto_json *j) {
  j->depth--;
  keys_free(j->level[j->depth].keys);
  j->level[j->depth].keys = NULL;
}

void nto_json_free(nto_json *j) {
  while (j->depth > 0)
    close_level(j);
}

int nto_json_object(nto_json *j, unsigned flags) {
  return open_level(j, '{', flags);
}

int nto_json_array(nto_json *j) { return open_level(j, '[', 0); }

/*
 * Step to the next member or element of the innermost container, whose
 * closing character must be close: *more = 1 when one follows (a ','
 * read before it unless it is the first), 0 when the container ended
 * (its closing character read, the level closed).
 */
static int advance(nto_json *j, char close, int *more) {
  *more = 0;
  if (j->depth == 0 || j->level[j->depth - 1].close != close)
    return nto_err_set(j->err, NTO_EINVAL, "JSON: not inside an %s",
                       close == '}' ? "object" : "array");
  nto_json_level *l = &j->level[j->depth - 1];
  int c = peek_char(j);
  if (c == close) {
    j->pos++;
    close_level(j);
    return 0;
  }
  if (l->count > 0) {
    if (c != ',')
      return nto_json_fail(j, close == '}' ? "expected '}' or ','"
                                           : "expected ']' or ','");
    j->pos++;
  }
  l->count++;
  *more = 1;
  return 0;
}

int nto_json_next(nto_json *j, int *more) { return advance(j, ']', more); }

int nto_json_key(nto_json *j, char **key, int *more) {
  if (key)
    *key = NULL;
  int rc = advance(j, '}', more);
  if (rc || !*more)
    return rc;
  struct nto_json_keys *set = j->level[j->depth - 1].keys;
  char *k = NULL;
  rc = nto_json_string(j, key || set ? &k : NULL);
  if (rc == 0)
    rc = expect(j, ':');
  if (rc == 0 && set) {
    int seen = keys_add(set, k);
    rc = seen < 0 ? oom(j) : seen ? nto_json_fail(j, "duplicate key") : 0;
  }
  if (rc) {
    free(k);
    *more = 0;
    return rc;
  }
  if (key)
    *key = k;
  else
    free(k);
  return 0;
}

/* --------------------------------------------------------------- strings */

/* Where a string's decoded bytes go: a growing malloc'd buffer (grow), a
 * fixed one (over: it did not fit), or nowhere (p NULL, !grow). */
typedef struct sink {
  char *p;
  size_t len, cap;
  int grow, over, oom;
} sink;

static void sink_add(sink *k, const char *s, size_t n) {
  if (k->len + n + 1 > k->cap && k->grow && !k->oom) {
    size_t cap = k->cap ? k->cap : 64;
    while (k->len + n + 1 > cap)
      cap *= 2;
    char *p = realloc(k->p, cap);
    if (!p)
      k->oom = 1;
    else
      k->p = p, k->cap = cap;
  }
  if (!k->p || k->oom || k->over)
    return;
  if (k->len + n + 1 > k->cap) {
    k->over = 1;
    return;
  }
  memcpy(k->p + k->len, s, n);
  k->len += n;
  k->p[k->len] = '\0';
}

/* Append code point cp (<= 0x10FFFF, not a surrogate) as UTF-8. */
static void sink_utf8(sink *k, unsigned cp) {
  char t[4];
  size_t n;
  if (cp < 0x80) {
    t[0] = (char)cp, n = 1;
  } else if (cp < 0x800) {
    t[0] = (char)(0xC0 | cp >> 6), n = 2;
  } else if (cp < 0x10000) {
    t[0] = (char)(0xE0 | cp >> 12), n = 3;
  } else {
    t[0] = (char)(0xF0 | cp >> 18), n = 4;
  }
  for (size_t i = 1; i < n; i++)
    t[i] = (char)(0x80 | ((cp >> (6 * (n - 1 - i))) & 0x3F));
  sink_add(k, t, n);
}

size_t nto_json_utf8_len(const unsigned char *s, size_t avail) {
  unsigned c = s[0];
  size_t n;
  unsigned min;
  if (c < 0x80)
    return 1;
  if ((c & 0xE0) == 0xC0)
    n = 2, min = 0x80;
  else if ((c & 0xF0) == 0xE0)
    n = 3, min = 0x800;
  else if ((c & 0xF8) == 0xF0)
    n = 4, min = 0x10000;
  else
    return 0;
  if (n > avail)
    return 0;
  unsigned cp = c & (0x7Fu >> n);
  for (size_t i = 1; i < n; i++) {
    if ((s[i] & 0xC0) != 0x80)
      return 0;
    cp = cp << 6 | (s[i] & 0x3Fu);
  }
  if (cp < min || cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF))
    return 0;
  return n;
}

/* Four hex digits at the cursor into *out; -1 if they are not. */
static int hex4(const nto_json *j, unsigned *out) {
  if (j->len - j->pos < 4)
    return -1;
  unsigned v = 0;
  for (size_t i = j->pos; i < j->pos + 4; i++) {
    char c = j->s[i];
    v <<= 4;
    if (c >= '0' && c <= '9')
      v |= (unsigned)(c - '0');
    else if (c >= 'a' && c <= 'f')
      v |= (unsigned)(c - 'a' + 10);
    else if (c >= 'A' && c <= 'F')
      v |= (unsigned)(c - 'A' + 10);
    else
      return -1;
  }
  *out = v;
  return 0;
}

/* The code point of "\uXXXX" (the cursor after the 'u'), joining a
 * surrogate pair written as two escapes. */
static int unicode_escape(nto_json *j, unsigned *cp) {
  unsigned lo;
  if (hex4(j, cp))
    return nto_json_fail(j, "invalid \\u escape");
  j->pos += 4;
  if (*cp >= 0xDC00 && *cp <= 0xDFFF)
    return nto_json_fail(j, "unpaired surrogate");
  if (*cp >= 0xD800 && *cp <= 0xDBFF) {
    if (j->len - j->pos < 2 || j->s[j->pos] != '\\' || j->s[j->pos + 1] != 'u')
      return nto_json_fail(j, "unpaired surrogate");
    j->pos += 2;
    if (hex4(j, &lo) || lo < 0xDC00 || lo > 0xDFFF)
      return nto_json_fail(j, "unpaired surrogate");
    j->pos += 4;
    *cp = 0x10000 + ((*cp - 0xD800) << 10) + (lo - 0xDC00);
  }
  if (*cp == 0)
    return nto_json_fail(j, "NUL character in string");
  return 0;
}

/* One escape sequence, the cursor at its backslash, into k. */
static int escape(nto_json *j, sink *k) {
  static const char from[] = "\"\\/bfnrt", to[] = "\"\\/\b\f\n\r\t";
  if (j->len - j->pos < 2)
    return nto_json_fail(j, "unterminated escape");
  char e = j->s[j->pos + 1];
  const char *at = e ? strchr(from, e) : NULL;
  j->pos += 2;
  if (at) {
    sink_add(k, to + (at - from), 1);
    return 0;
  }
  if (e != 'u') {
    j->pos -= 2;
    return nto_json_fail(j, "invalid escape");
  }
  unsigned cp = 0;
  int rc = unicode_escape(j, &cp);
  if (rc == 0)
    sink_utf8(k, cp);
  return rc;
}

/* A string at the cursor into k. */
static int read_string(nto_json *j, sink *k) {
  if (peek_char(j) != '"')
    return nto_json_fail(j, "expected a string");
  j->pos++;
  sink_add(k, "", 0);
  for (;;) {
    if (j->pos >= j->len)
      return nto_json_fail(j, "unterminated string");
    unsigned char c = (unsigned char)j->s[j->pos];
    int rc = 0;
    if (c == '"') {
      j->pos++;
      return k->oom ? oom(j) : 0;
    }
    if (c < 0x20)
      return nto_json_fail(j, "control character in string");
    if (c == '\\') {
      rc = escape(j, k);
    } else {
      size_t n = nto_json_utf8_len((const unsigned char *)j->s + j->pos,
                                   j->len - j->pos);
      if (n == 0)
        return nto_json_fail(j, "invalid UTF-8");
      sink_add(k, j->s + j->pos, n);
      j->pos += n;
    }
    if (rc)
      return rc;
  }
}

int nto_json_string(nto_json *j, char **out) {
  sink k = {.grow = out != NULL};
  int rc = read_string(j, &k);
  if (rc || !out) {
    free(k.p);
    return rc;
  }
  *out = k.p;
  return 0;
}

int nto_json_string_buf(nto_json *j, char *buf, size_t len) {
  sink k = {.p = buf, .cap = len};
  if (len)
    buf[0] = '\0';
  int rc = read_string(j, &k);
  return rc == 0 && k.over ? nto_json_fail(j, "string too long") : rc;
}

/* --------------------------------------------------------------- numbers */

static size_t digits(const nto_json *j, size_t i) {
  size_t n = 0;
  while (i + n < j->len && j->s[i + n] >= '0' && j->s[i + n] <= '9')
    n++;
  return n;
}

/*
 * Check the number at the cursor against the grammar
 * -?(0|[1-9][0-9]*)(.[0-9]+)?([eE][+-]?[0-9]+)? and find its end (*end);
 * *integer: no fraction and no exponent. The cursor does not move.
 */
static int scan_number(nto_json *j, size_t *end, int *integer) {
  int c = peek_char(j);
  size_t i = c == '-' ? j->pos + 1 : j->pos;
  size_t d = digits(j, i);
  if (d == 0)
    return nto_json_fail(j, "expected a number");
  if (d > 1 && j->s[i] == '0')
    return nto_json_fail(j, "leading zero");
  i += d;
  *integer = 1;
  if (i < j->len && j->s[i] == '.') {
    *integer = 0;
    if ((d = digits(j, ++i)) == 0)
      return nto_json_fail(j, "expected digits after '.'");
    i += d;
  }
  if (i < j->len && (j->s[i] == 'e' || j->s[i] == 'E')) {
    *integer = 0;
    i++;
    if (i < j->len && (j->s[i] == '+' || j->s[i] == '-'))
      i++;
    if ((d = digits(j, i)) == 0)
      return nto_json_fail(j, "expected digits in the exponent");
    i += d;
  }
  *end = i;
  return 0;
}

int nto_json_number(nto_json *j, double *out) {
  size_t end;
  int integer;
  int rc = scan_number(j, &end, &integer);
  if (rc)
    return rc;
  size_t n = end - j->pos;
  char small[64], *text = n < sizeof small ? small : malloc(n + 1);
  if (!text)
    return oom(j);
  memcpy(text, j->s + j->pos, n);
  text[n] = '\0';
  if (out)
    *out = strtod(text, NULL);
  if (text != small)
    free(text);
  j->pos = end;
  return 0;
}

int nto_json_uint(nto_json *j, uint64_t *out) {
  int c = peek_char(j);
  if (c < '0' || c > '9')
    return nto_json_fail(j, "expected a non-negative integer");
  size_t end;
  int integer;
  int rc = scan_number(j, &end, &integer);
  if (rc)
    return rc;
  if (!integer)
    return nto_json_fail(j, "expected an integer");
  uint64_t v = 0;
  for (size_t i = j->pos; i < end; i++) {
    unsigned d = (unsigned)(j->s[i] - '0');
    if (v > (UINT64_C(0x7FFFFFFFFFFFFFFF) - d) / 10)
      return nto_json_fail(j, "integer too large");
    v = v * 10 + d;
  }
  *out = v;
  j->pos = end;
  return 0;
}

/* ------------------------------------------------------ literals, values */

/* The word at the cursor (after whitespace); "invalid literal" if the
 * text is not it. */
static int literal(nto_json *j, const char *word) {
  size_t n = strlen(word);
  peek_char(j);
  if (j->len - j->pos < n || memcmp(j->s + j->pos, word, n) != 0)
    return nto_json_fail(j, "invalid literal");
  j->pos += n;
  return 0;
}

int nto_json_bool(nto_json *j, int *out) {
  int c = peek_char(j);
  if (c != 't' && c != 'f')
    return nto_json_fail(j, "expected true or false");
  int rc = literal(j, c == 't' ? "true" : "false");
  if (rc == 0 && out)
    *out = c == 't';
  return rc;
}

int nto_json_null(nto_json *j) {
  if (peek_char(j) != 'n')
    return nto_json_fail(j, "expected null");
  return literal(j, "null");
}

int nto_json_skip(nto_json *j) {
  int more = 1, rc;
  switch (nto_json_peek(j)) {
  case NTO_JSON_OBJECT:
    rc = nto_json_object(j, 0);
    while (rc == 0 && (rc = nto_json_key(j, NULL, &more)) == 0 && more)
      rc = nto_json_skip(j);
    return rc;
  case NTO_JSON_ARRAY:
    rc = nto_json_array(j);
    while (rc == 0 && (rc = nto_json_next(j, &more)) == 0 && more)
      rc = nto_json_skip(j);
    return rc;
  case NTO_JSON_STRING:
    return nto_json_string(j, NULL);
  case NTO_JSON_NUMBER:
    return nto_json_number(j, NULL);
  case NTO_JSON_BOOL:
    return nto_json_bool(j, NULL);
  case NTO_JSON_NULL:
    return nto_json_null(j);
  case NTO_JSON_NONE:
    break;
  }
  return nto_json_fail(j, "expected a value");
}
