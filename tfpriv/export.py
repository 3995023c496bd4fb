"""SavedModel export of a run's trained model with serving signatures (`OUTPUT_DIR/saved_model/`).

Every training run writes it (`tfpriv.jobs.pipeline.TrainingRun.export`) and lists it in
results.json. Loading it needs TensorFlow only: `tf.saved_model.load(path).signatures[name](**inputs)`;
every signature returns a dict of tensors, and randomness is an explicit int64 `seed` input (the same
inputs and seed give the same outputs as `tfpriv.load(run_dir)`). The writer: `tfpriv.jobs.serving`.

| family | signatures (declared by) |
|---|---|
| privae | `encode`, `decode`, `sample` (`tfpriv.privae.serving`) |
| dpwgan_gp, dpgan | `sample`, with `labels` if conditional (`tfpriv.gan.serving`) |
| filter | `privatize_z`, `privatize_x` (per user: `_user<k>`), `encode`, `decode` (`tfpriv.filter.serving`) |
"""
from __future__ import annotations

from tfpriv.families import family_of_run
from tfpriv.jobs.serving import export


def export_run(run_dir: str, path: str | None = None) -> dict:
    """Exports the trained model of `run_dir` (as the family its results.json names loads and serves
    it) to `path` (default `run_dir/saved_model`), atomically; returns {"path", "signatures"}.

    Example: `tfpriv.export.export_run("runs/synth")["signatures"]["sample"]`."""
    return export(run_dir, family_of_run(run_dir), path)
