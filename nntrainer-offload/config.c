/*
 * config.c - nntrainer-style INI model configuration. See config.h.
 *
 * DESIGN: iniparser 4.1 does the lexing (lowercases section names and keys,
 * strips quotes, inline comments and blanks, joins '\' continuation lines).
 * Its syntax errors arrive through a process-wide callback, which we point
 * at a static buffer for the duration of one load. Because iniparser
 * silently merges a repeated section and lets a repeated key overwrite the
 * earlier one, a small second pass over the file (scan_duplicates) rejects
 * both. The model-level sections are then validated into typed settings;
 * every other section is copied as an ordered key/value list for graph.c.
 *
 * nntrainer's older spellings that it still reads ([Model] optimizer keys,
 * [DataSet], layer types of its first format) are read here with
 * nntrainer's meaning and precedence, so that graph.c and the rest see
 * only today's spellings; each adds a line to c->warnings, which the core
 * does not print. Relative paths are joined to the INI's directory here
 * (set_path), as nntrainer resolves them, so no later stage needs to know
 * where the INI was.
 */
#include "config.h"
#include "props.h"

#include <iniparser.h>

#include <ctype.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <math.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define NAME_MAX_LEN 63   /* section names and keys: nto_kv.key, name[64] */
#define INI_LINE_MAX 1023 /* iniparser 4.1 ASCIILINESZ - 1 */

/* ---------------------------------------------------------------------- */
/* iniparser error capture                                                 */

static char ini_msg[1024]; /* first message iniparser reported */
static int ini_nmsg;

__attribute__((format(printf, 1, 2))) static int ini_capture(const char *fmt,
                                                             ...) {
  if (ini_nmsg++ == 0) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(ini_msg, sizeof ini_msg, fmt, ap);
    va_end(ap);
  }
  return 0;
}

/* Copy the offending line src into dst[cap] for a message: control
 * characters other than tab become \xNN (a binary file must not drive the
 * terminal) and a long line is cut to 80 characters and "...". */
static void quote_line(char *dst, size_t cap, const char *src) {
  size_t o = 0, shown = 0;
  for (const unsigned char *p = (const unsigned char *)src; *p; p++) {
    if (shown == 80 || o + 8 >= cap) {
      snprintf(dst + o, cap - o, "...");
      return;
    }
    if ((*p < 0x20 && *p != '\t') || *p == 0x7f)
      o += (size_t)snprintf(dst + o, cap - o, "\\x%02X", *p);
    else
      dst[o++] = (char)*p;
    shown++;
  }
  dst[o] = '\0';
}

/* Turn the captured iniparser message into an nto error. */
static int ini_error(const char *file, nto_err *err) {
  char *arrow = strstr(ini_msg, "\n-> ");
  if (strstr(ini_msg, "syntax error") && arrow) {
    char *open = arrow;
    while (open > ini_msg && *open != '(')
      open--;
    long line = strtol(open + 1, NULL, 10);
    char *text = arrow + 4;
    size_t n = strlen(text);
    while (n && (text[n - 1] == '\n' || text[n - 1] == '\r'))
      text[--n] = '\0';
    if (line == 1 && strncmp(text, "\xEF\xBB\xBF", 3) == 0)
      return nto_err_set(err, NTO_ECONFIG,
                         "%s: syntax error at line 1: the file starts with a "
                         "UTF-8 byte order mark; save it without one",
                         file);
    char shown[256];
    quote_line(shown, sizeof shown, text);
    return nto_err_set(err, NTO_ECONFIG,
                       "%s: syntax error at line %ld: expected '[section]' "
                       "or 'key = value', got '%s'",
                       file, line, shown);
  }
  if (strstr(ini_msg, "line too long")) {
    char *open = strrchr(ini_msg, '(');
    long line = open ? strtol(open + 1, NULL, 10) : 0;
    return nto_err_set(err, NTO_ECONFIG,
                       "%s: syntax error at line %ld: line longer than %d "
                       "characters",
                       file, line, INI_LINE_MAX);
  }
  if (strstr(ini_msg, "cannot open"))
    return nto_err_set(err, NTO_EIO, "%s: cannot open", file);
  if (strstr(ini_msg, "memory"))
    return nto_err_set(err, NTO_ENOMEM, "%s: out of memory while parsing",
                       file);
  size_t n = strlen(ini_msg);
  while (n && isspace((unsigned char)ini_msg[n - 1]))
    ini_msg[--n] = '\0';
  return nto_err_set(err, NTO_ECONFIG, "%s: %s", file, ini_msg);
}

/* ---------------------------------------------------------------------- */
/* Small helpers                                                           */

/* Copy src into dst[cap]; -1 if it does not fit. */
static int copy_str(char *dst, size_t cap, const char *src) {
  size_t n = strlen(src);
  if (n >= cap)
    return -1;
  memcpy(dst, src, n + 1);
  return 0;
}

static void strip_inplace(char *s) {
  size_t n = strlen(s);
  while (n && isspace((unsigned char)s[n - 1]))
    s[--n] = '\0';
  size_t i = 0;
  while (s[i] && isspace((unsigned char)s[i]))
    i++;
  memmove(s, s + i, n - i + 1);
}

static void lower_inplace(char *s) {
  for (; *s; s++)
    *s = (char)tolower((unsigned char)*s);
}

/* Index of k in names (exact, k is already lowercase), or -1. */
static int lookup(const char *k, const char *const *names) {
  for (int i = 0; names[i]; i++)
    if (strcmp(k, names[i]) == 0)
      return i;
  return -1;
}

/* Index of v in names, case-insensitively, or -1. */
static int lookup_ci(const char *v, const char *const *names) {
  for (int i = 0; names[i]; i++)
    if (nto_streq(v, names[i]))
      return i;
  return -1;
}

/* "a, b, c" of names into buf. */
static void join_names(const char *const *names, char *buf, size_t cap) {
  buf[0] = '\0';
  for (int i = 0; names[i]; i++) {
    if (i)
      strncat(buf, ", ", cap - strlen(buf) - 1);
    strncat(buf, names[i], cap - strlen(buf) - 1);
  }
}

static void fmt_num(char *buf, size_t cap, double x) {
  snprintf(buf, cap, "%g", x);
}

/* "in [0, 1)" or "> 0" (hi infinite) into buf[cap]. */
static void fmt_interval(char *buf, size_t cap, double lo, int lo_open,
                         double hi, int hi_open) {
  char a[32], b[32];
  fmt_num(a, sizeof a, lo);
  fmt_num(b, sizeof b, hi);
  if (isinf(hi))
    snprintf(buf, cap, "%s %s", lo_open ? ">" : ">=", a);
  else
    snprintf(buf, cap, "in %c%s, %s%c", lo_open ? '(' : '[', a, b,
             hi_open ? ')' : ']');
}

static int in_interval(double x, double lo, int lo_open, double hi,
                       int hi_open) {
  return (lo_open ? x > lo : x >= lo) && (hi_open ? x < hi : x <= hi);
}

/*
 * Number in an interval; lo_open/hi_open make the bound exclusive, hi may be
 * INFINITY. Message: "expected a number in [0, 1), got 'x'" or
 * "expected a number > 0, got 'x'".
 */
static int parse_real(const char *v, double lo, int lo_open, double hi,
                      int hi_open, double *out, nto_err *err) {
  double x;
  if (nto_parse_float(v, -HUGE_VAL, HUGE_VAL, &x, NULL) == 0 &&
      in_interval(x, lo, lo_open, hi, hi_open)) {
    *out = x;
    return 0;
  }
  char range[80];
  fmt_interval(range, sizeof range, lo, lo_open, hi, hi_open);
  return nto_err_set(err, NTO_ECONFIG, "expected a number %s, got '%s'", range,
                     v);
}

/*
 * parse_real for a setting the optimizer computes with in float32
 * (optimizer.c): the value must also hold as that float. 0.99999999 is in
 * [0, 1) as a double but 1.0f as beta1 (Adam's first moment never moves),
 * and 1e40 is a double but inf as weight_decay. Message: "expected a
 * number in [0, 1), got '0.99999999', which is 1 in float32 (the
 * optimizer's precision)".
 */
static int parse_real32(const char *v, double lo, int lo_open, double hi,
                        int hi_open, double *out, nto_err *err) {
  double x = 0;
  int rc = parse_real(v, lo, lo_open, hi, hi_open, &x, err);
  if (rc != 0)
    return rc;
  float f = (float)x;
  if (isfinite(f) && in_interval(f, lo, lo_open, hi, hi_open)) {
    *out = x;
    return 0;
  }
  char range[80];
  fmt_interval(range, sizeof range, lo, lo_open, hi, hi_open);
  return nto_err_set(err, NTO_ECONFIG,
                     "expected a number %s, got '%s', which is %g in float32 "
                     "(the optimizer's precision)",
                     range, v, (double)f);
}

/* Integer in [lo, hi]; hi == LONG_MAX prints as "an integer >= lo". */
static int parse_count(const char *v, long lo, long hi, long *out,
                       nto_err *err) {
  long x;
  if (nto_parse_int(v, lo, hi, &x, NULL) == 0) {
    *out = x;
    return 0;
  }
  if (hi == LONG_MAX || hi == INT_MAX)
    return nto_err_set(err, NTO_ECONFIG, "expected an integer >= %ld, got '%s'",
                       lo, v);
  return nto_err_set(err, NTO_ECONFIG,
                     "expected an integer in [%ld, %ld], got '%s'", lo, hi, v);
}

/* Comma-separated list of numbers > 0 and <= hi. */
static int parse_real_list(const char *v, double hi, double *out, int max,
                           int *count, nto_err *err) {
  char buf[NTO_CONF_STR];
  if (copy_str(buf, sizeof buf, v) != 0)
    return nto_err_set(err, NTO_ECONFIG, "value too long");
  int n = 0;
  char *save = NULL;
  char *tok = strtok_r(buf, ",", &save);
  /* strtok_r skips empty fields, so count commas to catch "0.1,,0.2". */
  int commas = 0;
  for (const char *p = v; *p; p++)
    commas += *p == ',';
  for (; tok; tok = strtok_r(NULL, ",", &save)) {
    double x;
    if (n == max)
      return nto_err_set(err, NTO_ECONFIG,
                         "expected at most %d learning rates, got '%s'", max,
                         v);
    if (nto_parse_float(tok, -HUGE_VAL, HUGE_VAL, &x, NULL) != 0 || x <= 0 ||
        x > hi)
      return nto_err_set(err, NTO_ECONFIG,
                         "expected a comma-separated list of numbers in "
                         "(0, %g], got '%s'",
                         hi, v);
    out[n++] = x;
  }
  if (n == 0 || commas != n - 1)
    return nto_err_set(err, NTO_ECONFIG,
                       "expected a comma-separated list of numbers in "
                       "(0, %g], got '%s'",
                       hi, v);
  *count = n;
  return 0;
}

/* ---------------------------------------------------------------------- */
/* Size parser                                                             */

