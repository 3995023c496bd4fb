"""docs/privacy.md's release list is complete: everything a run of each family writes (results.json
keys and metrics, files and folders of the run folder, make_private's history) is a row of its
machine-readable table, with a guarantee from the table's vocabulary. An undocumented key fails."""
import json
import re

import numpy as np
import pytest

from tests.cli.helpers import train_py
from tests.conftest import REPO_ROOT
from tests.gan.helpers import small_test_split
from tfpriv.compat import keras

PRIVACY_MD = REPO_ROOT / "docs" / "privacy.md"
CLI_FAMILIES = ("privae", "dpwgan_gp", "dpgan", "filter")
FAMILIES = CLI_FAMILIES + ("make_private",)
GUARANTEES = ("ε", "job ε", "label-change ε", "public", "not private", "per ")  # "per key": a container


def release_table() -> dict[str, dict[str, str]]:
    """{family: {output: guarantee}} from the table between the release-list markers of docs/privacy.md."""
    text = PRIVACY_MD.read_text()
    body = text.split("<!-- release-list -->")[1].split("<!-- /release-list -->")[0]
    table: dict[str, dict[str, str]] = {f: {} for f in FAMILIES}
    for line in body.splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) != 4 or cells[0] in ("families", "") or set(cells[0]) <= set("-: "):
            continue
        families = CLI_FAMILIES if cells[0] == "train.py" else tuple(f.strip() for f in cells[0].split(","))
        for output in re.findall(r"`([^`]+)`", cells[1]):
            for family in families:
                table[family][output] = cells[3]
    return table


def written(out) -> set[str]:
    """What a train.py run wrote: results.json's keys and metrics, the run folder's entries (stage1/'s too)."""
    stored = json.loads((out / "results.json").read_text())
    items = {f"results.json:{k}" for k in stored} | {f"results.json:metrics.{k}" for k in stored["metrics"]}
    for path in out.iterdir():
        items.add(path.name + ("/" if path.is_dir() else ""))
        if path.name == "stage1":
            items |= {f"stage1/{p.name}" + ("/" if p.is_dir() else "") for p in path.iterdir()}
    return items


def tiny_classifier():
    """A stand-in for the GAN evaluation classifier (same outputs: features, softmax), untrained."""
    layers = keras.layers
    return keras.Sequential([layers.Input((28, 28, 1)), layers.Flatten(),
                                layers.Dense(4, activation="relu", name="features"),
                                layers.Dense(10, activation="softmax", name="probs")])


def family_args(family: str, data_dir) -> list[str]:
    """The flags of a tiny run of a command-line family."""
    return {
        "privae": ["--model=privae", "--dataset=digits", "--architecture=mlp", "--latent_dim=2", "--batch_size=500",
                   "--epochs=1", "--eval_examples=20", "--eval_importance_samples=2", "--noise_multiplier=1.0",
                   "--aggregation=micro", "--regularizer=none"],
        "dpwgan_gp": ["--model=dpwgan_gp", "--dataset=fashion_mnist", f"--data_dir={data_dir}", "--capacity=2",
                      "--latent_size=4", "--batch_size=500", "--epochs=1", "--max_steps=2", "--eval_samples=10",
                      "--num_samples=20"],
        "dpgan": ["--model=dpgan", "--dataset=fashion_mnist", f"--data_dir={data_dir}", "--capacity=2",
                  "--latent_size=4", "--batch_size=500", "--epochs=1", "--max_steps=2", "--eval_every=0", "--num_samples=20",
                  "--conditional", "--downstream_samples=10", "--downstream_epochs=1"],
        "filter": ["--model=filter", "--dataset=abalone", f"--data_dir={data_dir}", "--aggregation=micro",
                   "--noise_multiplier=1.0", "--vae_epochs=1", "--vae_batch_size=500", "--filter_epochs=1",
                   "--filter_eval_epochs=1", "--filter_eval_min_steps=10", "--budget=0.5", "--nogaussian_baseline",
                   "--nofilter_plots"],
    }[family]


def run_family(family: str, out, data_dir, capsys, monkeypatch) -> tuple[set[str], str]:
    """(what a tiny run of `family` wrote or released, what it printed)."""
    if family == "make_private":
        return make_private_history(), ""
    common = [f"--output_dir={out}", "--verbose=0", "--sampling=shuffle"]
    from tfpriv.gan import job as gan_job
    monkeypatch.setattr(gan_job, "_classifier", lambda s: tiny_classifier())
    if family in ("dpwgan_gp", "dpgan"):
        small_test_split(monkeypatch)  # the GANs score the first 500 test images: the same outputs, sooner
    proc = train_py(*common, *family_args(family, data_dir), capsys=capsys)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return written(out), proc.stdout


