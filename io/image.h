/*
 * image.h - one image file as a model input sample: decoded with
 * stb_image (Debian's libstb: PNG, JPEG, BMP, GIF, TGA, PNM), its channels
 * converted to the model's, resized (bilinear), scaled and normalized. Used by the image-folder dataset (io/imagedir.c) and
 * `predict`.
 *
 * Threads: any thread, one call at a time (stb_image keeps its failure
 * reason in a global).
 */
#ifndef NTO_IMAGE_H
#define NTO_IMAGE_H

#include "error.h"
#include "tensor.h"

/* Largest image decoded (width x height): 64 megapixels, 192 MiB as RGB
 * bytes. Larger files are refused from their header. */
#define NTO_IMAGE_MAX_PIXELS (64u << 20)

/* Per-channel normalization after scaling to [0, 1]: x = (x - mean) / std.
 * n = 0: none. */
typedef struct nto_image_norm {
  int n;        /* 0, or the model's channels */
  float mean[4];
  float std[4]; /* > 0 */
} nto_image_norm;

/*
 * Parse "imagenet" (torchvision's mean 0.485,0.456,0.406 and std
 * 0.229,0.224,0.225; its first value for 1 channel) or "M1,..,Mc/S1,..,Sc"
 * with c values each (1 to 4; c = channels, or 1 for all of them) into
 * *n for a model of `channels` channels. Returns 0, or NTO_ECONFIG with a
 * message naming the value.
 */
int nto_image_norm_parse(const char *s, int channels, nto_image_norm *n,
                         nto_err *err);

/* Header check without decoding: 0 when stb_image reads path's header as
 * an image within NTO_IMAGE_MAX_PIXELS, else NTO_EIO (cannot open) or
 * NTO_EDATA naming the file and the reason. */
int nto_image_check(const char *path, nto_err *err);

/*
 * Decode path into x (sample.c * sample.h * sample.w floats, CHW):
 * channels converted to sample.c by stb_image (1: grey, by luminance;
 * 3: RGB, a grey image replicated; 4: RGBA; alpha dropped below 4),
 * resized to sample.h x sample.w by bilinear interpolation as
 * torch.nn.functional.interpolate(mode="bilinear", align_corners=False)
 * (image.c resize_bilinear), scaled to [0, 1], then normalized by
 * norm (NULL or n = 0: not). sample.c must be 1, 3 or 4.
 * Returns 0; NTO_EIO (cannot open: names the file and errno's text),
 * NTO_EDATA (not an image, corrupt, or above NTO_IMAGE_MAX_PIXELS: names
 * the file and the reason), NTO_EINVAL (channels), NTO_ENOMEM.
 */
int nto_image_load(const char *path, nto_shape sample,
                   const nto_image_norm *norm, float *x, nto_err *err);

/* The adaptation to sample into buf, e.g. "decoded to 3 channels,
 * resized to 224x224 (bilinear), scaled to [0, 1], normalized by
 * mean 0.485,0.456,0.406 std 0.229,0.224,0.225". */
void nto_image_describe(nto_shape sample, const nto_image_norm *norm,
                        char *buf, size_t len);

#endif