int nto_parse_size(const char *v, size_t *out, nto_err *err) {
  const char *p = v;
  while (isspace((unsigned char)*p))
    p++;
  const char *num = p;
  int digits = 0;
  while (isdigit((unsigned char)*p)) {
    p++;
    digits++;
  }
  if (*p == '.') {
    p++;
    while (isdigit((unsigned char)*p)) {
      p++;
      digits++;
    }
  }
  size_t numlen = (size_t)(p - num);
  char nbuf[64];
  if (digits == 0 || numlen >= sizeof nbuf)
    goto bad;
  memcpy(nbuf, num, numlen);
  nbuf[numlen] = '\0';
  double x = strtod(nbuf, NULL);
  while (isspace((unsigned char)*p))
    p++;
  double mult = 1;
  switch (toupper((unsigned char)*p)) {
  case 'K':
    mult = 1024.0;
    p++;
    break;
  case 'M':
    mult = 1024.0 * 1024;
    p++;
    break;
  case 'G':
    mult = 1024.0 * 1024 * 1024;
    p++;
    break;
  case 'T':
    mult = 1024.0 * 1024 * 1024 * 1024;
    p++;
    break;
  default:
    break;
  }
  if (mult > 1 && (*p == 'i' || *p == 'I')) {
    p++;
    if (*p != 'B' && *p != 'b')
      goto bad;
  }
  if (*p == 'B' || *p == 'b')
    p++;
  while (isspace((unsigned char)*p))
    p++;
  if (*p != '\0')
    goto bad;
  double bytes = floor(x * mult);
  if (!(bytes >= 1) || bytes >= 9.0e18 || bytes > (double)SIZE_MAX)
    goto bad;
  *out = (size_t)bytes;
  return 0;
bad:
  return nto_err_set(err, NTO_ECONFIG, "expected a size like 64M, got '%s'", v);
}

/* ---------------------------------------------------------------------- */
/* Duplicate sections and keys (iniparser merges / overwrites them)        */

typedef struct name_line {
  char name[NAME_MAX_LEN + 1];
  int line;
} name_line;

typedef struct name_list {
  name_line *v;
  int n, cap;
} name_list;

/* Line of name in l, or 0; else appends it. -1 on out of memory. */
static int name_seen(name_list *l, const char *name, int line) {
  for (int i = 0; i < l->n; i++)
    if (strcmp(l->v[i].name, name) == 0)
      return l->v[i].line;
  if (l->n == l->cap) {
    int cap = l->cap ? 2 * l->cap : 16;
    name_line *v = realloc(l->v, (size_t)cap * sizeof *v);
    if (!v)
      return -1;
    l->v = v;
    l->cap = cap;
  }
  snprintf(l->v[l->n].name, sizeof l->v[l->n].name, "%s", name);
  l->v[l->n].line = line;
  l->n++;
  return 0;
}

/*
 * Classify one logical line the way iniparser_line does and check it
 * against what came before. Returns 0 or an error code.
 */
static int dup_line(const char *file, char *s, int line, name_list *secs,
                    name_list *keys, char *cur, nto_err *err) {
  strip_inplace(s);
  size_t len = strlen(s);
  if (len == 0 || s[0] == '#' || s[0] == ';')
    return 0;
  if (s[0] == '[' && s[len - 1] == ']') {
    char *end = strchr(s + 1, ']');
    *end = '\0';
    char *name = s + 1;
    strip_inplace(name);
    lower_inplace(name);
    if (name[0] == '\0')
      return nto_err_set(err, NTO_ECONFIG,
                         "%s: line %d: empty section name '[]'", file, line);
    if (strchr(name, ':'))
      return nto_err_set(err, NTO_ECONFIG,
                         "%s: [%s] section names cannot contain ':' (line %d)",
                         file, name, line);
    /* Reported here, at its line: skipped, the section's keys would be
     * checked against the previous section's and "given twice". */
    if (strlen(name) > NAME_MAX_LEN)
      return nto_err_set(err, NTO_ECONFIG,
                         "%s: [%.*s...] expected a section name of at most "
                         "%d characters (line %d)",
                         file, 40, name, NAME_MAX_LEN, line);
    int first = name_seen(secs, name, line);
    if (first < 0)
      return nto_err_set(err, NTO_ENOMEM, "%s: out of memory", file);
    if (first > 0)
      return nto_err_set(err, NTO_ECONFIG,
                         "%s: [%s] section given twice (lines %d and %d)", file,
                         name, first, line);
    snprintf(cur, NAME_MAX_LEN + 1, "%s", name);
    keys->n = 0;
    return 0;
  }
  char *eq = strchr(s, '=');
  if (!eq)
    return 0; /* iniparser reported it already */
  *eq = '\0';
  strip_inplace(s);
  lower_inplace(s);
  if (cur[0] == '\0')
    return nto_err_set(err, NTO_ECONFIG,
                       "%s: key '%s' before any section (line %d)", file, s,
                       line);
  if (strlen(s) > NAME_MAX_LEN)
    return 0; /* reported with the key itself */
  int first = name_seen(keys, s, line);
  if (first < 0)
    return nto_err_set(err, NTO_ENOMEM, "%s: out of memory", file);
  if (first > 0)
    return nto_err_set(err, NTO_ECONFIG,
                       "%s: [%s] key '%s': given twice (lines %d and %d)", file,
                       cur, s, first, line);
  return 0;
}

static int scan_duplicates(const char *file, nto_err *err) {
  FILE *f = fopen(file, "r");
  if (!f)
    return nto_err_set(err, NTO_EIO, "%s: cannot open: %s", file,
                       strerror(errno));
  char phys[INI_LINE_MAX + 3];
  char logical[4 * INI_LINE_MAX];
  char cur[NAME_MAX_LEN + 1] = "";
  name_list secs = {0}, keys = {0};
  size_t used = 0;
  int lineno = 0, start = 0, rc = 0;
  while (rc == 0 && fgets(phys, sizeof phys, f)) {
    lineno++;
    if (used == 0)
      start = lineno;
    size_t n = strlen(phys);
    while (n && isspace((unsigned char)phys[n - 1]))
      phys[--n] = '\0';
    int cont = n && phys[n - 1] == '\\';
    if (cont)
      phys[--n] = '\0';
    if (used + n < sizeof logical) {
      memcpy(logical + used, phys, n + 1);
      used += n;
    }
    if (cont)
      continue;
    logical[used] = '\0';
    rc = dup_line(file, logical, start, &secs, &keys, cur, err);
    used = 0;
  }
  if (rc == 0 && used) {
    logical[used] = '\0';
    rc = dup_line(file, logical, start, &secs, &keys, cur, err);
  }
  free(secs.v);
  free(keys.v);
  fclose(f);
  return rc;
}

/* "UTF-16" with how it was recognized, if the first n bytes b of a file
 * are UTF-16 text (a byte order mark, or ASCII with every other byte NUL),
 * else NULL. */
static const char *utf16_sign(const unsigned char *b, size_t n) {
  if (n >= 2 &&
      ((b[0] == 0xFF && b[1] == 0xFE) || (b[0] == 0xFE && b[1] == 0xFF)))
    return "it starts with a UTF-16 byte order mark";
  if (n >= 4 &&
      ((b[0] && !b[1] && b[2] && !b[3]) || (!b[0] && b[1] && !b[2] && b[3])))
    return "every other byte is NUL";
  return NULL;
}

/*
 * A text file has no NUL byte. iniparser reads lines with fgets and strlen,
 * so a NUL cuts a line short and it reports "line too long" (a binary file
 * is usually one long "line"): find the first NUL and name its line and
 * byte offset instead; a UTF-16 file (NULs in every other byte) is named
 * as such. Lines end in LF (CRLF is fine: iniparser strips the CR); a CR
 * without LF (old Mac line endings) would make the whole file one line,
 * which iniparser parses into nonsense: refused, naming its line. Returns
 * 0, NTO_EIO or NTO_ECONFIG.
 */
static int check_text(const char *file, nto_err *err) {
  FILE *f = fopen(file, "rb");
  if (!f)
    return nto_err_set(err, NTO_EIO, "%s: cannot open: %s", file,
                       strerror(errno));
  unsigned char buf[4096];
  long long off = 0, line = 1;
  size_t n;
  int rc = 0, cr = 0; /* cr: the byte before was a CR */
  while (rc == 0 && (n = fread(buf, 1, sizeof buf, f)) > 0) {
    const char *u16 = off == 0 ? utf16_sign(buf, n) : NULL;
    if (u16) {
      rc = nto_err_set(err, NTO_ECONFIG,
                       "%s: line 1: UTF-16: save the file as UTF-8 (%s)", file,
                       u16);
      break;
    }
    for (size_t i = 0; i < n; i++) {
      if (cr && buf[i] != '\n') {
        rc = nto_err_set(err, NTO_ECONFIG,
                         "%s: line %lld: a CR line ending without LF (byte "
                         "offset %lld): save the file with LF (Unix) or CRLF "
                         "line endings",
                         file, line, off + (long long)i - 1);
        break;
      }
      cr = buf[i] == '\r';
      if (buf[i] == '\n') {
        line++;
      } else if (buf[i] == '\0') {
        rc = nto_err_set(err, NTO_ECONFIG,
                         "%s: line %lld: NUL byte at byte offset %lld: not "
                         "a text INI file",
                         file, line, off + (long long)i);
        break;
      }
    }
    off += (long long)n;
  }
  if (rc == 0 && cr) /* the file ends in a lone CR */
    rc = nto_err_set(err, NTO_ECONFIG,
                     "%s: line %lld: a CR line ending without LF (byte offset "
                     "%lld): save the file with LF (Unix) or CRLF line endings",
                     file, line, off - 1);
  if (rc == 0 && ferror(f))
    rc = nto_err_set(err, NTO_EIO, "%s: read error: %s", file, strerror(errno));
  fclose(f);
  return rc;
}

/*
 * 1 if the logical line s (continued so far, its trailing '\' removed) is
 * a comment or ends in one: a line starting with '#' or ';', or a value
 * with an unquoted '#' or ';', or text after a quoted value. iniparser
 * joins the next line to a line ending in '\' before it strips comments,
 * so that line would vanish into the comment.
 */
static int ends_in_comment(const char *s) {
  while (isspace((unsigned char)*s))
    s++;
  if (*s == '#' || *s == ';')
    return 1;
  const char *eq = *s == '[' ? NULL : strchr(s, '=');
  if (!eq)
    return 0;
  const char *v = eq + 1;
  while (isspace((unsigned char)*v))
    v++;
  if (*v == '"' || *v == '\'') { /* iniparser ignores what follows it */
    const char *close = strchr(v + 1, *v);
    if (!close)
      return 0;
    for (close++; isspace((unsigned char)*close); close++)
      ;
    return *close != '\0';
  }
  return strpbrk(v, "#;") != NULL;
}

/*
 * A line that ends in '\' within a comment swallows the line after it
 * (ends_in_comment): a key silently lost. Refused, naming both lines.
 * Lines longer than iniparser takes are left to its own message. Returns
 * 0, NTO_EIO or NTO_ECONFIG.
 */
static int check_continued_comments(const char *file, nto_err *err) {
  FILE *f = fopen(file, "r");
  if (!f)
    return nto_err_set(err, NTO_EIO, "%s: cannot open: %s", file,
                       strerror(errno));
  char phys[INI_LINE_MAX + 3];
  char logical[4 * INI_LINE_MAX];
  size_t used = 0;
  int lineno = 0, rc = 0;
  while (rc == 0 && fgets(phys, sizeof phys, f)) {
    lineno++;
    size_t n = strlen(phys);
    if (n && phys[n - 1] != '\n' && !feof(f))
      break; /* too long: iniparser reports it */
    while (n && isspace((unsigned char)phys[n - 1]))
      phys[--n] = '\0';
    int cont = n && phys[n - 1] == '\\';
    if (cont)
      phys[--n] = '\0';
    if (used + n >= sizeof logical)
      break; /* a continuation longer than iniparser's line: its message */
    memcpy(logical + used, phys, n + 1);
    used = cont ? used + n : 0;
    if (cont && ends_in_comment(logical))
      rc = nto_err_set(err, NTO_ECONFIG,
                       "%s: line %d: a comment ends in '\\', which continues "
                       "it onto line %d (that line would be ignored): "
                       "remove the backslash",
                       file, lineno, lineno + 1);
  }
  fclose(f);
  return rc;
}

