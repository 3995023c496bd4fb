#!/usr/bin/env bash
# Packaging check (.ci/run): `pip wheel .` builds tfpriv's wheel; it installs into a fresh venv with
# the pinned stack (requirements.txt, or the file given as $1), and from a directory outside the clone
# the `tfpriv` console script trains one epoch on the bundled MNIST (no --data_dir, no
# TFPRIV_DATA_DIR) and writes results.json. Run with the venv of .ci/run active (its python builds).
set -euo pipefail
cd "$(dirname "$0")/.."
requirements="$(pwd)/${1:-requirements.txt}"
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT

python -m pip wheel -q --no-deps -w "$work/dist" .
python -m venv "$work/venv"
"$work/venv/bin/pip" install -q -r "$requirements" "$work"/dist/tfpriv-*.whl
cd "$work"
env -u TFPRIV_DATA_DIR -u PYTHONPATH "$work/venv/bin/tfpriv" --model=privae --dataset=mnist --architecture=mlp \
  --epochs=1 --batch_size=2000 --eval_examples=50 --eval_importance_samples=5 --verbose=0 --output_dir="$work/run"
"$work/venv/bin/python" - "$work/run/results.json" <<'PY'
import json, sys
import tfpriv
results = json.load(open(sys.argv[1]))
assert "site-packages" in tfpriv.__file__, tfpriv.__file__
print(f"wheel check: tfpriv {tfpriv.__version__} from {tfpriv.__file__}, epsilon {results['epsilon']:.3f}")
PY
