"""The layout of a run folder (`--output_dir`, a tuning job's folder, a synthesizer's `save(dir)`): the
name of every file and folder a run writes, in one place. A leaf: imports nothing of tfpriv.

Every run: `results.json` (`tfpriv.training.results`), `privacy_plan.json` (written before training),
`checkpoints/` (model, optimizers, ledger, random streams; a re-run resumes from them), `logs/`
(TensorBoard), `saved_model/` (the serving signatures, `tfpriv.export`). `--mode=sample` adds
`samples.npz` (and `samples_grid.png` for images), `--audit` writes `audit.json`. `--tune` releases
`tuning.json` and `best/` (the best trial's run folder) and keeps `private/` (`tuning_plan.json`: the
number of trials; `trials/<id>/`: every trial's run folder with its `tuning_trial.json`;
`console-<tuner id>.log`: what the trials printed).

The trained model a built-in family saves (`tfpriv.load`): PriVAE `vae/`; a GAN `generator.keras`,
`gan.json` (its settings) and `progress.json` (epsilon and scores per epoch), and after
`python -m tfpriv.gan.rescore` `rescore_dpimagebench.json`; the filter `vae/` (the
frozen stage-1 VAE), `filter/` (or `filter/user<k>/`) and `stage1/` (stage 1's checkpoints, logs and plan).
"""
import os

RESULTS_FILE = "results.json"
PRIVACY_PLAN_FILE = "privacy_plan.json"
CHECKPOINTS_DIR = "checkpoints"
LOGS_DIR = "logs"
SAVED_MODEL_DIR = "saved_model"
SAMPLES_FILE = "samples.npz"
SAMPLES_GRID_FILE = "samples_grid.png"
AUDIT_FILE = "audit.json"

TUNING_FILE = "tuning.json"
BEST_DIR = "best"
PRIVATE_DIR = "private"
TUNING_PLAN_FILE = "tuning_plan.json"
TRIALS_DIR = os.path.join(PRIVATE_DIR, "trials")
TUNING_TRIAL_FILE = "tuning_trial.json"
TUNING_CONSOLE_FILE = "console-{}.log"  # per keras-tuner process (its tuner id)

VAE_DIR = "vae"
GENERATOR_FILE = "generator.keras"
GAN_CONFIG_FILE = "gan.json"
PROGRESS_FILE = "progress.json"
RESCORE_DPIMAGEBENCH_FILE = "rescore_dpimagebench.json"
FILTER_DIR = "filter"
STAGE1_DIR = "stage1"