/* ---------------------------------------------------------------------- */
/* Loader state                                                            */

/* A backbone section of the file being loaded and the name of the last
 * layer it inserted: a reference to the section in input_layers means
 * that layer (nntrainer connects a layer to a backbone so). */
typedef struct backbone_end {
  char section[NAME_MAX_LEN + 1];
  char last[NAME_MAX_LEN + 1];
} backbone_end;

typedef struct loader {
  const char *file;       /* for messages */
  char dir[NTO_CONF_STR]; /* directory of file with a trailing '/', or "" */
  nto_config *conf;       /* being loaded: its warnings and layers */
  dictionary *d;
  int *sec_at; /* the entries of d that are sections, in file order */
  int n_secs;
  int cur;           /* the section get and load_keys found last, -1 */
  const char **keys; /* load_keys: the section's "sec:key" names */
  const char **vals; /* and their values */
  int nkeys;
  int file_idx;       /* nto_section.file of the sections read from file */
  int depth;          /* backbones between the INI and file */
  backbone_end *ends; /* the backbone sections of file */
  int n_ends;
  const struct loader *parent; /* the file whose backbone this is, or
                                  NULL */
  const char *loss_sec;        /* a loss layer section of file ([x] type = mse),
                                  or NULL */
  int loss_at;                 /* c->n_layers when it was read */
} loader;

/*
 * The sections of L->d into L->sec_at, one pass over its entries. The
 * dictionary is read through its public struct (iniparser's
 * dictionary.h): iniparser_load adds a section's entry ("sec", no value)
 * and then its "sec:key" entries as the file gives them, and nothing is
 * removed, so a section's keys are the entries between it and the next
 * section (a section given twice is refused before: scan_duplicates).
 * iniparser's own section and key lookups scan every entry per call,
 * quadratic in the file's length (a 2000-layer INI took a tenth of
 * `train`'s start-up).
 */
static int index_sections(loader *L, nto_err *err) {
  const dictionary *d = L->d;
  L->n_secs = 0;
  L->cur = -1;
  L->sec_at = malloc(((size_t)d->size + 1) * sizeof *L->sec_at);
  if (!L->sec_at)
    return nto_err_set(err, NTO_ENOMEM, "%s: out of memory", L->file);
  for (ssize_t i = 0; i < d->size; i++)
    if (d->key[i] && !strchr(d->key[i], ':'))
      L->sec_at[L->n_secs++] = (int)i;
  return 0;
}

/* Section j's name. */
static const char *sec_name_at(const loader *L, int j) {
  return L->d->key[L->sec_at[j]];
}

/* The index of section sec in L->sec_at, or -1. */
static int find_sec(loader *L, const char *sec) {
  if (L->cur >= 0 && !strcmp(sec_name_at(L, L->cur), sec))
    return L->cur;
  for (int j = 0; j < L->n_secs; j++)
    if (!strcmp(sec_name_at(L, j), sec))
      return L->cur = j;
  return -1;
}

/* The entries [*lo, *hi) of d after section j, up to the next one. */
static void sec_range(const loader *L, int j, ssize_t *lo, ssize_t *hi) {
  *lo = L->sec_at[j] + 1;
  *hi = j + 1 < L->n_secs ? L->sec_at[j + 1] : L->d->size;
}

static int check_lengths(const loader *L, const char *sec, nto_err *err);

/* Fill L->keys with the full "sec:key" names of section sec, L->vals with
 * their values, and check the lengths of every key and value. */
static int load_keys(loader *L, const char *sec, nto_err *err) {
  free(L->keys);
  free(L->vals);
  L->keys = L->vals = NULL;
  L->nkeys = 0;
  int j = find_sec(L, sec);
  if (j < 0)
    return 0;
  ssize_t lo, hi;
  sec_range(L, j, &lo, &hi);
  size_t cap = (size_t)(hi - lo) + 1;
  L->keys = malloc(cap * sizeof *L->keys);
  L->vals = malloc(cap * sizeof *L->vals);
  if (!L->keys || !L->vals)
    return nto_err_set(err, NTO_ENOMEM, "%s: out of memory", L->file);
  for (ssize_t e = lo; e < hi; e++)
    if (L->d->key[e]) {
      L->keys[L->nkeys] = L->d->key[e];
      L->vals[L->nkeys++] = L->d->val[e] ? L->d->val[e] : "";
    }
  return check_lengths(L, sec, err);
}

/* Key i of the loaded section without its "sec:" prefix. */
static const char *key_at(const loader *L, const char *sec, int i) {
  return L->keys[i] + strlen(sec) + 1;
}

static const char *value_at(const loader *L, int i) { return L->vals[i]; }

/* Value of sec:key (key lowercase) or NULL. */
static const char *get(loader *L, const char *sec, const char *key) {
  int j = find_sec(L, sec);
  if (j < 0)
    return NULL;
  ssize_t lo, hi;
  size_t n = strlen(sec);
  sec_range(L, j, &lo, &hi);
  for (ssize_t e = lo; e < hi; e++) {
    const char *k = L->d->key[e];
    if (k && !strncmp(k, sec, n) && k[n] == ':' && !strcmp(k + n + 1, key))
      return L->d->val[e] ? L->d->val[e] : "";
  }
  return NULL;
}

/* Prefix a value parser's message with file, section and key. */
static int key_err(const loader *L, const char *sec, const char *key,
                   nto_err *err) {
  return nto_err_prefix(err, NTO_ECONFIG, "%s: [%s] key '%s': ", L->file, sec,
                        key);
}

static int unknown_key(const loader *L, const char *sec, const char *key,
                       const char *const *names, nto_err *err) {
  char list[400];
  join_names(names, list, sizeof list);
  return nto_err_set(err, NTO_ECONFIG,
                     "%s: [%s] unknown key '%s' (accepted: %s)", L->file, sec,
                     key, list);
}

static int missing_key(const loader *L, const char *sec, const char *key,
                       nto_err *err) {
  return nto_err_set(err, NTO_ECONFIG, "%s: [%s] missing key '%s'", L->file,
                     sec, key);
}

/* Checks lengths shared by every section: key names and values. */
static int check_lengths(const loader *L, const char *sec, nto_err *err) {
  for (int i = 0; i < L->nkeys; i++) {
    const char *k = key_at(L, sec, i);
    if (strlen(k) > NAME_MAX_LEN)
      return nto_err_set(err, NTO_ECONFIG,
                         "%s: [%s] key '%.*s...': expected a key of at most "
                         "%d characters",
                         L->file, sec, 40, k, NAME_MAX_LEN);
    size_t n = strlen(value_at(L, i));
    if (n > NTO_CONF_STR - 1)
      return nto_err_set(err, NTO_ECONFIG,
                         "%s: [%s] key '%s': expected a value of at most %d "
                         "characters, got %zu characters",
                         L->file, sec, k, NTO_CONF_STR - 1, n);
  }
  return 0;
}

/* String value into dst[cap] (lengths are checked by check_lengths). */
static int set_str(const loader *L, const char *sec, const char *key,
                   const char *v, char *dst, size_t cap, nto_err *err) {
  if (copy_str(dst, cap, v) != 0)
    return nto_err_set(err, NTO_ECONFIG,
                       "%s: [%s] key '%s': expected at most %zu characters, "
                       "got '%s'",
                       L->file, sec, key, cap - 1, v);
  return 0;
}

/*
 * Path value v of sec:key into dst[cap]. A relative path is joined to the
 * INI's directory: nntrainer resolves the paths of an INI against the
 * file's directory, so a config and its files move together and a run
 * from another working directory finds them. Absolute and empty values
 * are kept as written ("" means absent).
 */
static int set_path(const loader *L, const char *sec, const char *key,
                    const char *v, char *dst, size_t cap, nto_err *err) {
  if (v[0] == '/' || v[0] == '\0' || L->dir[0] == '\0')
    return set_str(L, sec, key, v, dst, cap, err);
  if ((size_t)snprintf(dst, cap, "%s%s", L->dir, v) >= cap)
    return nto_err_set(err, NTO_ECONFIG,
                       "%s: [%s] key '%s': expected a path of at most %zu "
                       "characters once joined to '%s', got '%s'",
                       L->file, sec, key, cap - 1, L->dir, v);
  return 0;
}

/*
 * Add a warning line (config.h: warnings), formatted printf-style. Returns
 * 0 or NTO_ENOMEM.
 */
__attribute__((format(printf, 3, 4))) static int warn(loader *L, nto_err *err,
                                                      const char *fmt, ...) {
  char line[NTO_ERR_MSG_MAX];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(line, sizeof line, fmt, ap);
  va_end(ap);
  nto_config *c = L->conf;
  char **w = realloc(c->warnings, (size_t)(c->n_warnings + 1) * sizeof *w);
  if (!w)
    return nto_err_set(err, NTO_ENOMEM, "%s: out of memory", L->file);
  c->warnings = w;
  size_t n = strlen(line) + 1;
  if (!(w[c->n_warnings] = malloc(n)))
    return nto_err_set(err, NTO_ENOMEM, "%s: out of memory", L->file);
  memcpy(w[c->n_warnings++], line, n);
  return 0;
}

/* ---------------------------------------------------------------------- */
/* [Model]                                                                 */

static const char *const model_keys[] = {"type",
                                         "epochs",
                                         "loss",
                                         "batch_size",
                                         "save_path",
                                         "memory_swap",
                                         "memory_swap_lookahead",
                                         "memory_swap_path",
                                         "fsu",
                                         "fsu_lookahead",
                                         "fsu_path",
                                         "memory_budget",
                                         "channel_groups",
                                         "frozen_bn_statistics",
                                         "continue_train",
                                         "save_best_path",
                                         "model_tensor_type",
                                         "tensor_format",
                                         "memory_optimization",
                                         NULL};
enum {
  MK_TYPE,
  MK_EPOCHS,
  MK_LOSS,
  MK_BATCH,
  MK_SAVE,
  MK_SWAP,
  MK_LOOKAHEAD,
  MK_SWAP_PATH,
  MK_FSU,
  MK_FSU_LOOKAHEAD,
  MK_FSU_PATH,
  MK_BUDGET,
  MK_GROUPS,
  MK_FROZEN_BN,
  MK_CONTINUE,
  MK_SAVE_BEST,
  MK_TENSOR_TYPE,
  MK_TENSOR_FORMAT,
  MK_MEM_OPT
};

/*
 * The optimizer keys of nntrainer's old format, written in [Model] before
 * [Optimizer] existed. nntrainer still reads them, and only when
 * `optimizer` is among them (model_optimizer); the other names are those
 * of [Optimizer] (opt_keys).
 */
static const char *const model_opt_keys[] = {
    "optimizer", "learning_rate", "decay_rate", "decay_steps",
    "beta1",     "beta2",         "epsilon",    NULL};

/* [Model] keys of nntrainer's 2020 format, refused by nntrainer today
 * ("Model has unparsed properties"), and what replaced each. */
static const char *const model_2020[][2] = {
    {"epoch", "epochs"},
    {"cost", "loss (cross or mse)"},
    {"model", "save_path"},
    {"minibatch", "batch_size"},
};

static const char *const loss_names[] = {"cross", "mse", "cross_softmax",
                                         "cross_sigmoid", NULL};

/*
 * [Model] keys of nntrainer that this trainer reads but has nothing to do
 * with, or does not apply yet: value checked, and a warning where the run
 * differs from nntrainer's.
 */
