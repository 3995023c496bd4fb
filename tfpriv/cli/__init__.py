"""The `train.py` command line: absl flags, job dispatch, one-line errors with exit code 2."""
