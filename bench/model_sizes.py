"""Shapes of the three user-style models of `make_private_models.py` and `opacus_models.py` (one place, so
both frameworks build the same models): image side, vocabulary, sequence length, width, attention heads."""
SIZES = {"image": 28, "vocab": 10_000, "length": 64, "width": 64, "heads": 4}
QUICK_SIZES = {"image": 8, "vocab": 50, "length": 8, "width": 8, "heads": 2}  # --quick: smoke tests
