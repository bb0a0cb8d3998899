/* main.c - nntrainer-offload command line entry: dispatches subcommands. */
#include "cli.h"

#include <string.h>
#ifdef __GLIBC__
#include <malloc.h>
#endif

#ifndef NTO_VERSION
#define NTO_VERSION "unknown"
#endif

static const char usage[] =
    "usage: nntrainer-offload <command> [options]\n"
    "\n"
    "On-device training of CNNs from nntrainer INI model configs.\n"
    "\n"
    "commands:\n"
    "  train MODEL.ini    train a model and report loss, accuracy, iteration\n"
    "                     time and peak memory\n"
    "  evaluate MODEL.ini loss, accuracy, per-class accuracy and confusion\n"
    "                     matrix of saved weights on a test set\n"
    "  predict MODEL.ini  the most probable classes of images, with\n"
    "                     their probabilities\n"
    "  summary MODEL.ini  per-layer shapes, parameters and memory\n"
    "  bench MODEL.ini    compare offload windows: iteration time, memory,\n"
    "                     swap traffic, identical weights\n"
    "\n"
    "options:\n"
    "  --help, -h         this help (also: <command> --help)\n"
    "  --version          print the version\n"
    "\n"
    "exit status: 0 ok, 1 runtime failure, 2 usage or config error\n";

/*
 * Large allocations go to mmap and back to the kernel when freed. glibc
 * raises its mmap threshold after a large block is freed (up to 32 MiB),
 * and then the per-tensor buffers of weight initialization and saving
 * come from the heap, which keeps their pages: ResNet-18 b10 at window 1
 * peaked about 4 MiB higher with the dynamic threshold than with a fixed
 * 128 KiB one (glibc's default start value; setting it turns the
 * adjustment off).
 * Training steps allocate nothing, so iterations see no extra faults.
 */
static void fixed_mmap_threshold(void) {
#ifdef __GLIBC__
  mallopt(M_MMAP_THRESHOLD, 128 * 1024);
#endif
}

int main(int argc, char **argv) {
  fixed_mmap_threshold();
  if (argc < 2) {
    fputs(usage, stderr);
    return CLI_USAGE;
  }
  const char *cmd = argv[1];
  if (!strcmp(cmd, "--help") || !strcmp(cmd, "-h") || !strcmp(cmd, "help")) {
    fputs(usage, stdout);
    return CLI_OK;
  }
  if (!strcmp(cmd, "--version")) {
    printf("nntrainer-offload %s\n", NTO_VERSION);
    return CLI_OK;
  }
  if (!strcmp(cmd, "train"))
    return cmd_train(argc - 1, argv + 1);
  if (!strcmp(cmd, "evaluate"))
    return cmd_evaluate(argc - 1, argv + 1);
  if (!strcmp(cmd, "predict"))
    return cmd_predict(argc - 1, argv + 1);
  if (!strcmp(cmd, "summary"))
    return cmd_summary(argc - 1, argv + 1);
  if (!strcmp(cmd, "bench"))
    return cmd_bench(argc - 1, argv + 1);
  cli_error("unknown command '%s' (try --help)", cmd);
  return CLI_USAGE;
}
