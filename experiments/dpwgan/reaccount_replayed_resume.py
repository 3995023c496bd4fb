"""Re-accounts a run that was resumed with `--seed` before batches were derived from (seed, step).

Such a resume rebuilt the Poisson sampler from the seed, so the k-th step after the restart used
the same batch as the k-th step of the run (noise was fresh: its RNG was checkpointed). Model of
the audit (issue "privacy leaks"): each replayed pair of steps is one Poisson-sampled Gaussian
with noise multiplier z/sqrt(2) (two releases of the same subsample, each of sensitivity C), the
other steps are ordinary. Prints and writes JSON with epsilon for the resume point read from the
run's progress.json (the last segment's train_seconds), and for every epoch boundary.

  A="python experiments/tools/aggregate.py show experiments/dpwgan/runs.jsonl"
  $A main_c32_b256_z05_ema_results record > results.json; $A main_ema_progress record > progress.json
  python experiments/dpwgan/reaccount_replayed_resume.py results.json progress.json reaccounting.json
(its committed output is the line main_ema_reaccounting of experiments/dpwgan/runs.jsonl)
"""
import json
import math
import sys

from tfpriv.privacy.accounting import RDP


def replayed_epsilon(q: float, z: float, total: int, resume_step: int, delta: float) -> float:
    pairs = min(resume_step, total - resume_step)
    return RDP.epsilon([(q, z / math.sqrt(2.0), pairs), (q, z, total - 2 * pairs)], delta)


def main(results_path: str, progress_path: str, out_path: str) -> None:
    with open(results_path) as f:
        results = json.load(f)
    with open(progress_path) as f:
        progress = json.load(f)
    training, privacy = results["training"], results["privacy"]
    q, z, delta = privacy["sampling_rate"], privacy["effective_noise_multiplier"], privacy["delta"]
    total, per_epoch = training["steps"], training["steps_per_epoch"]
    # The last segment trained for train_seconds; progress.json's clock runs across segments,
    # so the segment began at the epoch record whose time is end - train_seconds.
    start = progress[-1]["seconds"] - training["train_seconds"]
    resume = min(progress, key=lambda r: abs(r["seconds"] - start))
    out = {
        "run": results_path, "reported_epsilon": results["epsilon"], "delta": delta, "sampling_rate": q,
        "effective_noise_multiplier": z, "steps": total,
        "model": "each replayed pair of steps = one Poisson-sampled Gaussian at z/sqrt(2)",
        "resume_step": resume["critic_steps"], "resume_epoch": resume["epoch"],
        "resume_located_by": f"last segment train_seconds {training['train_seconds']:.0f} s; segment start "
                             f"{start:.0f} s vs epoch {resume['epoch']} record at {resume['seconds']:.0f} s",
        "epsilon": replayed_epsilon(q, z, total, resume["critic_steps"], delta),
        "epsilon_if_resumed_after_epoch": {e: replayed_epsilon(q, z, total, e * per_epoch, delta)
                                           for e in range(1, math.ceil(total / per_epoch))},
    }
    with open(out_path, "w") as f:
        json.dump(out, f, indent=2)
    print(json.dumps(out, indent=2))


if __name__ == "__main__":
    main(*sys.argv[1:4])