def make_private_history() -> set[str]:
    """The keys of the Keras history a make_private model's fit returns (the library's release)."""
    import tfpriv
    rng = np.random.default_rng(0)
    x, y = rng.normal(size=(64, 3)).astype(np.float32), rng.integers(0, 2, 64)
    model = keras.Sequential([keras.layers.Input((3,)), keras.layers.Dense(2)])
    loss = keras.losses.SparseCategoricalCrossentropy(from_logits=True, reduction=keras.losses.Reduction.NONE)
    private = tfpriv.make_private(model, loss, tfpriv.DPConfig(aggregation="micro", l2_norm_clip=1.0,
                                                                noise_multiplier=1.0), num_examples=64, batch_size=16)
    private.compile(optimizer="sgd", metrics=["accuracy"])
    history = private.fit(x, y, batch_size=16, epochs=1, verbose=0)
    return {f"history:{k}" for k in history.history}


def test_every_row_names_known_families_and_a_guarantee_from_the_vocabulary():
    table = release_table()
    assert all(table[f] for f in FAMILIES)
    for family, rows in table.items():
        for output, guarantee in rows.items():
            assert guarantee.startswith(GUARANTEES), (family, output, guarantee)


@pytest.mark.parametrize("family", FAMILIES)
def test_every_output_a_run_writes_is_in_the_release_list(family, tmp_path, data_dir, capsys, monkeypatch):
    outputs, printed = run_family(family, tmp_path / "run", data_dir, capsys, monkeypatch)
    documented = release_table()[family]
    missing = sorted(o for o in outputs if o not in documented)
    assert not missing, f"{family} writes outputs docs/privacy.md's release list does not name: {missing}"
    if family != "make_private":  # --sampling=shuffle: how it was accounted is on the line that prints epsilon
        line = next(l for l in printed.splitlines() if "epsilon = " in l)
        assert "[shuffled batches: accounted as one Gaussian at half the noise multiplier per epoch" in line, printed


def test_a_tuning_jobs_folder_and_its_best_run_are_in_the_release_list(tmp_path, data_dir, capsys):
    """Issue 46.8: a `--tune` job's top level (its entries, tuning.json's keys) and the best trial's
    run folder (`best/`, as a run of the family) are rows of the list; the stale `trials/` is not."""
    out = tmp_path / "tune"
    proc = train_py(f"--output_dir={out}", "--verbose=0", *family_args("privae", data_dir), "--tune",
                    "--mean_trials=1", '--search_space={"batch_size": {"type": "choice", "values": [500]}}',
                    capsys=capsys)  # K = 1 (geometric, mean 1)
    assert proc.returncode == 0, proc.stderr[-3000:]
    top = {p.name + ("/" if p.is_dir() else "") for p in out.iterdir()}
    assert top == {"tuning.json", "best/", "private/"}
    top |= {f"tuning.json:{k}" for k in json.loads((out / "tuning.json").read_text())}
    documented = release_table()["privae"]
    missing = sorted(o for o in top | written(out / "best") if o not in documented)
    assert not missing, f"a tuning job writes outputs docs/privacy.md's release list does not name: {missing}"
    assert documented["tuning.json:best"] == "job ε" and documented["private/"] == "not private"
    assert "trials/" not in documented


def test_a_tuned_make_private_model_releases_only_listed_outputs(tmp_path):
    """Issue 50.14: `PrivateTuner` (your own model, tuned) writes the same top level as `--tune`; each
    entry, tuning.json's keys and best/'s files are make_private rows of the list."""
    from tfpriv.privacy.tuning import TrialCount
    from tfpriv.tuning.private_tuner import PrivateTuner
    import tfpriv

    rng = np.random.default_rng(0)
    x, y = rng.normal(size=(64, 3)).astype(np.float32), rng.integers(0, 2, 64)
    held_out = rng.normal(size=(16, 3)).astype(np.float32), rng.integers(0, 2, 16)  # outside the private set

    def build_model(hp):
        model = keras.Sequential([keras.layers.Input((3,)), keras.layers.Dense(2)])
        private = tfpriv.make_private(model, keras.losses.SparseCategoricalCrossentropy(from_logits=True),
                                      tfpriv.DPConfig(aggregation="micro", l2_norm_clip=1.0, noise_multiplier=1.0),
                                      num_examples=64, batch_size=hp.Choice("batch_size", [16]))
        private.compile(optimizer="sgd", metrics=["accuracy"])
        return private

    out = tmp_path / "tune"
    PrivateTuner(build_model, {"batch_size": {"type": "choice", "values": [16]}}, objective="accuracy",
                 score_data=held_out, trials=TrialCount("geometric", 1.0)).search(x, y, str(out), verbose=0)
    written_ = {p.name + ("/" if p.is_dir() else "") for p in out.iterdir()}
    assert written_ == {"tuning.json", "best/", "private/"}
    written_ |= {f"tuning.json:{k}" for k in json.loads((out / "tuning.json").read_text())}
    written_ |= {f"best/{p.name}" for p in (out / "best").iterdir()}
    documented = release_table()["make_private"]
    missing = sorted(o for o in written_ if o not in documented)
    assert not missing, f"PrivateTuner writes outputs docs/privacy.md's release list does not name: {missing}"
