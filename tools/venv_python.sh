#!/usr/bin/env bash
# Bazel's Python interpreter: the project's venv (.venv in the workspace root, as .ci/run creates
# it), found from this file's real location so a fresh clone needs no absolute path.
set -euo pipefail
root="$(dirname "$(dirname "$(readlink -f "${BASH_SOURCE[0]}")")")"
exec "$root/.venv/bin/python3" "$@"