static int model_key_nntrainer(loader *L, const char *sec, const char *k,
                               const char *v, int idx, nto_model_conf *m,
                               nto_err *err) {
  int b, rc = 0;
  switch (idx) {
  case MK_CONTINUE: /* applied by train: start from save_path's weights */
    if ((rc = nto_parse_bool(v, &b, err)) != 0)
      return key_err(L, sec, k, err);
    m->continue_train = b;
    break;
  case MK_SAVE_BEST: /* applied by train: the best epoch's weights */
    rc = set_path(L, sec, k, v, m->save_best_path, sizeof m->save_best_path,
                  err);
    break;
  case MK_TENSOR_TYPE: /* nntrainer: <weight type>-<activation type> */
    if (!nto_streq(v, "fp32-fp32"))
      rc = nto_err_set(err, NTO_ECONFIG,
                       "%s: [%s] key '%s': expected FP32-FP32, got '%s' (the "
                       "layers here keep weights and activations in "
                       "float32 only)",
                       L->file, sec, k, v);
    break;
  case MK_TENSOR_FORMAT:
    if (!nto_streq(v, "nchw"))
      rc = nto_err_set(err, NTO_ECONFIG,
                       "%s: [%s] key '%s': expected NCHW, got '%s' (the "
                       "layers here lay tensors out as NCHW only)",
                       L->file, sec, k, v);
    break;
  case MK_MEM_OPT:
    if ((rc = nto_parse_bool(v, &b, err)) != 0)
      return key_err(L, sec, k, err);
    if (!b) /* the plan always shares memory between tensors */
      rc = warn(L, err,
                "%s: [%s] key '%s': false is not applied: tensors always "
                "share memory by the plan (the results are the same)",
                L->file, sec, k);
    break;
  default:
    break;
  }
  return rc;
}

static int parse_model(loader *L, const char *sec, nto_model_conf *m,
                       nto_err *err) {
  const char *alias_by[3] = {NULL, NULL, NULL}; /* swap, lookahead, path */
  int rc = load_keys(L, sec, err);
  for (int i = 0; rc == 0 && i < L->nkeys; i++) {
    const char *k = key_at(L, sec, i);
    const char *v = value_at(L, i);
    int idx = lookup(k, model_keys);
    long x = 0;
    int b;
    switch (idx) {
    case MK_TYPE: /* nntrainer filters it out of [Model]'s properties */
      if (nto_streq(v, "regression"))
        rc = warn(L, err,
                  "%s: [%s] key '%s': 'Regression' is ignored, as nntrainer "
                  "ignores it: the layers say what is trained",
                  L->file, sec, k);
      else if (!nto_streq(v, "neuralnetwork"))
        rc = nto_err_set(err, NTO_ECONFIG,
                         "%s: [%s] key '%s': expected NeuralNetwork (or "
                         "Regression, read the same), got '%s'",
                         L->file, sec, k, v);
      break;
    case MK_EPOCHS:
      if ((rc = parse_count(v, 1, INT_MAX, &x, err)) == 0)
        m->epochs = (int)x;
      else
        key_err(L, sec, k, err);
      break;
    case MK_LOSS: {
      int kind;
      if ((rc = nto_parse_enum(v, loss_names, &kind, err)) == 0)
        m->loss = kind == 1 ? NTO_LOSS_MSE : NTO_LOSS_CROSS;
      else
        key_err(L, sec, k, err);
      break;
    }
    case MK_BATCH:
      if ((rc = parse_count(v, 1, 1L << 20, &x, err)) == 0)
        m->batch_size = (int)x;
      else
        key_err(L, sec, k, err);
      break;
    case MK_SAVE:
      rc = set_path(L, sec, k, v, m->save_path, sizeof m->save_path, err);
      break;
    case MK_SWAP:
    case MK_FSU:
    case MK_LOOKAHEAD:
    case MK_FSU_LOOKAHEAD:
    case MK_SWAP_PATH:
    case MK_FSU_PATH: {
      int slot = (idx == MK_SWAP || idx == MK_FSU)                  ? 0
                 : (idx == MK_LOOKAHEAD || idx == MK_FSU_LOOKAHEAD) ? 1
                                                                    : 2;
      if (alias_by[slot]) {
        rc = nto_err_set(err, NTO_ECONFIG,
                         "%s: [%s] key '%s': same setting as '%s', given "
                         "twice",
                         L->file, sec, k, alias_by[slot]);
        break;
      }
      alias_by[slot] = k;
      if (slot == 0) {
        if ((rc = nto_parse_bool(v, &b, err)) == 0)
          m->memory_swap = b;
        else
          key_err(L, sec, k, err);
      } else if (slot == 1) {
        if (nto_streq(v, "auto")) {
          snprintf(m->swap_lookahead, sizeof m->swap_lookahead, "auto");
        } else if (nto_parse_int(v, 1, INT_MAX, &x, NULL) == 0) {
          snprintf(m->swap_lookahead, sizeof m->swap_lookahead, "%ld", x);
        } else {
          rc = nto_err_set(err, NTO_ECONFIG,
                           "%s: [%s] key '%s': expected an integer >= 1 or "
                           "auto, got '%s'",
                           L->file, sec, k, v);
        }
      } else {
        rc = set_path(L, sec, k, v, m->swap_path, sizeof m->swap_path, err);
      }
      break;
    }
    case MK_BUDGET: {
      size_t bytes;
      if ((rc = nto_parse_size(v, &bytes, err)) != 0)
        key_err(L, sec, k, err);
      else
        rc = set_str(L, sec, k, v, m->memory_budget, sizeof m->memory_budget,
                     err);
      break;
    }
    case MK_GROUPS: {
      size_t bytes = 0;
      if (!nto_streq(v, "off") &&
          (nto_parse_size(v, &bytes, err) != 0 || bytes < 1024))
        rc = nto_err_set(err, NTO_ECONFIG,
                         "%s: [%s] key '%s': expected off or a size of at "
                         "least 1K (suffixes K, M, G), got '%s'",
                         L->file, sec, k, v);
      else
        rc = set_str(L, sec, k, v, m->channel_groups,
                     sizeof m->channel_groups, err);
      break;
    }
    case MK_FROZEN_BN:
      if (nto_streq(v, "batch") || nto_streq(v, "running"))
        m->frozen_bn_batch = nto_streq(v, "batch");
      else
        rc = nto_err_set(err, NTO_ECONFIG,
                         "%s: [%s] key '%s': expected running or batch, got "
                         "'%s'",
                         L->file, sec, k, v);
      break;
    case MK_CONTINUE:
    case MK_SAVE_BEST:
    case MK_TENSOR_TYPE:
    case MK_TENSOR_FORMAT:
    case MK_MEM_OPT:
      rc = model_key_nntrainer(L, sec, k, v, idx, m, err);
      break;
    default:
      if (lookup(k, model_opt_keys) >= 0)
        break; /* an optimizer key: model_optimizer */
      for (size_t j = 0; j < sizeof model_2020 / sizeof model_2020[0]; j++)
        if (!strcmp(k, model_2020[j][0]))
          return nto_err_set(err, NTO_ECONFIG,
                             "%s: [%s] key '%s': nntrainer's 2020 key, which "
                             "nntrainer no longer reads either: write %s",
                             L->file, sec, k, model_2020[j][1]);
      rc = unknown_key(L, sec, k, model_keys, err);
      break;
    }
  }
  return rc;
}

/* ---------------------------------------------------------------------- */
/* [Optimizer]                                                             */

static const char *const opt_types[] = {"sgd", "adam", "adamw", NULL};
static const char *const opt_keys[] = {
    "type",        "learning_rate", "momentum",     "beta1",
    "beta2",       "epsilon",       "weight_decay", "decay_rate",
    "decay_steps", "state_format",  NULL};
/* state_format's values, in nto_opt_state_format order */
static const char *const opt_state_formats[] = {"fp32", "bf16", "int8", NULL};
enum {
  OK_TYPE,
  OK_LR,
  OK_MOMENTUM,
  OK_BETA1,
  OK_BETA2,
  OK_EPSILON,
  OK_WD,
  OK_DECAY_RATE,
  OK_DECAY_STEPS,
  OK_STATE_FORMAT
};

/* Legacy decay_rate / decay_steps written in [Optimizer]. */
typedef struct legacy_decay {
  const char *rate_key, *steps_key; /* NULL if absent */
  double rate;
  long steps;
} legacy_decay;

/* The required `type` of section sec, one of types, into *kind; then its
 * keys (load_keys). Returns 0 or NTO_ECONFIG/NTO_ENOMEM with a message. */
static int typed_section(loader *L, const char *sec, const char *const *types,
                         int *kind, nto_err *err) {
  const char *t = get(L, sec, "type");
  if (!t)
    return missing_key(L, sec, "type", err);
  if (nto_parse_enum(t, types, kind, err) != 0)
    return key_err(L, sec, "type", err);
  return load_keys(L, sec, err);
}

/* Optimizer key k (opt_keys index idx, not OK_TYPE) = v of section sec
 * into o (of its kind, already set) and ld. Returns 0 or NTO_ECONFIG
 * naming file, section and key. */
static int opt_key(const loader *L, const char *sec, const char *k,
                   const char *v, int idx, nto_opt_conf *o, legacy_decay *ld,
                   nto_err *err) {
  int sgd_only = idx == OK_MOMENTUM;
  int adam_only = idx == OK_BETA1 || idx == OK_BETA2 || idx == OK_EPSILON;
  if ((sgd_only && o->kind != NTO_OPT_SGD) ||
      (adam_only && o->kind == NTO_OPT_SGD))
    return nto_err_set(err, NTO_ECONFIG,
                       "%s: [%s] key '%s': not a setting of optimizer %s "
                       "(only of %s)",
                       L->file, sec, k, opt_types[o->kind],
                       sgd_only ? "sgd" : "adam and adamw");
  int rc = 0;
  switch (idx) {
  case OK_LR:
    rc = parse_real32(v, 0, 1, 10, 0, &o->learning_rate, err);
    o->lr_given = 1;
    break;
  case OK_MOMENTUM:
    rc = parse_real32(v, 0, 0, 1, 1, &o->momentum, err);
    break;
  case OK_BETA1:
    rc = parse_real32(v, 0, 0, 1, 1, &o->beta1, err);
    break;
  case OK_BETA2:
    rc = parse_real32(v, 0, 0, 1, 1, &o->beta2, err);
    break;
  case OK_EPSILON:
    rc = parse_real32(v, 0, 1, 1, 1, &o->epsilon, err);
    break;
  case OK_WD:
    rc = parse_real32(v, 0, 0, INFINITY, 0, &o->weight_decay, err);
    break;
  case OK_DECAY_RATE:
    rc = parse_real(v, 0, 1, 1, 0, &ld->rate, err);
    ld->rate_key = k;
    break;
  case OK_DECAY_STEPS:
    rc = parse_count(v, 1, LONG_MAX, &ld->steps, err);
    ld->steps_key = k;
    break;
  case OK_STATE_FORMAT: {
    int f = 0;
    rc = nto_parse_enum(v, opt_state_formats, &f, err);
    o->state_format = (nto_opt_state_format)f;
    break;
  }
  default:
    break;
  }
  return rc != 0 ? key_err(L, sec, k, err) : 0;
}

/* Both or neither of the legacy decay keys (ld) of section sec. */
static int check_legacy_decay(const loader *L, const char *sec,
                              const legacy_decay *ld, nto_err *err) {
  if ((ld->rate_key != NULL) == (ld->steps_key != NULL))
    return 0;
  return nto_err_set(err, NTO_ECONFIG,
                     "%s: [%s] key '%s': needs '%s' too (legacy exponential "
                     "decay)",
                     L->file, sec, ld->rate_key ? "decay_rate" : "decay_steps",
                     ld->rate_key ? "decay_steps" : "decay_rate");
}

