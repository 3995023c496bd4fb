"""Offline, checksum-verified data loaders: `load_dataset(name, data_dir, seed=...)`."""
from tfpriv.data.checksums import MD5, verified_file, verify_md5
from tfpriv.data.registry import DATASETS, TFDS_PREFIX, Dataset, load_dataset
from tfpriv.data.idx import load_fashion_mnist, load_mnist, read_idx
from tfpriv.data.pinwheel import load_pinwheel, make_pinwheel
from tfpriv.data.sampling import poisson_batches
from tfpriv.data.digits import load_digits
from tfpriv.data.uci import load_abalone, load_adult

__all__ = [
    "DATASETS",
    "MD5",
    "TFDS_PREFIX",
    "Dataset",
    "load_abalone",
    "load_adult",
    "load_dataset",
    "load_digits",
    "load_fashion_mnist",
    "load_mnist",
    "load_pinwheel",
    "make_pinwheel",
    "poisson_batches",
    "read_idx",
    "verified_file",
    "verify_md5",
]
