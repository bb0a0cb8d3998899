/*
 * make_images.c - writes a small image-folder dataset for the CLI tests
 * (test/cli/test_images.sh), with stb_image_write (Debian's libstb):
 *
 *   DIR/train/<class>/NNN.{png,jpg,bmp}  and  DIR/test/<class>/...
 *
 * Three classes a small CNN can tell apart: "hstripes" (horizontal
 * stripes), "vstripes" (vertical stripes) and "spots" (a bright square on
 * a dark background), each at a random phase, colour and size, with noise;
 * every third image grey, formats in turn PNG, JPEG, BMP.
 *
 * usage: make_images DIR TRAIN_PER_CLASS TEST_PER_CLASS
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include <stb_image_write.h>

static unsigned long long rng = 88172645463325252ull;

static unsigned next(void) { /* xorshift64 */
  rng ^= rng << 13;
  rng ^= rng >> 7;
  rng ^= rng << 17;
  return (unsigned)(rng >> 32);
}

/* Image i of class c, w x h, ch channels, into p. */
static void draw(unsigned char *p, int c, int w, int h, int ch) {
  int period = 3 + (int)(next() % 4), phase = (int)(next() % 8);
  int sx = (int)(next() % (unsigned)(w / 2)), sy = (int)(next() % (unsigned)(h / 2));
  int side = w / 4 + (int)(next() % (unsigned)(w / 4));
  unsigned char col[3] = {(unsigned char)(128 + next() % 128),
                          (unsigned char)(128 + next() % 128),
                          (unsigned char)(128 + next() % 128)};
  for (int y = 0; y < h; y++)
    for (int x = 0; x < w; x++) {
      int on = c == 0   ? (y + phase) % period < period / 2
               : c == 1 ? (x + phase) % period < period / 2
                        : x >= sx && x < sx + side && y >= sy && y < sy + side;
      for (int k = 0; k < ch; k++) {
        int v = (on ? col[k] : 30) + (int)(next() % 41) - 20;
        p[(y * w + x) * ch + k] = (unsigned char)(v < 0 ? 0 : v > 255 ? 255 : v);
      }
    }
}

static int write_split(const char *dir, const char *split, int n) {
  static const char *const cls[] = {"hstripes", "vstripes", "spots"};
  static const char *const ext[] = {"png", "jpg", "bmp"};
  char path[4096];
  snprintf(path, sizeof path, "%s/%s", dir, split);
  mkdir(path, 0755);
  for (int c = 0; c < 3; c++) {
    snprintf(path, sizeof path, "%s/%s/%s", dir, split, cls[c]);
    mkdir(path, 0755);
    for (int i = 0; i < n; i++) {
      int w = 20 + (int)(next() % 13), h = 20 + (int)(next() % 13);
      int ch = i % 3 == 2 ? 1 : 3, ok;
      unsigned char *p = malloc((size_t)w * h * ch);
      if (!p)
        return 1;
      draw(p, c, w, h, ch);
      snprintf(path, sizeof path, "%s/%s/%s/%03d.%s", dir, split, cls[c], i,
               ext[i % 3]);
      ok = i % 3 == 0   ? stbi_write_png(path, w, h, ch, p, w * ch)
           : i % 3 == 1 ? stbi_write_jpg(path, w, h, ch, p, 90)
                        : stbi_write_bmp(path, w, h, ch, p);
      free(p);
      if (!ok) {
        fprintf(stderr, "make_images: cannot write %s\n", path);
        return 1;
      }
    }
  }
  return 0;
}

int main(int argc, char **argv) {
  if (argc != 4) {
    fprintf(stderr, "usage: make_images DIR TRAIN_PER_CLASS TEST_PER_CLASS\n");
    return 2;
  }
  mkdir(argv[1], 0755);
  return write_split(argv[1], "train", atoi(argv[2])) ||
         write_split(argv[1], "test", atoi(argv[3]));
}
