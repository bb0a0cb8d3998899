/*
 * imagedir.c - a folder of images as a dataset (dataset.h
 * nto_dataset_open_image_dir): one subfolder per class, decoded with
 * stb_image when a sample is drawn (io/image.h). Random access: a
 * shuffle-buffer slot holds the sample's index.
 */
#include "dataset-impl.h"

#include "image.h"

#include <dirent.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>

#define PATH_BUF 4096 /* bytes of a path */

typedef struct img_src {
  char **path; /* (count) image files, by class then name */
  size_t count;
  int32_t *label; /* (count) */
  char **names;   /* (n_classes) class folder names, sorted */
  int n_classes;
  nto_image_norm norm;
  size_t skipped;       /* unreadable files skipped (skip_bad) */
  size_t ignored;       /* files and folders that are not images */
  char empty[96];       /* classes with no image in this split, "" if none */
  char where[PATH_BUF]; /* the folder the classes are in */
} img_src;

/* A growing list of strings. */
typedef struct strlist {
  char **s;
  size_t n, cap;
} strlist;

static int strlist_add(strlist *l, const char *a, const char *b) {
  if (l->n == l->cap) {
    size_t cap = l->cap ? 2 * l->cap : 64;
    char **s = realloc(l->s, cap * sizeof *s);
    if (!s)
      return -1;
    l->s = s;
    l->cap = cap;
  }
  size_t na = strlen(a), nb = b ? strlen(b) : 0;
  char *p = malloc(na + nb + 2);
  if (!p)
    return -1;
  memcpy(p, a, na);
  if (b) {
    p[na] = '/';
    memcpy(p + na + 1, b, nb + 1);
  } else {
    p[na] = '\0';
  }
  l->s[l->n++] = p;
  return 0;
}

static void strlist_free(strlist *l) {
  for (size_t i = 0; i < l->n; i++)
    free(l->s[i]);
  free(l->s);
  memset(l, 0, sizeof *l);
}

static int cmp_str(const void *a, const void *b) {
  return strcmp(*(char *const *)a, *(char *const *)b);
}

/* An image by its name's extension (what stb_image decodes). */
static int image_name(const char *name) {
  static const char *const ext[] = {"png", "jpg", "jpeg", "bmp", "gif",
                                    "tga", "pnm", "ppm",  "pgm"};
  const char *dot = strrchr(name, '.');
  if (!dot || name[0] == '.')
    return 0;
  for (size_t i = 0; i < sizeof ext / sizeof *ext; i++)
    if (!strcasecmp(dot + 1, ext[i]))
      return 1;
  return 0;
}

/* a/b into buf (PATH_BUF bytes); 0, or NTO_EINVAL naming a when too
 * long. */
static int join(char *buf, const char *a, const char *b, nto_err *err) {
  int n = snprintf(buf, PATH_BUF, "%s/%s", a, b);
  return n < 0 || n >= PATH_BUF
             ? nto_err_set(err, NTO_EINVAL, "%s/%s: path too long", a, b)
             : 0;
}

static int is_dir(const char *path) {
  struct stat st;
  return stat(path, &st) == 0 && S_ISDIR(st.st_mode);
}

/* Names in dir (sorted) that are folders (dirs 1) or image files (dirs
 * 0); the others counted in *ignored. */
static int list_dir(const char *dir, int dirs, strlist *out, size_t *ignored,
                    nto_err *err) {
  DIR *d = opendir(dir);
  if (!d)
    return nto_err_set(err, NTO_EIO, "%s: cannot open the folder", dir);
  struct dirent *e;
  int rc = 0;
  while (rc == 0 && (e = readdir(d))) {
    if (!strcmp(e->d_name, ".") || !strcmp(e->d_name, ".."))
      continue;
    char path[PATH_BUF];
    struct stat st;
    if ((rc = join(path, dir, e->d_name, err)) != 0)
      break;
    int ok = e->d_name[0] != '.' && stat(path, &st) == 0 &&
             (dirs ? S_ISDIR(st.st_mode)
                   : S_ISREG(st.st_mode) && image_name(e->d_name));
    if (!ok) {
      (*ignored)++;
      continue;
    }
    if (strlist_add(out, e->d_name, NULL) != 0)
      rc = nto_err_set(err, NTO_ENOMEM, "dataset: out of memory");
  }
  closedir(d);
  if (rc == 0 && out->n > 1) /* qsort takes no NULL array */
    qsort(out->s, out->n, sizeof *out->s, cmp_str);
  return rc;
}

/* Is image j of a class held out for the test split? Evenly spaced:
 * floor(n * fraction) of a class's n images. */
