/*
 * test_json.c - io/json.h, the strict JSON cursor: valid documents walked
 * value by value (every kind, whitespace, empty containers, skipping);
 * each kind of malformed input refused with its description and byte
 * offset; the depth limit; duplicate keys (refused only where asked,
 * compared after decoding, across a growing key set); escapes and
 * surrogate pairs decoded; numbers (grammar, values, integer limits);
 * UTF-8 validation; misuse.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include "json.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* A cursor over the NUL-terminated text s (origin 0, depth 32). */
static void start(nto_json *j, const char *s, nto_err *err) {
  nto_json_init(j, s, strlen(s), 0, 32, err);
}

/* ------------------------------------------------------ valid documents */

static void test_walk(void **state) {
  (void)state;
  const char *doc = " {\"n\": -12.5e1, \"s\" : \"x\\ty\", \"b\":[true,false ,"
                    "null],\n\"o\":{},\"a\":[], \"u\": 42,\"deep\":[{\"k\":"
                    "[1,{\"z\":null}]}]}\t\r\n";
  nto_err err = {0};
  nto_json j;
  start(&j, doc, &err);
  assert_int_equal(nto_json_peek(&j), NTO_JSON_OBJECT);
  assert_int_equal(nto_json_object(&j, NTO_JSON_UNIQUE), 0);
  int more, b = -1;
  char *key, *str;
  double x;
  uint64_t u;
  assert_int_equal(nto_json_key(&j, &key, &more), 0);
  assert_true(more);
  assert_string_equal(key, "n");
  free(key);
  assert_int_equal(nto_json_peek(&j), NTO_JSON_NUMBER);
  assert_int_equal(nto_json_number(&j, &x), 0);
  assert_true(x == -125.0);
  assert_int_equal(nto_json_key(&j, NULL, &more), 0); /* key not wanted */
  assert_true(more);
  assert_int_equal(nto_json_string(&j, &str), 0);
  assert_string_equal(str, "x\ty");
  free(str);
  assert_int_equal(nto_json_key(&j, NULL, &more), 0);
  assert_int_equal(nto_json_array(&j), 0);
  assert_int_equal(nto_json_next(&j, &more), 0);
  assert_int_equal(nto_json_bool(&j, &b), 0);
  assert_int_equal(b, 1);
  assert_int_equal(nto_json_next(&j, &more), 0);
  assert_int_equal(nto_json_bool(&j, &b), 0);
  assert_int_equal(b, 0);
  assert_int_equal(nto_json_next(&j, &more), 0);
  assert_int_equal(nto_json_peek(&j), NTO_JSON_NULL);
  assert_int_equal(nto_json_null(&j), 0);
  assert_int_equal(nto_json_next(&j, &more), 0);
  assert_false(more);           /* the array closed */
  for (int i = 0; i < 2; i++) { /* "o": {} and "a": [] */
    assert_int_equal(nto_json_key(&j, NULL, &more), 0);
    assert_int_equal(nto_json_skip(&j), 0);
  }
  assert_int_equal(nto_json_key(&j, &key, &more), 0);
  assert_string_equal(key, "u");
  free(key);
  assert_int_equal(nto_json_uint(&j, &u), 0);
  assert_int_equal(u, 42);
  assert_int_equal(nto_json_key(&j, NULL, &more), 0);
  assert_int_equal(nto_json_skip(&j), 0); /* the nested "deep" value */
  assert_int_equal(nto_json_key(&j, &key, &more), 0);
  assert_false(more);
  assert_null(key);
  assert_true(nto_json_eof(&j));
  assert_null(nto_json_error(&j, NULL));
  nto_json_free(&j);

  /* A scalar alone is a document too; text after it is the caller's. */
  start(&j, " 7 x", &err);
  assert_int_equal(nto_json_uint(&j, &u), 0);
  assert_false(nto_json_eof(&j));
  assert_int_equal(nto_json_peek(&j), NTO_JSON_NONE);
  assert_int_equal(nto_json_fail(&j, "text after the value"), NTO_EDATA);
  assert_string_equal(err.msg, "byte 3: text after the value");
  nto_json_free(&j);
  start(&j, "", &err);
  assert_true(nto_json_eof(&j));
  assert_int_equal(nto_json_peek(&j), NTO_JSON_NONE);
  nto_json_free(&j);
}

/* -------------------------------------------------------- malformed input */

/* Skip the whole of text; it must fail with NTO_EDATA saying what, at the
 * byte offset at (origin 100), err's message being "byte <at>: what". */