static int parse_optimizer(loader *L, const char *sec, nto_opt_conf *o,
                           legacy_decay *ld, nto_err *err) {
  int kind = 0;
  int rc = typed_section(L, sec, opt_types, &kind, err);
  o->kind = (nto_opt_kind)kind;
  for (int i = 0; rc == 0 && i < L->nkeys; i++) {
    const char *k = key_at(L, sec, i);
    int idx = lookup(k, opt_keys);
    if (idx < 0)
      return unknown_key(L, sec, k, opt_keys, err);
    if (idx != OK_TYPE)
      rc = opt_key(L, sec, k, value_at(L, i), idx, o, ld, err);
  }
  return rc == 0 ? check_legacy_decay(L, sec, ld, err) : rc;
}

/*
 * The optimizer in [Model] (section sec), nntrainer's old format:
 * `optimizer = sgd|adam|adamw` with learning_rate, decay_rate, decay_steps,
 * beta1, beta2, epsilon beside it, read as [Optimizer] would read them (the
 * same checks) with a warning per key. As in nntrainer, the keys other
 * than `optimizer` are read only with it, and are otherwise ignored with a
 * warning; `optimizer` together with an [Optimizer] section (opt_sec, NULL
 * if none) is an error. *given: the optimizer came from [Model].
 */
static int model_optimizer(loader *L, const char *sec, const char *opt_sec,
                           nto_opt_conf *o, legacy_decay *ld, int *given,
                           nto_err *err) {
  const char *t = get(L, sec, "optimizer");
  *given = t != NULL;
  if (t && opt_sec)
    return nto_err_set(err, NTO_ECONFIG,
                       "%s: [%s] key 'optimizer': the optimizer is given "
                       "twice, here and in [%s] (nntrainer refuses it too): "
                       "keep [Optimizer]",
                       L->file, sec, opt_sec);
  int kind = 0;
  if (t && nto_parse_enum(t, opt_types, &kind, err) != 0)
    return key_err(L, sec, "optimizer", err);
  if (t)
    o->kind = (nto_opt_kind)kind;
  int rc = load_keys(L, sec, err);
  for (int i = 0; rc == 0 && i < L->nkeys; i++) {
    const char *k = key_at(L, sec, i);
    if (lookup(k, model_opt_keys) < 0)
      continue;
    int idx = lookup(k, opt_keys); /* the same name, "optimizer" aside */
    if (!t)
      rc = warn(L, err,
                "%s: [%s] key '%s': ignored, as nntrainer ignores it without "
                "'optimizer' in [%s] (write it in [Optimizer])",
                L->file, sec, k, sec);
    else if ((rc = idx < 0 ? 0
                           : opt_key(L, sec, k, value_at(L, i), idx, o, ld,
                                     err)) == 0)
      rc = warn(L, err,
                "%s: [%s] key '%s': deprecated, read as [Optimizer] %s "
                "(nntrainer's old format)",
                L->file, sec, k, idx < 0 ? "type" : k);
  }
  return rc == 0 ? check_legacy_decay(L, sec, ld, err) : rc;
}

/* ---------------------------------------------------------------------- */
/* [LearningRateScheduler]                                                 */

static const char *const lr_types[] = {"constant", "exponential", "step",
                                       "cosine", NULL};
static const char *const lr_keys[] = {
    "type",      "learning_rate",     "decay_rate",        "decay_steps",
    "iteration", "max_learning_rate", "min_learning_rate", NULL};
enum {
  LK_TYPE,
  LK_LR,
  LK_DECAY_RATE,
  LK_DECAY_STEPS,
  LK_ITERATION,
  LK_MAX_LR,
  LK_MIN_LR
};
/* Keys valid per scheduler kind, bit i = lr_keys[i]. */
static const unsigned lr_valid[] = {
    [NTO_LR_CONSTANT] = 1u << LK_TYPE | 1u << LK_LR,
    [NTO_LR_EXPONENTIAL] = 1u << LK_TYPE | 1u << LK_LR | 1u << LK_DECAY_RATE |
                           1u << LK_DECAY_STEPS,
    [NTO_LR_STEP] = 1u << LK_TYPE | 1u << LK_LR | 1u << LK_ITERATION,
    [NTO_LR_COSINE] = 1u << LK_TYPE | 1u << LK_MAX_LR | 1u << LK_MIN_LR |
                      1u << LK_DECAY_STEPS,
};

/* Which scheduler keys were given (parse_scheduler). */
typedef struct lr_seen {
  int lr, steps, rate, max, n_rates;
  const char *iter_v; /* the iteration list as written, NULL: none */
} lr_seen;

/* Scheduler key idx (lr_keys) with value v into s. Returns 0 or
 * NTO_ECONFIG with the value's message (the caller names the key). */
static int scheduler_key(int idx, const char *v, nto_lr_conf *s, lr_seen *g,
                         nto_err *err) {
  int rc = 0;
  switch (idx) {
  case LK_LR:
    if (s->kind == NTO_LR_STEP)
      rc = parse_real_list(v, 10, s->learning_rate, NTO_LR_MAX_STEPS + 1,
                           &g->n_rates, err);
    else
      rc = parse_real(v, 0, 1, 10, 0, &s->learning_rate[0], err);
    g->lr = 1;
    break;
  case LK_DECAY_RATE:
    rc = parse_real(v, 0, 1, 1, 0, &s->decay_rate, err);
    g->rate = 1;
    break;
  case LK_DECAY_STEPS:
    rc = parse_count(v, 1, LONG_MAX, &s->decay_steps, err);
    g->steps = 1;
    break;
  case LK_ITERATION:
    rc = nto_parse_int_list(v, 1, LONG_MAX, s->iteration, NTO_LR_MAX_STEPS,
                            &s->n_steps, err);
    for (int j = 1; rc == 0 && j < s->n_steps; j++)
      if (s->iteration[j] <= s->iteration[j - 1])
        rc = nto_err_set(err, NTO_ECONFIG,
                         "expected increasing iterations, got '%s'", v);
    g->iter_v = v;
    break;
  case LK_MAX_LR:
    rc = parse_real(v, 0, 1, 10, 0, &s->max_learning_rate, err);
    g->max = 1;
    break;
  case LK_MIN_LR:
    rc = parse_real(v, 0, 0, 10, 0, &s->min_learning_rate, err);
    break;
  default:
    break;
  }
  return rc;
}

/* The keys scheduler s's kind needs, given g; cosine's missing
 * max_learning_rate defaults to the optimizer's rate o_lr. */
static int check_scheduler(loader *L, const char *sec, nto_lr_conf *s,
                           const lr_seen *g, double o_lr, nto_err *err) {
  switch (s->kind) {
  case NTO_LR_CONSTANT:
    break;
  case NTO_LR_EXPONENTIAL:
    if (!g->rate)
      return missing_key(L, sec, "decay_rate", err);
    if (!g->steps)
      return missing_key(L, sec, "decay_steps", err);
    break;
  case NTO_LR_STEP:
    if (!g->lr)
      return missing_key(L, sec, "learning_rate", err);
    if (!g->iter_v)
      return missing_key(L, sec, "iteration", err);
    if (s->n_steps != g->n_rates - 1)
      return nto_err_set(err, NTO_ECONFIG,
                         "%s: [%s] key 'iteration': expected %d iteration%s "
                         "(one fewer than the %d rates of 'learning_rate'), "
                         "got '%s'",
                         L->file, sec, g->n_rates - 1,
                         g->n_rates == 2 ? "" : "s", g->n_rates, g->iter_v);
    break;
  case NTO_LR_COSINE:
    if (!g->steps)
      return missing_key(L, sec, "decay_steps", err);
    if (!g->max)
      s->max_learning_rate = o_lr;
    if (s->min_learning_rate > s->max_learning_rate) {
      char mx[32];
      fmt_num(mx, sizeof mx, s->max_learning_rate);
      return nto_err_set(err, NTO_ECONFIG,
                         "%s: [%s] key 'min_learning_rate': expected at most "
                         "max_learning_rate (%s), got '%s'",
                         L->file, sec, mx, get(L, sec, "min_learning_rate"));
    }
    break;
  }
  return 0;
}

static int parse_scheduler(loader *L, const char *sec, nto_lr_conf *s,
                           nto_opt_conf *o, nto_err *err) {
  int kind = 0;
  int rc = typed_section(L, sec, lr_types, &kind, err);
  s->kind = (nto_lr_kind)kind;
  s->given = 1;
  lr_seen g = {0};
  for (int i = 0; rc == 0 && i < L->nkeys; i++) {
    const char *k = key_at(L, sec, i);
    int idx = lookup(k, lr_keys);
    if (idx < 0)
      return unknown_key(L, sec, k, lr_keys, err);
    if (!(lr_valid[s->kind] & (1u << idx)))
      return nto_err_set(err, NTO_ECONFIG,
                         "%s: [%s] key '%s': not a setting of scheduler %s",
                         L->file, sec, k, lr_types[s->kind]);
    if (scheduler_key(idx, value_at(L, i), s, &g, err) != 0)
      return key_err(L, sec, k, err);
  }
  if (rc == 0)
    rc = check_scheduler(L, sec, s, &g, o->learning_rate, err);
  if (rc != 0)
    return rc;
  /* The scheduler's rate wins over [Optimizer] learning_rate. */
  if (s->kind == NTO_LR_COSINE) {
    o->learning_rate = s->max_learning_rate;
  } else if (g.lr) {
    o->learning_rate = s->learning_rate[0];
  } else {
    s->learning_rate[0] = o->learning_rate;
  }
  return 0;
}

/* ---------------------------------------------------------------------- */
/* [train_set] [valid_set] [test_set]                                      */

static const char *const data_keys[] = {"type", "path", "buffer_size", NULL};

static int parse_dataset(loader *L, const char *sec, nto_data_conf *dc,
                         nto_err *err) {
  const char *t = get(L, sec, "type");
  const char *p = get(L, sec, "path");
  if (!t)
    return missing_key(L, sec, "type", err);
  if (!nto_streq(t, "file"))
    return nto_err_set(err, NTO_ECONFIG,
                       "%s: [%s] key 'type': expected file, got '%s'", L->file,
                       sec, t);
  if (!p)
    return missing_key(L, sec, "path", err);
  int rc = load_keys(L, sec, err);
  for (int i = 0; rc == 0 && i < L->nkeys; i++) {
    const char *k = key_at(L, sec, i);
    const char *v = value_at(L, i);
    long x = 0;
    switch (lookup(k, data_keys)) {
    case 0:
      break;
    case 1:
      if (v[0] == '\0')
        return nto_err_set(err, NTO_ECONFIG,
                           "%s: [%s] key 'path': expected a file name, got ''",
                           L->file, sec);
      rc = set_path(L, sec, k, v, dc->path, sizeof dc->path, err);
      break;
    case 2:
      if ((rc = parse_count(v, 1, INT_MAX, &x, err)) == 0)
        dc->buffer_size = (int)x;
      else
        key_err(L, sec, k, err);
      break;
    default:
      return unknown_key(L, sec, k, data_keys, err);
    }
  }
  if (rc == 0)
    dc->kind = NTO_DATA_FILE;
  return rc;
}

/*
 * [DataSet], the data section of nntrainer's old format, which nntrainer
 * still reads: TrainData (required), ValidData, TestData (raw data files,
 * paths as in [train_set]), BufferSize or buffer_size (every set's), and
 * LabelData (a label list nntrainer ignores now: labels are in the data
 * files). Read into sets[3] (train, valid, test) with a warning per key;
 * a [train_set], [valid_set] or [test_set] section read afterwards wins,
 * as in nntrainer.
 */