static int held_out(size_t j, double fraction) {
  return (size_t)((double)(j + 1) * fraction) > (size_t)((double)j * fraction);
}

/* The class folders of s->where and their images for the split into
 * paths / labels. */
static int list_images(img_src *s, const nto_image_dir_opts *o, int split_test,
                       strlist *paths, int32_t **labels, nto_err *err) {
  strlist cls = {0};
  size_t cap = 0;
  int rc = list_dir(s->where, 1, &cls, &s->ignored, err);
  if (rc == 0 && cls.n == 0)
    rc = nto_err_set(err, NTO_EDATA,
                     "%s: no class folders (expected one "
                     "folder of images per class)",
                     s->where);
  for (size_t c = 0; rc == 0 && c < cls.n; c++) {
    char dir[PATH_BUF];
    strlist files = {0};
    rc = join(dir, s->where, cls.s[c], err);
    if (rc == 0)
      rc = list_dir(dir, 0, &files, &s->ignored, err);
    size_t kept = 0;
    for (size_t j = 0; rc == 0 && j < files.n; j++) {
      if (o->valid_split > 0 && held_out(j, o->valid_split) != split_test)
        continue;
      char path[PATH_BUF];
      if ((rc = join(path, dir, files.s[j], err)) != 0)
        break;
      nto_err e2 = {0};
      int bad = nto_image_check(path, &e2);
      if (bad && !o->skip_bad) {
        rc = nto_err_set(err, bad, "%s", e2.msg);
        break;
      }
      if (bad) {
        s->skipped++;
        continue;
      }
      if (paths->n == cap) {
        cap = cap ? 2 * cap : 256;
        int32_t *l = realloc(*labels, cap * sizeof *l);
        if (!l) {
          rc = nto_err_set(err, NTO_ENOMEM, "dataset: out of memory");
          break;
        }
        *labels = l;
      }
      if (strlist_add(paths, dir, files.s[j]) != 0) {
        rc = nto_err_set(err, NTO_ENOMEM, "dataset: out of memory");
        break;
      }
      (*labels)[paths->n - 1] = (int32_t)c;
      kept++;
    }
    if (rc == 0 && kept == 0) {
      size_t at = strlen(s->empty);
      if (at + strlen(cls.s[c]) + 8 < sizeof s->empty)
        snprintf(s->empty + at, sizeof s->empty - at, "%s%s", at ? ", " : "",
                 cls.s[c]);
    }
    strlist_free(&files);
  }
  if (rc == 0) {
    s->names = cls.s;
    s->n_classes = (int)cls.n;
  } else {
    strlist_free(&cls);
  }
  return rc;
}

static int img_sample(const nto_dataset *ds, uint64_t i, float *x, float *y,
                      nto_err *err) {
  const img_src *s = ds->src;
  int rc = nto_image_load(s->path[i], ds->sample, &s->norm, x, err);
  memset(y, 0, (size_t)ds->num_classes * sizeof *y);
  y[s->label[i]] = 1.0f;
  return rc;
}

static int img_labels(nto_dataset *ds, int32_t *out, nto_err *err) {
  (void)err;
  const img_src *s = ds->src;
  memcpy(out, s->label, ds->count * sizeof *out);
  return 0;
}

static const char *img_class_name(const nto_dataset *ds, int c) {
  const img_src *s = ds->src;
  return c >= 0 && c < s->n_classes ? s->names[c] : NULL;
}

static void img_describe(const nto_dataset *ds, const char *count, char *buf,
                         size_t len) {
  const img_src *s = ds->src;
  char how[256], names[160] = "", extra[200] = "";
  nto_image_describe(ds->sample, &s->norm, how, sizeof how);
  size_t at = 0;
  for (int c = 0; c < s->n_classes && at + 8 < sizeof names; c++) {
    int n = snprintf(names + at, sizeof names - at, "%s%s", c ? ", " : "",
                     s->names[c]);
    at =
        n < 0 || at + (size_t)n >= sizeof names ? sizeof names : at + (size_t)n;
  }
  if (at >= sizeof names)
    snprintf(names + sizeof names - 5, 5, "...");
  at = 0;
  if (s->empty[0])
    at += (size_t)snprintf(extra, sizeof extra, "; no images of %s", s->empty);
  if (s->skipped && at < sizeof extra)
    at += (size_t)snprintf(extra + at, sizeof extra - at,
                           "; %zu unreadable files skipped", s->skipped);
  if (s->ignored && at < sizeof extra)
    snprintf(extra + at, sizeof extra - at,
             "; %zu other files and folders ignored", s->ignored);
  snprintf(buf, len, "images %s: %s, %d classes (%s), %s%s", s->where, count,
           s->n_classes, names, how, extra);
}

