/*
 * json.h - a small strict JSON reader (RFC 8259): a cursor over a text
 * that the caller walks value by value, reading what it knows and
 * skipping the rest. Used for safetensors headers (io/weights.c) and
 * train's --report-json files (app/bench.c).
 *
 * Strict: the grammar exactly (no comments, no trailing commas, no
 * leading zeros, no single quotes), strings checked to be UTF-8, escapes
 * decoded (\uXXXX, surrogate pairs joined; a lone surrogate and \u0000
 * refused), containers nested at most max_depth deep, and, in an object
 * opened with NTO_JSON_UNIQUE, a key given twice refused.
 *
 * Errors are data: a syntax error (NTO_EDATA) records what was wrong and
 * the byte offset where (nto_json_error), and fills err with "byte <N>:
 * <what>"; callers that want their own wording (the file name, what the
 * text is) build it from nto_json_error once, where they started reading.
 * The texts name what was expected ("expected '}' or ','", "expected a
 * string", "invalid escape", "duplicate key", "nesting too deep", ...).
 *
 * Usage:
 *   nto_json j;
 *   nto_json_init(&j, text, len, 0, 32, err);
 *   int more, rc = nto_json_object(&j, NTO_JSON_UNIQUE);
 *   char *key;
 *   while (rc == 0 && (rc = nto_json_key(&j, &key, &more)) == 0 && more) {
 *     rc = strcmp(key, "n") ? nto_json_skip(&j) : nto_json_uint(&j, &n);
 *     free(key);
 *   }
 *   if (rc == 0 && !nto_json_eof(&j)) rc = nto_json_fail(&j, "text after");
 *   nto_json_free(&j);
 *
 * Threads: a cursor is used by one thread at a time. Every function that
 * returns int returns 0 or a negative nto_status: NTO_EDATA (syntax, as
 * above), NTO_ENOMEM ("out of memory"), NTO_EINVAL (misuse: nto_json_key
 * outside an object, nto_json_next outside an array).
 */
#ifndef NTO_JSON_H
#define NTO_JSON_H

#include "error.h"

#include <stddef.h>
#include <stdint.h>

#define NTO_JSON_MAX_DEPTH 128 /* the largest max_depth */
#define NTO_JSON_UNIQUE 1u     /* nto_json_object: refuse duplicate keys */

/* The kind of the value at the cursor (by its first character). */
typedef enum {
  NTO_JSON_NONE, /* the end of the text, or no value starts here */
  NTO_JSON_OBJECT,
  NTO_JSON_ARRAY,
  NTO_JSON_STRING,
  NTO_JSON_NUMBER,
  NTO_JSON_BOOL,
  NTO_JSON_NULL
} nto_json_type;

/* One open object or array. */
typedef struct nto_json_level {
  unsigned count;             /* members or elements begun so far */
  char close;                 /* '}' or ']' */
  struct nto_json_keys *keys; /* NTO_JSON_UNIQUE: the keys seen, else NULL */
} nto_json_level;

/* The cursor. Its fields are private: use the functions. */
typedef struct nto_json {
  const char *s; /* the text, len bytes (need not be NUL-terminated) */
  size_t len, pos;
  uint64_t origin; /* byte offset of s[0] in its file, for messages */
  int depth, max_depth;
  nto_json_level level[NTO_JSON_MAX_DEPTH];
  nto_err *err;
  int failed;    /* a syntax error was recorded */
  uint64_t at;   /* ... at this byte offset (origin + cursor) */
  char what[96]; /* ... described so */
} nto_json;

/*
 * Start reading text[0..len) (not copied: it must outlive the cursor).
 * origin: where text starts in its file (offsets in errors add it).
 * max_depth: containers open at once, 1..NTO_JSON_MAX_DEPTH (clamped).
 * err (may be NULL) receives every error's message.
 */
void nto_json_init(nto_json *j, const char *text, size_t len, uint64_t origin,
                   int max_depth, nto_err *err);

/* Free what the cursor holds (the key sets of objects still open after an
 * error). j may be reused with nto_json_init afterwards. */
