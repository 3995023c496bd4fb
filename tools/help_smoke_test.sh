#!/usr/bin/env bash
# Smoke test of the Bazel-built //:train binary: `--help` exits 0 and documents a core flag.
set -euo pipefail
out="$("$1" --help)"
grep -q -- "--aggregation" <<<"$out" || { echo "train --help does not document --aggregation" >&2; exit 1; }
