#!/usr/bin/env bash
# The API reference (.ci/run): pdoc renders the public API (scripts/api_docs.py) into OUT_DIR, or a
# temporary folder that is removed afterwards; any warning fails. Needs requirements-docs.txt.
set -euo pipefail
cd "$(dirname "$0")/.."
if [ $# -ge 1 ]; then
  out="$1"
else
  out="$(mktemp -d)"
  trap 'rm -rf "$out"' EXIT
fi
PYTHONPATH="$(pwd)${PYTHONPATH:+:$PYTHONPATH}" TF_CPP_MIN_LOG_LEVEL=2 python scripts/api_docs.py "$out"