static const char *const old_data_keys[] = {
    "traindata",  "validdata",   "testdata", "labeldata",
    "buffersize", "buffer_size", NULL};
static const char *const old_data_now[] = {"train_set", "valid_set",
                                           "test_set"};

static int parse_old_dataset(loader *L, const char *sec, nto_data_conf **sets,
                             nto_err *err) {
  if (!get(L, sec, "traindata"))
    return missing_key(L, sec, "traindata", err);
  const char *buf_key = NULL;
  long buf = 0;
  int rc = load_keys(L, sec, err);
  for (int i = 0; rc == 0 && i < L->nkeys; i++) {
    const char *k = key_at(L, sec, i);
    const char *v = value_at(L, i);
    int idx = lookup(k, old_data_keys);
    if (idx < 0)
      return unknown_key(L, sec, k, old_data_keys, err);
    if (idx <= 2) {
      if (v[0] == '\0')
        return nto_err_set(err, NTO_ECONFIG,
                           "%s: [%s] key '%s': expected a file name, got ''",
                           L->file, sec, k);
      if ((rc = set_path(L, sec, k, v, sets[idx]->path, sizeof sets[idx]->path,
                         err)) != 0)
        return rc;
      sets[idx]->kind = NTO_DATA_FILE;
      rc = warn(L, err,
                "%s: [%s] key '%s': deprecated, read as [%s] type = file, "
                "path = %s",
                L->file, sec, k, old_data_now[idx], v);
    } else if (idx == 3) {
      rc = warn(L, err,
                "%s: [%s] key '%s': ignored, as nntrainer ignores it (the "
                "labels are in the data files)",
                L->file, sec, k);
    } else if (buf_key) {
      return nto_err_set(err, NTO_ECONFIG,
                         "%s: [%s] key '%s': same setting as '%s', given "
                         "twice",
                         L->file, sec, k, buf_key);
    } else if (parse_count(v, 1, INT_MAX, &buf, err) != 0) {
      return key_err(L, sec, k, err);
    } else {
      buf_key = k;
      rc = warn(L, err,
                "%s: [%s] key '%s': deprecated, read as buffer_size of "
                "[train_set], [valid_set] and [test_set]",
                L->file, sec, k);
    }
  }
  for (int j = 0; j < 3; j++)
    if (sets[j]->kind == NTO_DATA_FILE)
      sets[j]->buffer_size = (int)buf;
  return rc;
}

/* ---------------------------------------------------------------------- */
/* Layer sections                                                          */

/*
 * Layer types of nntrainer's first INI format (2020, before the current
 * names), still in some of its applications, and the current name each is
 * read as. OutputLayer was the fully connected layer the loss followed.
 */
static const char *const old_types[][2] = {
    {"inputlayer", "input"},
    {"fullyconnectedlayer", "fully_connected"},
    {"batchnormalizationlayer", "batch_normalization"},
    {"outputlayer", "fully_connected"},
};

/* Rewrite an old layer type of section sec (out) to its current name. */
static int rename_old_type(loader *L, const char *sec, nto_section *out,
                           nto_err *err) {
  for (int i = 0; i < out->n_kv; i++) {
    if (strcmp(out->kv[i].key, "type") != 0)
      continue;
    for (size_t j = 0; j < sizeof old_types / sizeof old_types[0]; j++) {
      if (!nto_streq(out->kv[i].value, old_types[j][0]))
        continue;
      int rc = warn(L, err,
                    "%s: [%s] key 'type': '%s' is deprecated, read as %s "
                    "(nntrainer's old layer type name)",
                    L->file, sec, out->kv[i].value, old_types[j][1]);
      snprintf(out->kv[i].value, sizeof out->kv[i].value, "%s",
               old_types[j][1]);
      return rc;
    }
  }
  return 0;
}

/* Room for one more layer section at the end of c->layers, zeroed and
 * counted (so that nto_config_free releases what it gets); NULL with err
 * set when out of memory. */
static nto_section *push_layer(loader *L, nto_err *err) {
  nto_config *c = L->conf;
  if (c->n_layers == c->layers_cap) {
    int cap = c->layers_cap ? 2 * c->layers_cap : 16;
    nto_section *p = realloc(c->layers, (size_t)cap * sizeof *p);
    if (!p) {
      nto_err_set(err, NTO_ENOMEM, "%s: out of memory", L->file);
      return NULL;
    }
    c->layers = p;
    c->layers_cap = cap;
  }
  nto_section *out = &c->layers[c->n_layers++];
  memset(out, 0, sizeof *out);
  out->file = L->file_idx;
  return out;
}

/* Set key (lowercase) of section s to value, replacing or adding it.
 * Returns 0 or NTO_ENOMEM. */
static int set_kv(nto_section *s, const char *key, const char *value) {
  for (int i = 0; i < s->n_kv; i++)
    if (!strcmp(s->kv[i].key, key)) {
      snprintf(s->kv[i].value, sizeof s->kv[i].value, "%s", value);
      return 0;
    }
  nto_kv *kv = realloc(s->kv, (size_t)(s->n_kv + 1) * sizeof *kv);
  if (!kv)
    return NTO_ENOMEM;
  s->kv = kv;
  snprintf(kv[s->n_kv].key, sizeof kv[s->n_kv].key, "%s", key);
  snprintf(kv[s->n_kv].value, sizeof kv[s->n_kv].value, "%s", value);
  s->n_kv++;
  return 0;
}

static int load_file(loader *L, nto_err *err);
static int load_layer_sections(loader *L, nto_err *err);
static void loader_init(loader *L, const char *path, nto_config *c);
static void loader_free(loader *L);

/*
 * Rewrite the comma-separated layer names of list (an input_layers value)
 * through map: a name equal to from[i] (n of them) becomes to[i]; with
 * keep_others 0, any other name is returned in *bad (NTO_ECONFIG) and
 * list is unchanged. out has NTO_CONF_STR bytes.
 */
static int map_names(const char *list, const char (*from)[NAME_MAX_LEN + 1],
                     const char (*to)[NAME_MAX_LEN + 1], int n, int keep_others,
                     char *out, char *bad, size_t bad_len) {
  size_t used = 0;
  out[0] = '\0';
  for (const char *p = list; *p;) {
    const char *comma = strchr(p, ',');
    size_t len = comma ? (size_t)(comma - p) : strlen(p);
    char name[NTO_CONF_STR];
    snprintf(name, sizeof name, "%.*s", (int)len, p);
    strip_inplace(name);
    lower_inplace(name);
    const char *rep = NULL;
    for (int i = 0; i < n && !rep; i++)
      if (!strcmp(name, from[i]))
        rep = to[i];
    if (!rep && !keep_others) {
      snprintf(bad, bad_len, "%s", name);
      return NTO_ECONFIG;
    }
    used += (size_t)snprintf(out + used,
                             used < NTO_CONF_STR ? NTO_CONF_STR - used : 0,
                             "%s%s", used ? ", " : "", rep ? rep : name);
    p = comma ? comma + 1 : p + len;
  }
  return used < NTO_CONF_STR ? 0 : NTO_ECONFIG;
}

/* list (input_layers) with the names of this file's backbone sections
 * replaced by their last layers' into out (NTO_CONF_STR bytes). Returns 0,
 * NTO_ECONFIG (too long) or NTO_ENOMEM. */
static int map_ends(const loader *L, const char *list, char *out) {
  int n = L->n_ends > 0 ? L->n_ends : 1;
  char(*f)[NAME_MAX_LEN + 1] = calloc((size_t)n, sizeof *f);
  char(*t)[NAME_MAX_LEN + 1] = calloc((size_t)n, sizeof *t);
  int rc = f && t ? 0 : NTO_ENOMEM;
  for (int i = 0; rc == 0 && i < L->n_ends; i++) {
    snprintf(f[i], sizeof f[i], "%s", L->ends[i].section);
    snprintf(t[i], sizeof t[i], "%s", L->ends[i].last);
  }
  char bad[2];
  if (rc == 0)
    rc = map_names(list, f, t, L->n_ends, 1, out, bad, sizeof bad);
  free(f);
  free(t);
  return rc;
}

/* load_keys, each key one of names (else unknown_key's error). */
static int load_known_keys(loader *L, const char *sec, const char *const *names,
                           nto_err *err) {
  int rc = load_keys(L, sec, err);
  for (int i = 0; rc == 0 && i < L->nkeys; i++)
    if (lookup(key_at(L, sec, i), names) < 0)
      rc = unknown_key(L, sec, key_at(L, sec, i), names, err);
  return rc;
}

/* Keys of a section that includes a backbone: nntrainer's (its INI
 * interpreter's getMergeableGraph); `type` is ignored there, as nntrainer
 * ignores it. */
static const char *const backbone_keys[] = {
    "backbone",    "trainable", "input_layers", "input_shape", "inputlayer",
    "outputlayer", "scalesize", "preload",      "type",        NULL};

#define BACKBONE_DEPTH_MAX 8

/* Layers [first, c->n_layers) of a backbone: keep those from the one named
 * in (if given) through the one named out (if given), by file order, as
 * nntrainer's getUnsortedLayers slices them. */
static int slice_backbone(loader *L, const char *sec, int first, const char *in,
                          const char *out, nto_err *err) {
  nto_config *c = L->conf;
  int lo = first, hi = c->n_layers - 1;
  const char *names[2] = {in, out};
  const char *keys[2] = {"inputlayer", "outputlayer"};
  for (int k = 0; k < 2; k++) {
    if (!names[k] || !names[k][0])
      continue;
    int at = -1;
    for (int i = first; i < c->n_layers && at < 0; i++)
      if (nto_streq(c->layers[i].name, names[k]))
        at = i;
    if (at < 0)
      return nto_err_set(err, NTO_ECONFIG,
                         "%s: [%s] key '%s': the backbone has no layer '%s'",
                         L->file, sec, keys[k], names[k]);
    if (k == 0)
      lo = at;
    else
      hi = at;
  }
  if (lo > hi)
    return nto_err_set(err, NTO_ECONFIG,
                       "%s: [%s] keys 'inputlayer', 'outputlayer': layer '%s' "
                       "comes after '%s' in the backbone: no layers left",
                       L->file, sec, in, out);
  for (int i = first; i < c->n_layers; i++)
    if (i < lo || i > hi)
      free(c->layers[i].kv);
  int kept = hi - lo + 1;
  memmove(&c->layers[first], &c->layers[lo], (size_t)kept * sizeof *c->layers);
  c->n_layers = first + kept;
  return 0;
}

/*
 * Name the backbone's layers [first, c->n_layers) as nntrainer's
 * extendGraph does: the section's name, then the layer's (lowercase, no
 * separator); their input_layers follow (a name outside the kept layers
 * must be a layer already in the model). trainable, input_shape and
 * input_layers of the section apply as nntrainer applies them.
 */
