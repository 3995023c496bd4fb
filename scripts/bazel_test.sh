#!/usr/bin/env bash
# Bazel build and tests (README, "Bazel"), offline: installs Debian's bazel-bootstrap if missing, then
# `bazel test //...` with the project's venv (.venv, created as in .ci/run) and the real data
# ($TFPRIV_DATA_DIR, else ../shared/data beside the repository). Extra arguments go to `bazel test`.
set -euo pipefail
cd "$(dirname "$0")/.."

if ! command -v bazel >/dev/null; then
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq
  apt-get install -y -qq --no-install-recommends bazel-bootstrap >/dev/null
fi
[[ -x .venv/bin/python3 ]] || { echo "error: .venv missing; create it as .ci/run does" >&2; exit 2; }

data="${TFPRIV_DATA_DIR:-$(cd .. && pwd)/shared/data}"
trap 'bazel shutdown' EXIT  # no JVM server left behind
bazel test --jobs=2 --test_env=TFPRIV_DATA_DIR="$data" "$@" //...