void nto_json_free(nto_json *j);

/* The kind of the next value (whitespace skipped), without reading it. */
nto_json_type nto_json_peek(nto_json *j);

/* 1 if only whitespace remains after the cursor, else 0. */
int nto_json_eof(nto_json *j);

/*
 * Open an object ('{'): then call nto_json_key until *more is 0. flags:
 * 0, or NTO_JSON_UNIQUE (a key given twice: "duplicate key"). Errors:
 * "expected '{'", "nesting too deep".
 */
int nto_json_object(nto_json *j, unsigned flags);

/*
 * The next member of the innermost open object. *more = 1: its key was
 * read (decoded, NUL-terminated, malloc'd into *key unless key is NULL;
 * the caller frees it) with the ':' after it, and the cursor is at the
 * member's value, which the caller must read or skip next. *more = 0: the
 * object ended ('}' read; it is closed). *key is NULL unless *more is 1.
 * Errors: "expected '}' or ','", "expected a string", the string's
 * errors, "expected ':'", "duplicate key".
 */
int nto_json_key(nto_json *j, char **key, int *more);

/* Open an array ('['): then call nto_json_next until *more is 0. Errors:
 * "expected '['", "nesting too deep". */
int nto_json_array(nto_json *j);

/*
 * The next element of the innermost open array. *more = 1: the cursor is
 * at an element, which the caller must read or skip next; *more = 0: the
 * array ended (']' read; it is closed). Error: "expected ']' or ','".
 */
int nto_json_next(nto_json *j, int *more);

/*
 * A string, decoded (escapes resolved, UTF-8 checked), into *out
 * (malloc'd, NUL-terminated; the caller frees it), or only checked when
 * out is NULL. Errors: "expected a string", "unterminated string",
 * "control character in string", "invalid UTF-8", "unterminated
 * escape", "invalid escape",
 * "invalid \u escape", "unpaired surrogate", "NUL character in string".
 */
int nto_json_string(nto_json *j, char **out);

/* A string into buf (len bytes, NUL included); "string too long" when it
 * does not fit (buf then holds a NUL-terminated prefix). */
int nto_json_string_buf(nto_json *j, char *buf, size_t len);

/*
 * A number into *out (strtod of its text; out may be NULL). Errors:
 * "expected a number", "leading zero", "expected digits after '.'",
 * "expected digits in the exponent".
 */
int nto_json_number(nto_json *j, double *out);

/*
 * A non-negative integer (no sign, fraction or exponent) up to 2^63 - 1
 * into *out. Errors: "expected a non-negative integer", "leading zero",
 * "expected an integer", "integer too large".
 */
int nto_json_uint(nto_json *j, uint64_t *out);

/* true or false into *out (1 or 0; out may be NULL). Errors: "expected
 * true or false", "invalid literal". */
int nto_json_bool(nto_json *j, int *out);

/* null. Errors: "expected null", "invalid literal". */
int nto_json_null(nto_json *j);

/* Any value, checked and passed over (objects: duplicate keys allowed).
 * Error: "expected a value", or the value's own. */
int nto_json_skip(nto_json *j);

/*
 * Record a syntax error of the caller's at the cursor (where the last
 * read, peek or nto_json_eof left it): what (copied, cut at 95 bytes) and
 * the byte offset, and err's message "byte <N>: <what>". Returns
 * NTO_EDATA.
 */
int nto_json_fail(nto_json *j, const char *what);

/* The recorded syntax error's description and, into *at (may be NULL),
 * its byte offset (origin included); NULL if none was recorded. */
const char *nto_json_error(const nto_json *j, uint64_t *at);

/*
 * Length of the valid UTF-8 sequence at s (1..4 bytes; avail bytes
 * readable), or 0 if it is not one: overlong forms, surrogates and code
 * points above U+10FFFF are invalid. For writers that must emit UTF-8.
 */
size_t nto_json_utf8_len(const unsigned char *s, size_t avail);

#endif /* NTO_JSON_H */