static void img_close(void *src) {
  img_src *s = src;
  if (!s)
    return;
  for (size_t i = 0; i < s->count; i++)
    free(s->path[i]);
  free(s->path);
  for (int c = 0; c < s->n_classes; c++)
    free(s->names[c]);
  free(s->names);
  free(s->label);
  free(s);
}

/* FNV-1a over the files' paths and labels: a checkpoint's data position
 * names this exact list (dataset.c source_id). */
static uint64_t paths_hash(const img_src *s) {
  uint64_t h = 0xcbf29ce484222325ull;
  for (size_t i = 0; i < s->count; i++) {
    for (const char *p = s->path[i]; *p; p++)
      h = (h ^ (unsigned char)*p) * 0x100000001b3ull;
    h = (h ^ (uint64_t)s->label[i]) * 0x100000001b3ull;
  }
  return h;
}

const nto_dataset_ops nto_dataset_image_dir_ops = {
    .kind = 3,
    .sample = img_sample,
    .labels = img_labels,
    .class_name = img_class_name,
    .describe = img_describe,
    .close = img_close,
};

/* Where the split's class folders are: DIR/<split> when DIR has train/ and
 * test/ folders, else DIR itself (the split then by valid_split). *none:
 * there is no such split. */
static int split_dir(img_src *s, const char *dir, const nto_image_dir_opts *o,
                     int *test, int *none, nto_err *err) {
  char t[PATH_BUF], v[PATH_BUF];
  *test = o->split && !strcmp(o->split, "test");
  *none = 0;
  int rc = join(t, dir, "train", err);
  if (rc == 0)
    rc = join(v, dir, "test", err);
  if (rc != 0 || strlen(dir) + 6 >= sizeof s->where)
    return rc ? rc : nto_err_set(err, NTO_EINVAL, "%s: path too long", dir);
  struct stat st;
  if (stat(dir, &st) != 0)
    return nto_err_set(err, NTO_EIO, "%s: cannot open: %s", dir,
                       strerror(errno));
  if (!S_ISDIR(st.st_mode))
    return nto_err_set(err, NTO_EIO, "%s: not a folder", dir);
  if (is_dir(t) && is_dir(v)) {
    if (o->valid_split > 0)
      return nto_err_set(err, NTO_ECONFIG,
                         "%s has train/ and test/ folders: a valid split "
                         "applies to a folder of class folders only",
                         dir);
    snprintf(s->where, sizeof s->where, "%s/%s", dir, *test ? "test" : "train");
    return 0;
  }
  snprintf(s->where, sizeof s->where, "%s", dir);
  *none = *test && o->valid_split <= 0;
  return 0;
}

int nto_dataset_open_image_dir(nto_dataset **out, const char *dir,
                               const nto_image_dir_opts *o, nto_shape sample,
                               int num_classes, nto_err *err) {
  *out = NULL;
  if (o->valid_split < 0 || o->valid_split >= 1)
    return nto_err_set(err, NTO_EINVAL,
                       "valid split %g: expected a fraction in [0, 1)",
                       o->valid_split);
  img_src *s = calloc(1, sizeof *s);
  strlist paths = {0};
  int test = 0, none = 0;
  int rc = s ? split_dir(s, dir, o, &test, &none, err)
             : nto_err_set(err, NTO_ENOMEM, "dataset: out of memory");
  if (rc == 0 && none) {
    img_close(s);
    return 0;
  }
  if (rc == 0) {
    s->norm = o->norm;
    rc = list_images(s, o, test, &paths, &s->label, err);
  }
  if (rc == 0 && paths.n == 0)
    rc = nto_err_set(err, NTO_EDATA,
                     "%s: no images (PNG, JPEG, BMP, GIF, "
                     "TGA, PNM) in its class folders",
                     s->where);
  if (rc == 0 && num_classes && num_classes != s->n_classes)
    rc = nto_err_set(err, NTO_ECONFIG,
                     "%s: %d class folders, but the model's output has %d "
                     "values: set the output layer's unit to %d",
                     s->where, s->n_classes, num_classes, s->n_classes);
  if (rc != 0) {
    strlist_free(&paths);
    img_close(s);
    return rc;
  }
  s->path = paths.s;
  s->count = paths.n;
  rc = nto_dataset_new(out, &nto_dataset_image_dir_ops, sample, s->n_classes,
                       err);
  if (rc != 0) {
    img_close(s);
    return rc;
  }
  (*out)->src = s;
  (*out)->count = s->count;
  (*out)->id[0] = paths_hash(s);
  return nto_dataset_finish(out, 0, err);
}
