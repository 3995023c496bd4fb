#!/usr/bin/env bash
# Issue #14 sparsity runs (reference settings): runs each "name|flags" line of $QUEUE in order,
# one at a time, into $OUT/<name>/; a finished run (results.json) is skipped, an interrupted one resumes.
# Run it with the project's venv active:
#   . .venv/bin/activate; Q=experiments/privae/privae14_queue
#   QUEUE=$Q.txt OUT=/work/runs/fidelity nohup nice -n 5 bash $Q.sh &
set -u
cd "$(dirname "$0")/../.."  # the repository root
QUEUE=${QUEUE:-experiments/privae/privae14_queue.txt}; OUT=${OUT:-/work/runs/fidelity}; DATA=${DATA:-/work/shared/data}
while IFS='|' read -r name args; do
  case "$name" in ''|\#*) continue;; esac
  dir="$OUT/$name"
  [ -f "$dir/results.json" ] && continue
  echo "== $(date -u +%FT%TZ) $dir: $args"
  # shellcheck disable=SC2086
  python train.py $args --data_dir="$DATA" --output_dir="$dir" --verbose=0 || echo "FAILED $dir"
done < "$QUEUE"
echo "== $(date -u +%FT%TZ) queue done"
