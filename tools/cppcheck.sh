#!/bin/sh
# Static analysis with cppcheck at its default level (no --enable): every
# C file of app/, io/, layers/, nntrainer-offload/ and test/, all
# preprocessor configurations. Known false positives are suppressed, each
# with its reason, in tools/cppcheck-suppressions.xml (and inline with
# "// cppcheck-suppress id" comments). Exit status: 0 clean, 1 findings,
# 77 cppcheck missing (sh tools/setup.sh --ci installs it).
set -u
cd "$(dirname "$0")/.." || exit 1
if ! command -v cppcheck >/dev/null 2>&1; then
  echo "cppcheck: skipped: cppcheck is not installed (sh tools/setup.sh --ci)"
  exit 77
fi
# -j: cppcheck's own jobs; NTO_JOBS=J limits them like tools/test.sh.
if cppcheck --quiet --error-exitcode=1 --inline-suppr \
     --suppress-xml=tools/cppcheck-suppressions.xml \
     -j "${NTO_JOBS:-2}" --std=c11 \
     -I nntrainer-offload -I io -I layers -I test \
     app bench io layers nntrainer-offload test; then
  echo "cppcheck: clean ($(cppcheck --version))"
else
  echo "cppcheck: findings above" >&2
  exit 1
fi