static int wire_backbone(loader *L, const char *sec, int first, int trainable,
                         const char *shape, const char *inputs, nto_err *err) {
  nto_config *c = L->conf;
  int n = c->n_layers - first;
  char(*from)[NAME_MAX_LEN + 1] = calloc((size_t)(n + first), sizeof *from);
  char(*to)[NAME_MAX_LEN + 1] = calloc((size_t)(n + first), sizeof *to);
  int rc = from && to ? 0 : nto_err_set(err, NTO_ENOMEM, "out of memory");
  for (int i = 0; rc == 0 && i < n; i++) {
    nto_section *s = &c->layers[first + i];
    snprintf(from[i], sizeof from[i], "%s", s->name);
    if (strlen(sec) + strlen(s->name) > NAME_MAX_LEN)
      rc = nto_err_set(err, NTO_ECONFIG,
                       "%s: [%s] key 'backbone': layer '%s' would be named "
                       "'%s%s', longer than %d characters (shorten the "
                       "section's name)",
                       L->file, sec, s->name, sec, s->name, NAME_MAX_LEN);
    else { /* lengths checked: fits */
      size_t a = strlen(sec);
      memcpy(to[i], sec, a);
      memcpy(to[i] + a, s->name, strlen(s->name) + 1);
    }
  }
  /* layers already in the model keep their names */
  for (int i = 0; rc == 0 && i < first; i++) {
    snprintf(from[n + i], sizeof from[n + i], "%s", c->layers[i].name);
    snprintf(to[n + i], sizeof to[n + i], "%s", c->layers[i].name);
  }
  for (int i = 0; rc == 0 && i < n; i++) {
    nto_section *s = &c->layers[first + i];
    const char *in = nto_section_get(s, "input_layers");
    char mapped[NTO_CONF_STR], bad[NTO_CONF_STR];
    if (in && map_names(in, from, to, n + first, 0, mapped, bad, sizeof bad))
      rc = nto_err_set(err, NTO_ECONFIG,
                       "%s: [%s] key 'input_layers': no layer '%s' in the "
                       "backbone's layers (of [%s] in %s) or before them",
                       nto_section_file(c, s), s->name, bad, sec, L->file);
    else if (in && set_kv(s, "input_layers", mapped))
      rc = nto_err_set(err, NTO_ENOMEM, "out of memory");
  }
  for (int i = 0; rc == 0 && i < n; i++) {
    nto_section *s = &c->layers[first + i];
    snprintf(s->name, sizeof s->name, "%s", to[i]);
    s->prefix = (int)strlen(sec);
    if (set_kv(s, "trainable", trainable ? "true" : "false"))
      rc = nto_err_set(err, NTO_ENOMEM, "out of memory");
  }
  nto_section *s0 = &c->layers[first];
  if (rc == 0 && shape && set_kv(s0, "input_shape", shape))
    rc = nto_err_set(err, NTO_ENOMEM, "out of memory");
  if (rc == 0 && inputs) { /* a backbone section before: its last layer */
    char mapped[NTO_CONF_STR];
    if (map_ends(L, inputs, mapped) != 0)
      rc = nto_err_set(err, NTO_ECONFIG,
                       "%s: [%s] key 'input_layers': too long once mapped",
                       L->file, sec);
    else if (set_kv(s0, "input_layers", mapped) != 0)
      rc = nto_err_set(err, NTO_ENOMEM, "out of memory");
  }
  free(from);
  free(to);
  return rc;
}

/*
 * Section sec with `backbone = path`: nntrainer's transfer-learning
 * include. The layer sections of the INI at path (relative: to this
 * file's directory; its [Model], [Optimizer] and data sections are
 * ignored, as nntrainer ignores them) are inserted here, sliced by
 * InputLayer/OutputLayer, named with sec as prefix, trainable as the
 * section says (default false), the first one given input_shape and
 * input_layers. TFLite and other external backbones are refused.
 */
static int insert_backbone(loader *L, const char *sec, const char *path,
                           nto_err *err) {
  int rc = load_known_keys(L, sec, backbone_keys, err);
  if (rc != 0)
    return rc;
  size_t pn = strlen(path);
  if (pn >= 7 && nto_streq(path + pn - 7, ".tflite"))
    return nto_err_set(err, NTO_ECONFIG,
                       "%s: [%s] key 'backbone': a TFLite backbone ('%s') is "
                       "not supported: only layers written as INI sections "
                       "are trained here",
                       L->file, sec, path);
  if (pn < 4 || !nto_streq(path + pn - 4, ".ini"))
    return nto_err_set(err, NTO_ECONFIG,
                       "%s: [%s] key 'backbone': expected an .ini file, got "
                       "'%s' (nntrainer runs other backbones through TFLite "
                       "or NNStreamer, not supported here)",
                       L->file, sec, path);
  if (L->depth >= BACKBONE_DEPTH_MAX)
    return nto_err_set(err, NTO_ECONFIG,
                       "%s: [%s] key 'backbone': backbones nested more than "
                       "%d deep",
                       L->file, sec, BACKBONE_DEPTH_MAX);
  int trainable = 0;
  double scale = 1.0;
  const char *v;
  if ((v = get(L, sec, "trainable")) && nto_parse_bool(v, &trainable, err))
    return key_err(L, sec, "trainable", err);
  if ((v = get(L, sec, "scalesize")) &&
      parse_real(v, 0, 1, INFINITY, 1, &scale, err) != 0)
    return key_err(L, sec, "scalesize", err);
  if (scale != 1.0)
    return nto_err_set(err, NTO_ECONFIG,
                       "%s: [%s] key 'scalesize': only 1 is supported "
                       "(scaling a backbone's layer sizes is not), got '%s'",
                       L->file, sec, v);
  if (get(L, sec, "preload") &&
      (rc = warn(L, err,
                 "%s: [%s] key 'preload': ignored, as nntrainer ignores it "
                 "(load a backbone's weights with train --init-weights)",
                 L->file, sec)) != 0)
    return rc;

  nto_config *c = L->conf;
  char full[NTO_CONF_STR];
  if ((rc = set_path(L, sec, "backbone", path, full, sizeof full, err)) != 0)
    return rc;
  struct stat fs, ps;
  for (const loader *p = L; p && stat(full, &fs) == 0; p = p->parent)
    if (stat(p->file, &ps) == 0 && ps.st_dev == fs.st_dev &&
        ps.st_ino == fs.st_ino)
      return nto_err_set(err, NTO_ECONFIG,
                         "%s: [%s] key 'backbone': '%s' is %s, which would "
                         "include itself",
                         L->file, sec, path,
                         p == L ? "this file"
                                : "a file that includes this one");
  char **files = realloc(c->files, (size_t)(c->n_files + 1) * sizeof *files);
  if (!files || !(files[c->n_files] = strdup(full))) {
    if (files)
      c->files = files;
    return nto_err_set(err, NTO_ENOMEM, "%s: out of memory", L->file);
  }
  c->files = files;
  c->n_files++;

  loader B;
  loader_init(&B, c->files[c->n_files - 1], c);
  B.file_idx = c->n_files;
  B.depth = L->depth + 1;
  B.parent = L;
  int first = c->n_layers;
  rc = load_file(&B, err);
  if (rc == 0)
    rc = load_layer_sections(&B, err);
  loader_free(&B);
  if (rc != 0 && L->depth == 0) /* the innermost message names its file */
    return nto_err_prefix(err, rc, "%s: [%s] key 'backbone': ", L->file, sec);
  if (rc != 0)
    return rc;
  if (c->n_layers == first)
    return nto_err_set(err, NTO_ECONFIG,
                       "%s: [%s] key 'backbone': %s has no layer sections",
                       L->file, sec, full);
  rc = slice_backbone(L, sec, first, get(L, sec, "inputlayer"),
                      get(L, sec, "outputlayer"), err);
  if (rc == 0)
    rc = wire_backbone(L, sec, first, trainable, get(L, sec, "input_shape"),
                       get(L, sec, "input_layers"), err);
  if (rc != 0)
    return rc;
  backbone_end *e = realloc(L->ends, (size_t)(L->n_ends + 1) * sizeof *e);
  if (!e)
    return nto_err_set(err, NTO_ENOMEM, "%s: out of memory", L->file);
  L->ends = e;
  snprintf(e[L->n_ends].section, sizeof e->section, "%s", sec);
  snprintf(e[L->n_ends].last, sizeof e->last, "%s",
           c->layers[c->n_layers - 1].name);
  L->n_ends++;
  return 0;
}

/*
 * Layer keys of nntrainer's 2020 INI format, read by the layers with
 * today's meaning (props.h nto_parse_regularizer_key), and their current
 * spelling: a warning each. weight_decay is the old regularizer only as
 * l2norm or none: today's nntrainer reads a number there, which the layer
 * refuses (no warning then).
 */
static const char *const old_layer_keys[][2] = {
    {"weight_decay", "weight_regularizer"},
    {"weight_decay_lambda", "weight_regularizer_constant"},
};

static int warn_old_layer_keys(loader *L, const char *sec,
                               const nto_section *out, nto_err *err) {
  for (int i = 0; i < out->n_kv; i++) {
    const nto_kv *kv = &out->kv[i];
    for (size_t j = 0; j < sizeof old_layer_keys / sizeof old_layer_keys[0];
         j++) {
      if (strcmp(kv->key, old_layer_keys[j][0]) != 0 ||
          (j == 0 && !nto_streq(kv->value, "l2norm") &&
           !nto_streq(kv->value, "none")))
        continue;
      int rc = warn(L, err,
                    "%s: [%s] key '%s': deprecated, read as %s (nntrainer's "
                    "2020 layer key)",
                    L->file, sec, kv->key, old_layer_keys[j][1]);
      if (rc != 0)
        return rc;
    }
  }
  return 0;
}

/*
 * Section sec of type loss_names[kind]: nntrainer's loss layer written as
 * a section (current nntrainer: [loss] type = mse after the last layer),
 * read as [Model] loss, which it wins over as in nntrainer (a graph
 * whose output already is a loss layer gets none added). It must be the
 * last layer section of the INI, fed by the one before it (checked in
 * load_layer_sections); only type, name and input_layers are allowed.
 */
static int loss_section(loader *L, const char *sec, int kind, nto_err *err) {
  static const char *const keys[] = {"type", "name", "input_layers", NULL};
  int rc = load_known_keys(L, sec, keys, err);
  if (rc != 0)
    return rc;
  if (L->depth > 0 || L->loss_sec || L->conf->n_layers == 0)
    return nto_err_set(err, NTO_ECONFIG,
                       "%s: [%s] key 'type': a loss layer ('%s') is only "
                       "allowed once, after the model's last layer, in the "
                       "model's own INI",
                       L->file, sec, get(L, sec, "type"));
  const char *in = get(L, sec, "input_layers");
  const char *last = L->conf->layers[L->conf->n_layers - 1].name;
  if (in && !nto_streq(in, last))
    return nto_err_set(err, NTO_ECONFIG,
                       "%s: [%s] key 'input_layers': a loss layer takes the "
                       "last layer ('%s') as input, got '%s'",
                       L->file, sec, last, in);
  L->conf->model.loss = kind == 1 ? NTO_LOSS_MSE : NTO_LOSS_CROSS;
  L->loss_sec = sec;
  L->loss_at = L->conf->n_layers;
  return 0;
}

/* Layer section sec: copied as its key/value list, a loss layer read as
 * the loss, or a backbone's sections inserted in its place. */
static int copy_layer(loader *L, const char *sec, nto_err *err) {
  const char *bb = get(L, sec, "backbone");
  if (bb)
    return insert_backbone(L, sec, bb, err);
  const char *type = get(L, sec, "type");
  int kind = type ? lookup_ci(type, loss_names) : -1;
  if (kind >= 0)
    return loss_section(L, sec, kind, err);
  int rc = load_keys(L, sec, err);
  if (rc != 0)
    return rc;
  nto_section *out = push_layer(L, err);
  if (!out)
    return NTO_ENOMEM;
  snprintf(out->name, sizeof out->name, "%s", sec);
  if (L->nkeys > 0) {
    out->kv = calloc((size_t)L->nkeys, sizeof *out->kv);
    if (!out->kv)
      return nto_err_set(err, NTO_ENOMEM, "%s: out of memory", L->file);
  }
  for (int i = 0; i < L->nkeys; i++) {
    snprintf(out->kv[i].key, sizeof out->kv[i].key, "%s", key_at(L, sec, i));
    snprintf(out->kv[i].value, sizeof out->kv[i].value, "%s", value_at(L, i));
  }
  out->n_kv = L->nkeys;
  if (!nto_section_get(out, "type"))
    return missing_key(L, sec, "type", err);
  rc = rename_old_type(L, sec, out, err);
  return rc != 0 ? rc : warn_old_layer_keys(L, sec, out, err);
}

