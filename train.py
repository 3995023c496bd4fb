"""tfpriv command line: `python train.py --model=... --dataset=... --aggregation=... --output_dir=DIR`.

With no flags it trains the main job: a term-wise private PriVAE on scikit-learn's bundled
digits (no download) and prints its epsilon. `--flagfile=flags/NAME.cfg` runs an experiment.
"""
import os

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")

from tfpriv.cli.main import entry_point  # noqa: E402

if __name__ == "__main__":
    entry_point()
