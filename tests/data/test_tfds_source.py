"""TFDS source: offline error paths only (never the network), and array conversion."""
import numpy as np
import pytest
import tensorflow_datasets as tfds
from tensorflow_datasets.core.utils import gcs_utils

from tfpriv.data import load_dataset
from tfpriv.data.tfds_source import _to_dataset, load_tfds
from tfpriv.errors import DataError, UsageError


def test_not_downloaded_is_one_line_data_error(tmp_path, monkeypatch):
    monkeypatch.setattr(gcs_utils, "_is_gcs_disabled", False)  # TFDS >= 4.9.10 may start disabled
    with pytest.raises(DataError) as err:
        load_dataset("tfds:mnist", tmp_path)
    msg = str(err.value)
    assert msg.startswith("tfds:mnist: not found in ") and str(tmp_path) in msg and "\n" not in msg
    assert list(tmp_path.iterdir()) == []  # nothing written, nothing fetched
    assert gcs_utils._is_gcs_disabled is False  # flag restored


def test_bad_names_and_dirs(tmp_path):
    with pytest.raises(DataError, match=r"^data_dir: .*nope is not a directory and download is off \(tfds:mnist\)"):
        load_tfds("mnist", tmp_path / "nope", download=False)
    with pytest.raises(UsageError, match="^dataset: tfds:no_such_dataset_xyz is not a known"):
        load_dataset("tfds:no_such_dataset_xyz", tmp_path)
    with pytest.raises(UsageError, match="^data_dir: required for dataset 'tfds:mnist'"):
        load_dataset("tfds:mnist")
    with pytest.raises(UsageError, match="needs a TFDS dataset name"):
        load_dataset("tfds:", tmp_path)


def test_to_dataset_converts_images_and_class_labels():
    features = tfds.features.FeaturesDict(
        {"image": tfds.features.Image(shape=(2, 2, 1)), "label": tfds.features.ClassLabel(num_classes=3)}
    )
    img = np.array([[[[0], [255]], [[51], [102]]]], dtype=np.uint8)
    arrays = {s: {"image": img, "label": np.array([2])} for s in ("train", "test")}
    ds = _to_dataset("toy", features, arrays)
    assert ds.name == "tfds:toy" and ds.kind == "image" and ds.likelihood == "bernoulli"
    np.testing.assert_allclose(ds.x_train[0, :, :, 0], [[0, 1], [0.2, 0.4]], atol=1e-7)
    assert ds.labels_test["label"].tolist() == [2]
    assert ds.labels_train["label"].dtype == np.int64 and ds.num_classes == {"label": 3}