static void refused(const char *text, const char *what, uint64_t at) {
  nto_err err = {0};
  nto_json j;
  nto_json_init(&j, text, strlen(text), 100, 8, &err);
  int rc = nto_json_skip(&j);
  uint64_t got_at = 0;
  const char *got = nto_json_error(&j, &got_at);
  if (rc != NTO_EDATA || got == NULL || strcmp(got, what) != 0 ||
      got_at != 100 + at)
    fail_msg("'%s': rc %d, '%s' at %llu (wanted '%s' at %llu)", text, rc,
             got ? got : "(none)", (unsigned long long)got_at, what,
             (unsigned long long)(100 + at));
  char msg[160];
  snprintf(msg, sizeof msg, "byte %llu: %s", (unsigned long long)(100 + at),
           what);
  assert_string_equal(err.msg, msg);
  nto_json_free(&j); /* frees what the error left open */
}

static void test_malformed(void **state) {
  (void)state;
  refused("", "expected a value", 0);
  refused("  }", "expected a value", 2);
  refused("{\"a\":1", "expected '}' or ','", 6);
  refused("{\"a\":1 \"b\":2}", "expected '}' or ','", 7);
  refused("[1 2]", "expected ']' or ','", 3);
  refused("[1,]", "expected a value", 3);
  refused("{\"a\":1,}", "expected a string", 7);
  refused("{'a':1}", "expected a string", 1);
  refused("{\"a\" 1}", "expected ':'", 5);
  refused("\"abc", "unterminated string", 4);
  refused("\"a\nb\"", "control character in string", 2);
  refused("\"\\", "unterminated escape", 1);
  refused("\"\\q\"", "invalid escape", 1);
  refused("\"\\u12x4\"", "invalid \\u escape", 3);
  refused("\"\\u12\"", "invalid \\u escape", 3);
  refused("\"\\ud800\"", "unpaired surrogate", 7);
  refused("\"\\ud800\\u0041\"", "unpaired surrogate", 9);
  refused("\"\\udc00\\ud800\"", "unpaired surrogate", 7);
  refused("\"a\\u0000\"", "NUL character in string", 8);
  refused("\"\xc3\"", "invalid UTF-8", 1);             /* cut sequence */
  refused("\"\xc0\xaf\"", "invalid UTF-8", 1);         /* overlong '/' */
  refused("\"\xed\xa0\x80\"", "invalid UTF-8", 1);     /* a surrogate */
  refused("\"\xf4\x90\x80\x80\"", "invalid UTF-8", 1); /* > U+10FFFF */
  refused("\"\xff\"", "invalid UTF-8", 1);
  refused("tru", "invalid literal", 0);
  refused("nul", "invalid literal", 0);
  refused("-", "expected a number", 0);
  refused("-x", "expected a number", 0);
  refused("01", "leading zero", 0);
  refused("-00.5", "leading zero", 0);
  refused("1.", "expected digits after '.'", 0);
  refused("1.e5", "expected digits after '.'", 0);
  refused("2e", "expected digits in the exponent", 0);
  refused("2E+", "expected digits in the exponent", 0);
  refused("+1", "expected a value", 0);
  refused(".5", "expected a value", 0);
  refused("[\"a\"x]", "expected ']' or ','", 4);

  /* The typed readers name what they wanted. */
  nto_err err = {0};
  nto_json j;
  int b;
  char buf[4];
  start(&j, "nope", &err);
  assert_int_equal(nto_json_bool(&j, &b), NTO_EDATA);
  assert_string_equal(nto_json_error(&j, NULL), "expected true or false");
  assert_int_equal(nto_json_null(&j), NTO_EDATA);
  assert_string_equal(nto_json_error(&j, NULL), "invalid literal");
  start(&j, "1", &err);
  assert_int_equal(nto_json_null(&j), NTO_EDATA);
  assert_string_equal(nto_json_error(&j, NULL), "expected null");
  assert_int_equal(nto_json_object(&j, 0), NTO_EDATA);
  assert_string_equal(nto_json_error(&j, NULL), "expected '{'");
  assert_int_equal(nto_json_array(&j), NTO_EDATA);
  assert_string_equal(nto_json_error(&j, NULL), "expected '['");
  assert_int_equal(nto_json_string(&j, NULL), NTO_EDATA);
  assert_string_equal(nto_json_error(&j, NULL), "expected a string");
  start(&j, "\"abcd\"", &err);
  assert_int_equal(nto_json_string_buf(&j, buf, sizeof buf), NTO_EDATA);
  assert_string_equal(nto_json_error(&j, NULL), "string too long");
  assert_string_equal(buf, "abc");
  start(&j, "\"abc\"", &err);
  assert_int_equal(nto_json_string_buf(&j, buf, sizeof buf), 0);
  assert_string_equal(buf, "abc");
  /* Misuse: a key outside an object, an element outside an array. */
  int more = 1;
  start(&j, "[1]", &err);
  assert_int_equal(nto_json_key(&j, NULL, &more), NTO_EINVAL);
  assert_int_equal(nto_json_array(&j), 0);
  assert_int_equal(nto_json_key(&j, NULL, &more), NTO_EINVAL);
  assert_false(more);
  nto_json_free(&j);
  start(&j, "{}", &err);
  assert_int_equal(nto_json_object(&j, 0), 0);
  assert_int_equal(nto_json_next(&j, &more), NTO_EINVAL);
  nto_json_free(&j);
}

