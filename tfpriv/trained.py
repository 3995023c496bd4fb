"""The trained model of a run folder: `load(run_dir)`, whichever family trained it.

The family is the one results.json's `model` names (`tfpriv.families`); its loader reads what its
job saved after training. For the built-in families `load` returns:

- privae: `tfpriv.privae.vae.VAE` (`vae/`): `encode(x) -> (mean, logvar)`, `decode(z)`, `sample(n, seed)`;
- dpwgan_gp, dpgan: `tfpriv.gan.serving.TrainedGenerator` (`generator.keras`, `gan.json`): the Keras
  generator and `sample(n, seed, labels=None)`;
- filter: `tfpriv.filter.serving.TrainedFilter` (`vae/`, `filter/` or `filter/user<k>/`): the frozen
  VAE, the filter(s) and `privatize_x` / `privatize_z`.

Randomness is an explicit integer seed drawn with stateless ops, so the same (inputs, seed)
give the same outputs here and in the exported SavedModel (`tfpriv.export`).
"""
from __future__ import annotations

from tfpriv.families import family_of_run
from tfpriv.jobs.serving import run_statement
from tfpriv.privacy.statement import describe


def load(run_dir: str):
    """The trained model of the run in `run_dir`, loaded by the family its results.json names; prints
    the one-line summary of the run's privacy statement (results.json `privacy_statement`).

    Example:
        A run folder written by the command line (`tfpriv --output_dir=runs/fm ...`) or by
        `Synthesizer.save`:

            model = tfpriv.load("runs/fm")
            images = model.sample(16, seed=0)   # a VAE or a GAN's generator: 16 private samples
    """
    model = family_of_run(run_dir).load(run_dir)
    statement = run_statement(run_dir)
    print(describe(statement) if statement else
          f"{run_dir}: no privacy statement in its results.json (a run written before tfpriv recorded one)")
    return model