/* ---------------------------------------------------------------------- */
/* Entry points                                                            */

enum { S_MODEL, S_OPT, S_LR, S_TRAIN, S_VALID, S_TEST, S_DATASET, S_COUNT };
static const char *const special[] = {
    "model",     "optimizer", "learningratescheduler",
    "train_set", "valid_set", "test_set",
    "dataset",   NULL};

/* The optimizer and its schedule: [Optimizer], or the old keys of [Model]
 * (model_optimizer), then [LearningRateScheduler] or the legacy decay. */
static int load_optimizer(loader *L, const char *const *sec_name, nto_config *c,
                          nto_err *err) {
  legacy_decay ld = {0};
  int in_model = 0;
  int rc = model_optimizer(L, sec_name[S_MODEL], sec_name[S_OPT], &c->opt, &ld,
                           &in_model, err);
  if (rc == 0 && sec_name[S_OPT])
    rc = parse_optimizer(L, sec_name[S_OPT], &c->opt, &ld, err);
  const char *lr_sec = sec_name[S_LR];
  if (rc == 0 && lr_sec && in_model) {
    /* nntrainer reads the scheduler with the [Optimizer] section only */
    rc = warn(L, err,
              "%s: [%s]: ignored, as nntrainer ignores it when the optimizer "
              "is given in [%s] (move the optimizer to [Optimizer] to use "
              "it)",
              L->file, lr_sec, sec_name[S_MODEL]);
    lr_sec = NULL;
  }
  if (rc != 0)
    return rc;
  if (lr_sec) {
    if (ld.rate_key)
      return nto_err_set(err, NTO_ECONFIG,
                         "%s: [%s] key 'decay_rate': not allowed together "
                         "with [LearningRateScheduler] (write it there)",
                         L->file, sec_name[S_OPT]);
    return parse_scheduler(L, lr_sec, &c->lr, &c->opt, err);
  }
  c->lr.learning_rate[0] = c->opt.learning_rate;
  if (ld.rate_key) { /* nntrainer's legacy form */
    c->lr.kind = NTO_LR_EXPONENTIAL;
    c->lr.given = 1;
    c->lr.decay_rate = ld.rate;
    c->lr.decay_steps = ld.steps;
  }
  return 0;
}

/* The data sets: [DataSet] (nntrainer's old format), then [train_set],
 * [valid_set], [test_set], each of which wins over [DataSet]'s file. */
static int load_data(loader *L, const char *const *sec_name, nto_config *c,
                     nto_err *err) {
  nto_data_conf *sets[3] = {&c->train_set, &c->valid_set, &c->test_set};
  int rc = 0;
  if (sec_name[S_DATASET])
    rc = parse_old_dataset(L, sec_name[S_DATASET], sets, err);
  for (int j = 0; rc == 0 && j < 3; j++) {
    if (!sec_name[S_TRAIN + j])
      continue;
    if (sets[j]->kind == NTO_DATA_FILE) {
      rc =
          warn(L, err, "%s: [%s] key '%s': overridden by [%s], as in nntrainer",
               L->file, sec_name[S_DATASET], old_data_keys[j],
               sec_name[S_TRAIN + j]);
      memset(sets[j], 0, sizeof *sets[j]);
    }
    if (rc == 0)
      rc = parse_dataset(L, sec_name[S_TRAIN + j], sets[j], err);
  }
  return rc;
}

/*
 * The layer sections of L's file, in file order, appended to c->layers
 * (backbones expanded); then the input_layers that name one of the file's
 * backbone sections name its last layer.
 */
static int load_layer_sections(loader *L, nto_err *err) {
  nto_config *c = L->conf;
  int nsec = L->n_secs, first = c->n_layers, rc = 0;
  for (int i = 0; rc == 0 && i < nsec; i++) {
    const char *s = sec_name_at(L, i);
    if (strlen(s) > NAME_MAX_LEN)
      return nto_err_set(err, NTO_ECONFIG,
                         "%s: [%.*s...] expected a section name of at most %d "
                         "characters",
                         L->file, 40, s, NAME_MAX_LEN);
    if (lookup(s, special) < 0)
      rc = copy_layer(L, s, err);
  }
  if (rc == 0 && L->loss_sec && L->loss_at != c->n_layers)
    rc = nto_err_set(err, NTO_ECONFIG,
                     "%s: [%s]: a loss layer must be the last layer section "
                     "(layers follow it)",
                     L->file, L->loss_sec);
  for (int i = first; rc == 0 && L->n_ends && i < c->n_layers; i++) {
    nto_section *s = &c->layers[i];
    const char *in = nto_section_get(s, "input_layers");
    char mapped[NTO_CONF_STR];
    if (s->file != L->file_idx || !in)
      continue;
    if (map_ends(L, in, mapped) != 0)
      rc = nto_err_set(err, NTO_ECONFIG,
                       "%s: [%s] key 'input_layers': too long once mapped",
                       L->file, s->name);
    else if (set_kv(s, "input_layers", mapped) != 0)
      rc = nto_err_set(err, NTO_ENOMEM, "%s: out of memory", L->file);
  }
  return rc;
}

static int load_dict(loader *L, nto_config *c, nto_err *err) {
  int nsec = L->n_secs;
  const char *sec_name[S_COUNT] = {NULL};

  for (int i = 0; i < nsec; i++) {
    const char *s = sec_name_at(L, i);
    if (strlen(s) > NAME_MAX_LEN)
      return nto_err_set(err, NTO_ECONFIG,
                         "%s: [%.*s...] expected a section name of at most %d "
                         "characters",
                         L->file, 40, s, NAME_MAX_LEN);
    int k = lookup(s, special);
    if (k >= 0)
      sec_name[k] = s;
  }
  if (!sec_name[S_MODEL])
    return nto_err_set(err, NTO_ECONFIG,
                       "%s: missing [Model] section (a file of layer sections "
                       "only is a backbone: include it from a model's INI "
                       "with `backbone = FILE`)",
                       L->file);

  int rc = parse_model(L, sec_name[S_MODEL], &c->model, err);
  if (rc == 0)
    rc = load_optimizer(L, sec_name, c, err);
  if (rc == 0)
    rc = load_data(L, sec_name, c, err);
  if (rc == 0)
    rc = load_layer_sections(L, err);
  return rc;
}

static void set_defaults(nto_config *c) {
  c->model.epochs = 1;
  c->model.loss = NTO_LOSS_CROSS;
  c->model.batch_size = 1;
  c->opt.kind = NTO_OPT_ADAM;
  c->opt.learning_rate = 1e-3;
  c->opt.beta1 = 0.9;
  c->opt.beta2 = 0.999;
  c->opt.epsilon = 1e-7;
  c->lr.kind = NTO_LR_CONSTANT;
}

/* A loader for the INI at path (kept by reference) into c. */
static void loader_init(loader *L, const char *path, nto_config *c) {
  memset(L, 0, sizeof *L);
  L->file = path;
  L->conf = c;
  const char *slash = strrchr(path, '/');
  size_t dlen = slash ? (size_t)(slash - path) + 1 : 0; /* with the '/' */
  if (dlen >= sizeof L->dir)
    dlen = sizeof L->dir - 1;
  memcpy(L->dir, path, dlen);
  L->dir[dlen] = '\0';
}

static void loader_free(loader *L) {
  free(L->keys);
  free(L->vals);
  free(L->sec_at);
  L->keys = L->vals = NULL;
  L->sec_at = NULL;
  free(L->ends);
  L->ends = NULL;
  if (L->d)
    iniparser_freedict(L->d);
  L->d = NULL;
}

/* Check that L->file is a regular text file and parse it into L->d. */
static int load_file(loader *L, nto_err *err) {
  const char *path = L->file;
  /* Opened without blocking and checked to be a regular file before the
   * readers below (each opens it by name): opening a FIFO for reading
   * waits for a writer, forever if none comes. */
  int fd = open(path, O_RDONLY | O_NONBLOCK | O_CLOEXEC);
  if (fd < 0)
    return nto_err_set(err, NTO_EIO, "%s: cannot open: %s", path,
                       strerror(errno));
  struct stat st;
  int st_ok = fstat(fd, &st) == 0;
  close(fd);
  if (st_ok && S_ISDIR(st.st_mode))
    return nto_err_set(err, NTO_EIO, "%s: cannot open: %s", path,
                       strerror(EISDIR));
  if (st_ok && !S_ISREG(st.st_mode))
    return nto_err_set(err, NTO_EIO, "%s: cannot open: not a regular file (%s)",
                       path,
                       S_ISFIFO(st.st_mode)   ? "a FIFO"
                       : S_ISSOCK(st.st_mode) ? "a socket"
                                              : "a device");

  int rc = check_text(path, err);
  if (rc == 0)
    rc = check_continued_comments(path, err);
  if (rc != 0)
    return rc;

  ini_msg[0] = '\0';
  ini_nmsg = 0;
  iniparser_set_error_callback(ini_capture);
  L->d = iniparser_load(path);
  iniparser_set_error_callback(NULL);

  if (ini_nmsg > 0)
    return ini_error(path, err);
  if (!L->d)
    return nto_err_set(err, NTO_ENOMEM, "%s: out of memory while parsing",
                       path);
  rc = scan_duplicates(path, err);
  return rc == 0 ? index_sections(L, err) : rc;
}

int nto_config_load(nto_config *c, const char *path, nto_err *err) {
  memset(c, 0, sizeof *c);
  nto_err_clear(err);
  if (copy_str(c->path, sizeof c->path, path) != 0)
    return nto_err_set(err, NTO_EINVAL, "%.64s...: path too long", path);
  set_defaults(c);

  loader L;
  loader_init(&L, path, c);
  int rc = load_file(&L, err);
  if (rc == 0)
    rc = load_dict(&L, c, err);
  loader_free(&L);
  if (rc != 0)
    nto_config_free(c);
  return rc;
}

void nto_config_free(nto_config *c) {
  if (!c)
    return;
  for (int i = 0; i < c->n_layers; i++)
    free(c->layers[i].kv);
  free(c->layers);
  c->layers = NULL;
  c->n_layers = c->layers_cap = 0;
  for (int i = 0; i < c->n_files; i++)
    free(c->files[i]);
  free(c->files);
  c->files = NULL;
  c->n_files = 0;
  for (int i = 0; i < c->n_warnings; i++)
    free(c->warnings[i]);
  free(c->warnings);
  c->warnings = NULL;
  c->n_warnings = 0;
}

const char *nto_section_file(const nto_config *c, const nto_section *s) {
  return s->file > 0 && s->file <= c->n_files ? c->files[s->file - 1] : c->path;
}

const char *nto_section_file_of(const nto_config *c, const char *name) {
  for (int i = 0; i < c->n_layers; i++)
    if (!strcmp(c->layers[i].name, name))
      return nto_section_file(c, &c->layers[i]);
  return c->path;
}

const char *nto_section_get(const nto_section *s, const char *key) {
  for (int i = 0; i < s->n_kv; i++)
    if (strcmp(s->kv[i].key, key) == 0)
      return s->kv[i].value;
  return NULL;
}