/* ------------------------------------------------------------ the limits */

static void test_depth(void **state) {
  (void)state;
  nto_err err = {0};
  nto_json j;
  nto_json_init(&j, "[[{\"a\":[]}]]", 12, 0, 4, &err);
  assert_int_equal(nto_json_skip(&j), 0);
  nto_json_init(&j, "[[{\"a\":[[]]}]]", 14, 0, 4, &err);
  assert_int_equal(nto_json_skip(&j), NTO_EDATA);
  uint64_t at;
  assert_string_equal(nto_json_error(&j, &at), "nesting too deep");
  assert_int_equal(at, 8);
  nto_json_free(&j);
  /* The largest limit, and a larger one clamped to it. */
  char deep[2 * NTO_JSON_MAX_DEPTH + 3];
  for (int n = NTO_JSON_MAX_DEPTH; n <= NTO_JSON_MAX_DEPTH + 1; n++) {
    memset(deep, '[', (size_t)n);
    memset(deep + n, ']', (size_t)n);
    nto_json_init(&j, deep, 2 * (size_t)n, 0, 100000, &err);
    assert_int_equal(nto_json_skip(&j),
                     n <= NTO_JSON_MAX_DEPTH ? 0 : NTO_EDATA);
    nto_json_free(&j);
  }
}

/* Read the members of the object text, opened with flags: 0, or the code
 * of the first failure (its description in *what). */
static int members(const char *text, unsigned flags, const char **what) {
  nto_json j;
  nto_err err = {0};
  start(&j, text, &err);
  int more, rc = nto_json_object(&j, flags);
  while (rc == 0 && (rc = nto_json_key(&j, NULL, &more)) == 0 && more)
    rc = nto_json_skip(&j);
  *what = nto_json_error(&j, NULL);
  nto_json_free(&j);
  return rc;
}

static void test_duplicate_keys(void **state) {
  (void)state;
  const char *what;
  const char *dup = "{\"a\":1,\"b\":{\"a\":2,\"a\":3},\"a\":4}";
  assert_int_equal(members(dup, 0, &what), 0); /* allowed unless asked */
  assert_int_equal(members(dup, NTO_JSON_UNIQUE, &what), NTO_EDATA);
  assert_string_equal(what, "duplicate key");
  /* Only the object opened so: the nested one keeps its own keys. */
  assert_int_equal(
      members("{\"a\":1,\"b\":{\"a\":2,\"a\":3}}", NTO_JSON_UNIQUE, &what), 0);
  /* Compared decoded: "\u0061" is "a"; "A" is not. */
  assert_int_equal(members("{\"a\":1,\"\\u0061\":2}", NTO_JSON_UNIQUE, &what),
                   NTO_EDATA);
  assert_int_equal(members("{\"a\":1,\"A\":2}", NTO_JSON_UNIQUE, &what), 0);
  /* Many keys (the set grows), then one of the first again. */
  size_t cap = 3000 * 16 + 32;
  char *text = malloc(cap);
  assert_non_null(text);
  size_t n = (size_t)snprintf(text, cap, "{");
  for (int i = 0; i < 3000; i++)
    n +=
        (size_t)snprintf(text + n, cap - n, "%s\"k%d\":%d", i ? "," : "", i, i);
  snprintf(text + n, cap - n, "}");
  assert_int_equal(members(text, NTO_JSON_UNIQUE, &what), 0);
  snprintf(text + n, cap - n, ",\"k17\":0}");
  assert_int_equal(members(text, NTO_JSON_UNIQUE, &what), NTO_EDATA);
  assert_string_equal(what, "duplicate key");
  free(text);
}

