/*
 * image.c - an image file as a model input sample (image.h), through
 * Debian's libstb (stb_image, compiled into libstb.so) and a bilinear
 * resize of our own (resize_bilinear says why).
 */
#include "image.h"

#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <stb_image.h>

int nto_image_norm_parse(const char *s, int channels, nto_image_norm *n,
                         nto_err *err) {
  static const float im_mean[3] = {0.485f, 0.456f, 0.406f};
  static const float im_std[3] = {0.229f, 0.224f, 0.225f};
  memset(n, 0, sizeof *n);
  if (channels < 1 || channels > 4)
    return nto_err_set(err, NTO_ECONFIG,
                       "--normalize: the model's input has %d channels "
                       "(1 to 4 supported)",
                       channels);
  n->n = channels;
  if (!strcmp(s, "imagenet")) {
    for (int c = 0; c < channels; c++) {
      n->mean[c] = im_mean[c < 3 ? c : 0];
      n->std[c] = im_std[c < 3 ? c : 0];
    }
    return 0;
  }
  float v[2][4];
  int got[2] = {0, 0};
  const char *p = s;
  for (int part = 0; part < 2; part++) {
    for (;;) {
      char *end;
      float f = strtof(p, &end);
      if (end == p || got[part] == 4)
        break;
      v[part][got[part]++] = f;
      p = end;
      if (*p != ',')
        break;
      p++;
    }
    if (part == 1)
      break;
    if (*p != '/') { /* no STD part */
      got[0] = 0;
      break;
    }
    p++;
  }
  int ok =
      *p == '\0' && got[0] == got[1] && (got[0] == channels || got[0] == 1);
  for (int i = 0; ok && i < got[1]; i++)
    ok = isfinite(v[0][i]) && isfinite(v[1][i]) && v[1][i] > 0;
  if (!ok)
    return nto_err_set(err, NTO_ECONFIG,
                       "--normalize %s: expected 'imagenet' or MEAN/STD with "
                       "1 or %d comma-separated values each, STD > 0 (e.g. "
                       "0.5,0.5,0.5/0.25,0.25,0.25)",
                       s, channels);
  for (int c = 0; c < channels; c++) {
    n->mean[c] = v[0][got[0] == 1 ? 0 : c];
    n->std[c] = v[1][got[1] == 1 ? 0 : c];
  }
  return 0;
}

/* path opened for reading if it is a regular file: 0, or NTO_EIO /
 * NTO_EDATA naming it. Opened without blocking first, so that a FIFO
 * (which would block until a writer comes) or a device is refused. */
static int check_file(const char *path, FILE **f, nto_err *err) {
  struct stat st;
  *f = NULL;
  int fd = open(path, O_RDONLY | O_NONBLOCK | O_CLOEXEC);
  if (fd < 0)
    return nto_err_set(err, NTO_EIO, "%s: cannot open: %s", path,
                       strerror(errno));
  if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
    close(fd);
    return nto_err_set(err, NTO_EDATA, "%s: not a regular file", path);
  }
  fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) & ~O_NONBLOCK);
  if (!(*f = fdopen(fd, "rb"))) {
    close(fd);
    return nto_err_set(err, NTO_ENOMEM, "%s: cannot open: out of memory", path);
  }
  return 0;
}

/* The header of an open image: 0, or NTO_EDATA naming path. */
static int check_header(FILE *f, const char *path, int *w, int *h,
                        nto_err *err) {
  int c;
  if (!stbi_info_from_file(f, w, h, &c))
    return nto_err_set(err, NTO_EDATA,
                       "%s: not an image stb_image reads "
                       "(PNG, JPEG, BMP, GIF, TGA, PNM): %s",
                       path, stbi_failure_reason());
  if (*w < 1 || *h < 1 ||
      (unsigned long long)*w * (unsigned long long)*h > NTO_IMAGE_MAX_PIXELS)
    return nto_err_set(err, NTO_EDATA, "%s: %dx%d pixels (at most %u decoded)",
                       path, *w, *h, NTO_IMAGE_MAX_PIXELS);
  return 0;
}

int nto_image_check(const char *path, nto_err *err) {
  FILE *f;
  int w, h, rc = check_file(path, &f, err);
  if (rc == 0) {
    rc = check_header(f, path, &w, &h, err);
    fclose(f);
  }
  return rc;
}

/* Source coordinate of output pixel i of n1 over an input of n0 pixels,
 * with half-pixel centres, clamped below at 0: PyTorch's
 * area_pixel_compute_source_index (align_corners false), as
 * torch.nn.functional.interpolate(mode="bilinear") computes it. */
static float source_index(int i, int n0, int n1) {
  float src = ((float)n0 / (float)n1) * ((float)i + 0.5f) - 0.5f;
  return src < 0 ? 0 : src;
}

