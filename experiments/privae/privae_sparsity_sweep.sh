#!/usr/bin/env bash
# Fashion-MNIST sparsity sweep (term-wise paper, Fig. 1). Runs every flag file at each epsilon
# and seed; results land in $OUT/<config>-eps<e>-seed<s>/results.json.
#   EPOCHS=10 SEEDS="0 1" EPSILONS="1 3 10" OUT=runs/fmnist bash experiments/privae/privae_sparsity_sweep.sh
set -u
cd "$(dirname "$0")/../.."  # the repository root
EPOCHS=${EPOCHS:-10}; SEEDS=${SEEDS:-"0 1"}; EPSILONS=${EPSILONS:-"1 3 10"}
OUT=${OUT:-runs/fmnist}; DATA=${DATA:-../shared/data}; CONFIGS=${CONFIGS:-"privae privae_mmd micro_mmd batch_mmd vae vae_mmd"}
EXTRA=${EXTRA:-}
for seed in $SEEDS; do
  for cfg in $CONFIGS; do
    case $cfg in vae|vae_mmd) eps_list="inf";; *) eps_list=$EPSILONS;; esac
    for eps in $eps_list; do
      dir="$OUT/$cfg-eps$eps-seed$seed"
      [ -f "$dir/results.json" ] && continue
      eps_flag=""; [ "$eps" != inf ] && eps_flag="--epsilon=$eps"
      echo "== $dir"
      python train.py --flagfile=flags/privae_fmnist_$cfg.cfg --data_dir="$DATA" --epochs="$EPOCHS" \
        --seed="$seed" $eps_flag --output_dir="$dir" --verbose=0 $EXTRA || echo "FAILED $dir"
    done
  done
done