/* ------------------------------------------------------- strings, numbers */

/* text (one JSON string) decodes to want. */
static void decodes(const char *text, const char *want) {
  nto_json j;
  nto_err err = {0};
  char *got = NULL;
  start(&j, text, &err);
  if (nto_json_string(&j, &got) != 0)
    fail_msg("'%s': %s", text, err.msg);
  assert_string_equal(got, want);
  free(got);
  assert_true(nto_json_eof(&j));
}

static void test_escapes(void **state) {
  (void)state;
  decodes("\"\"", "");
  decodes("\"\\\"\\\\\\/\\b\\f\\n\\r\\t\"", "\"\\/\b\f\n\r\t");
  decodes("\"caf\\u00e9 \\u00E9\"", "caf\xc3\xa9 \xc3\xa9");
  decodes("\"\\u20ac\"", "\xe2\x82\xac");
  decodes("\"\\uD83D\\uDE00!\"", "\xf0\x9f\x98\x80!"); /* a pair */
  decodes("\"\\udbff\\udfff\"", "\xf4\x8f\xbf\xbf");   /* U+10FFFF */
  decodes("\"\xf0\x9f\x98\x80 \xe2\x82\xac\"", "\xf0\x9f\x98\x80 \xe2\x82\xac");
  /* Long strings grow the buffer. */
  char text[3004], want[3001];
  memset(want, 'q', 3000);
  want[3000] = '\0';
  snprintf(text, sizeof text, "\"%s\"", want);
  decodes(text, want);
  /* UTF-8 lengths for writers. */
  assert_int_equal(nto_json_utf8_len((const unsigned char *)"a", 1), 1);
  assert_int_equal(nto_json_utf8_len((const unsigned char *)"\xc3\xa9", 2), 2);
  assert_int_equal(nto_json_utf8_len((const unsigned char *)"\xc3\xa9", 1), 0);
  assert_int_equal(
      nto_json_utf8_len((const unsigned char *)"\xf0\x9f\x98\x80", 4), 4);
  assert_int_equal(nto_json_utf8_len((const unsigned char *)"\xe0\x80\x80", 3),
                   0);
}

/* The number text reads as want. */
static void reads(const char *text, double want) {
  nto_json j;
  nto_err err = {0};
  double x = NAN;
  start(&j, text, &err);
  if (nto_json_number(&j, &x) != 0)
    fail_msg("'%s': %s", text, err.msg);
  assert_true(nto_json_eof(&j));
  if (!(x == want || (isinf(x) && isinf(want))))
    fail_msg("'%s' read as %.17g", text, x);
}

/* nto_json_uint of text: its result, the value into *v. */
static int uint_of(const char *text, uint64_t *v, const char **what) {
  nto_json j;
  start(&j, text, NULL);
  int rc = nto_json_uint(&j, v);
  *what = nto_json_error(&j, NULL);
  return rc;
}

static void test_numbers(void **state) {
  (void)state;
  reads("0", 0.0);
  reads("-0", 0.0);
  reads("7", 7.0);
  reads("-3.25", -3.25);
  reads("1e3", 1000.0);
  reads("1E+2", 100.0);
  reads("25e-2", 0.25);
  reads("0.1", 0.1);
  reads("1e999", INFINITY);
  reads("0.000000000000000000000000000000000000000000000000000000000000000000"
        "000001",
        1e-72); /* longer than the small copy */
  uint64_t v = 0;
  const char *what;
  assert_int_equal(uint_of("9223372036854775807", &v, &what), 0);
  assert_true(v == UINT64_C(9223372036854775807));
  assert_int_equal(uint_of("0", &v, &what), 0);
  assert_int_equal(v, 0);
  static const char *const bad[][2] = {
      {"9223372036854775808", "integer too large"},
      {"-1", "expected a non-negative integer"},
      {"x", "expected a non-negative integer"},
      {"2.0", "expected an integer"},
      {"2e3", "expected an integer"},
      {"02", "leading zero"},
  };
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
    assert_int_equal(uint_of(bad[i][0], &v, &what), NTO_EDATA);
    assert_string_equal(what, bad[i][1]);
  }
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_walk),    cmocka_unit_test(test_malformed),
      cmocka_unit_test(test_depth),   cmocka_unit_test(test_duplicate_keys),
      cmocka_unit_test(test_escapes), cmocka_unit_test(test_numbers)};
  return cmocka_run_group_tests(tests, NULL, NULL);
}