/*
 * Bilinear resize of interleaved (h0, w0, c) floats to (h1, w1, c), as
 * torch.nn.functional.interpolate(mode="bilinear", align_corners=False,
 * antialias=False): each output pixel interpolates the two nearest input
 * rows and columns (edges clamped). Not stb_image_resize: the version in
 * Debian 12 aborts on an assertion (stbir__normalize_downsample_
 * coefficients) for some shrink ratios, e.g. 20 to 16 pixels.
 */
static void resize_bilinear(const float *in, int w0, int h0, int c, float *out,
                            int w1, int h1) {
  for (int y = 0; y < h1; y++) {
    float sy = source_index(y, h0, h1);
    int y0 = (int)sy, y1 = y0 + (y0 < h0 - 1);
    float ly = sy - (float)y0;
    for (int x = 0; x < w1; x++) {
      float sx = source_index(x, w0, w1);
      int x0 = (int)sx, x1 = x0 + (x0 < w0 - 1);
      float lx = sx - (float)x0;
      const float *a = in + ((size_t)y0 * w0 + x0) * c,
                  *b = in + ((size_t)y0 * w0 + x1) * c,
                  *d = in + ((size_t)y1 * w0 + x0) * c,
                  *e = in + ((size_t)y1 * w0 + x1) * c;
      float *o = out + ((size_t)y * w1 + x) * c;
      for (int k = 0; k < c; k++)
        o[k] = (1 - ly) * ((1 - lx) * a[k] + lx * b[k]) +
               ly * ((1 - lx) * d[k] + lx * e[k]);
    }
  }
}

/* Interleaved (h, w, c) floats in [0, 1] into CHW, normalized. */
static void to_chw(const float *src, nto_shape s, const nto_image_norm *norm,
                   float *x) {
  size_t plane = (size_t)s.h * s.w;
  for (int c = 0; c < s.c; c++) {
    float m = norm && norm->n ? norm->mean[c] : 0.0f;
    float sd = norm && norm->n ? norm->std[c] : 1.0f;
    for (size_t i = 0; i < plane; i++)
      x[(size_t)c * plane + i] = (src[i * s.c + c] - m) / sd;
  }
}

int nto_image_load(const char *path, nto_shape sample,
                   const nto_image_norm *norm, float *x, nto_err *err) {
  if (sample.c != 1 && sample.c != 3 && sample.c != 4)
    return nto_err_set(err, NTO_EINVAL,
                       "%s: images decode to 1, 3 or 4 channels, the model's "
                       "input has %d",
                       path, sample.c);
  FILE *f;
  int w, h, comp, rc = check_file(path, &f, err);
  if (rc == 0)
    rc = check_header(f, path, &w, &h, err);
  unsigned char *px = NULL;
  if (rc == 0 && !(px = stbi_load_from_file(f, &w, &h, &comp, sample.c)))
    rc = nto_err_set(err, NTO_EDATA, "%s: cannot decode: %s", path,
                     stbi_failure_reason());
  if (f)
    fclose(f);
  if (rc != 0)
    return rc;
  size_t n0 = (size_t)w * h * sample.c;
  size_t n1 = (size_t)sample.h * sample.w * sample.c;
  float *in = malloc(n0 * sizeof *in), *out = malloc(n1 * sizeof *out);
  if (!in || !out) {
    rc = nto_err_set(err, NTO_ENOMEM, "%s: out of memory for %dx%d pixels",
                     path, w, h);
  } else {
    for (size_t i = 0; i < n0; i++)
      in[i] = px[i] / 255.0f;
    resize_bilinear(in, w, h, sample.c, out, sample.w, sample.h);
    to_chw(out, sample, norm, x);
  }
  free(in);
  free(out);
  stbi_image_free(px);
  return rc;
}

void nto_image_describe(nto_shape sample, const nto_image_norm *norm, char *buf,
                        size_t len) {
  int at = snprintf(buf, len,
                    "decoded to %d channel%s, resized to %dx%d (bilinear), "
                    "scaled to [0, 1]",
                    sample.c, sample.c > 1 ? "s" : "", sample.h, sample.w);
  if (!norm || !norm->n || at < 0 || (size_t)at >= len)
    return;
  at += snprintf(buf + at, len - (size_t)at, ", normalized by mean ");
  for (int c = 0; c < norm->n && (size_t)at < len; c++)
    at += snprintf(buf + at, len - (size_t)at, "%s%g", c ? "," : "",
                   (double)norm->mean[c]);
  if ((size_t)at < len)
    at += snprintf(buf + at, len - (size_t)at, " std ");
  for (int c = 0; c < norm->n && (size_t)at < len; c++)
    at += snprintf(buf + at, len - (size_t)at, "%s%g", c ? "," : "",
                   (double)norm->std[c]);
}
