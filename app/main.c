/* main.c - nntrainer-offload command line entry: dispatches subcommands. */
#include "cli.h"

#include <string.h>

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
    "  summary MODEL.ini  per-layer shapes, parameters and memory\n"
    "  bench MODEL.ini    compare offload windows: iteration time, memory,\n"
    "                     swap traffic, identical weights\n"
    "\n"
    "options:\n"
    "  --help, -h         this help (also: <command> --help)\n"
    "  --version          print the version\n"
    "\n"
    "exit status: 0 ok, 1 runtime failure, 2 usage or config error\n";

int main(int argc, char **argv) {
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
  if (!strcmp(cmd, "summary"))
    return cmd_summary(argc - 1, argv + 1);
  if (!strcmp(cmd, "bench"))
    return cmd_bench(argc - 1, argv + 1);
  cli_error("unknown command '%s' (try --help)", cmd);
  return CLI_USAGE;
}
