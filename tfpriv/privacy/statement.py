"""The privacy statement a trained model carries: what its training spent, readable without tfpriv.

`privacy_statement(segments, config, delta)` builds it from a ledger's segments (sampling rate,
effective noise multiplier, steps): the run's DpEvent in dp_accounting's serialisable form
(`event_to_json`; `event_from_json` rebuilds it), epsilon at delta per accountant, the sampling
scheme, C, z, the steps, the adjacency and the tfpriv version, plus what the caller adds (a
tuning job's budget, a run's per-artefact guarantees). `write_statement` puts it in a saved model:
the member `privacy_statement.json` of a `.keras` file (a zip), `assets/privacy_statement.json` of a
SavedModel folder or the root attribute `tfpriv_privacy_statement` of an HDF5 file; `read_statement`
reads it back (plain `json` with `zipfile`, or h5py, do too).

Example:
    >>> import tfpriv
    >>> from tfpriv.privacy.statement import privacy_statement
    >>> s = privacy_statement([(0.01, 1.1, 1000)], tfpriv.DPConfig(aggregation="micro", l2_norm_clip=1.0,
    ...                       noise_multiplier=1.1), delta=1e-5)
    >>> s["steps"], s["adjacency"], round(s["epsilon"]["rdp"], 3), round(s["epsilon"]["pld"], 3)
    (1000, 'add_or_remove_one', 1.712, 1.515)
"""
from __future__ import annotations

import importlib
import json
import math
import os
import zipfile
from typing import Any, Mapping, Sequence

import dp_accounting
import h5py

import tfpriv
from tfpriv.errors import ConfigError
from tfpriv.privacy.accounting import RELEASE, Segment, get_accountant, training_event
from tfpriv.privacy.config import DPConfig

STATEMENT_FILE = "privacy_statement.json"  # the .keras member; in a SavedModel: assets/STATEMENT_FILE
STATEMENT_ATTRIBUTE = "tfpriv_privacy_statement"  # an HDF5 file's root attribute (its JSON text)
HDF5_SUFFIXES = (".h5", ".hdf5")
ADJACENCY = "add_or_remove_one"
FORMAT = 1  # the statement's layout version


def event_to_json(event: dp_accounting.DpEvent) -> dict:
    """dp_accounting's serialisable form of `event` (`DpEvent.to_named_tuple`) as JSON-ready dicts:
    {"module_name", "class_name", field: value, ...}, nested events likewise."""
    def convert(value):
        if hasattr(value, "_asdict"):
            return {k: convert(v) for k, v in value._asdict().items()}
        if isinstance(value, (list, tuple)):
            return [convert(v) for v in value]
        return value

    return convert(event.to_named_tuple())


def event_from_json(value: Mapping) -> dp_accounting.DpEvent:
    """The DpEvent `event_to_json` wrote (each class looked up by its module and class name)."""
    def build(v):
        if isinstance(v, Mapping) and "class_name" in v:
            cls = getattr(importlib.import_module(v["module_name"]), v["class_name"])
            return cls(**{k: build(x) for k, x in v.items() if k not in ("module_name", "class_name")})
        if isinstance(v, list):
            return [build(x) for x in v]
        return v

    return build(value)


def _number(value: float) -> float | str:
    """JSON holds no inf: a non-finite epsilon is written "inf", as results.json writes it."""
    return value if math.isfinite(value) else "inf"


def privacy_statement(segments: Sequence[Segment] | Sequence[Mapping], config: DPConfig, delta: float | None,
                      accountants: Sequence[str] = ("rdp", "pld"), has_batch_terms: bool = False,
                      extras: Mapping[str, Any] | None = None) -> dict:
    """The statement of a model trained under `config` whose ledger holds `segments`: the ledger's
    `raw_segments()` (each with its sampling scheme and the events it is accounted as), or
    (sampling rate, effective noise multiplier, steps) tuples of Poisson steps.

    `delta`: the delta epsilon is stated at; `accountants`: dp_accounting's methods epsilon is
    given by (`get_accountant` names); `extras`: further keys (e.g. `tuning`: a tuning job's budget).
    A model trained without DP gets `dp: false` and no epsilon.
    """
    rows = [dict(r) if isinstance(r, Mapping) else
            {"scheme": "poisson", "sampling_rate": r[0], "noise_multiplier": r[1], "steps": r[2],
             "accounted_as": [r[0], r[1], r[2]]} for r in segments]
    rows = [r for r in rows if int(r["accounted_as"][2]) > 0]  # a release has no step but one event
    steps = [r for r in rows if r["scheme"] != RELEASE]
    segments = [(float(q), float(z), int(n)) for q, z, n in (r["accounted_as"] for r in rows)]
    out: dict[str, Any] = {"format": FORMAT, "tfpriv_version": tfpriv.__version__, "dp": config.private,
                           "aggregation": config.aggregation}
    if config.private:
        event = training_event(segments)
        epsilon = {}
        for name in accountants:
            try:
                epsilon[name] = _number(get_accountant(name).epsilon(segments, delta))
            except ConfigError as exc:  # PLD cannot discretise an extreme noise multiplier
                epsilon[name] = f"not computed: {exc}"
        out.update({
            "adjacency": ADJACENCY,
            "sampling": "+".join(dict.fromkeys(r["scheme"] for r in steps)) or "poisson",
            "l2_norm_clip": config.l2_norm_clip,
            "noise_multiplier": config.noise_multiplier,
            "effective_noise_multiplier": config.effective_noise_multiplier(has_batch_terms),
            "steps": sum(int(r["steps"]) for r in steps),
            # every segment the model was trained with, in order (the releases first, scheme "release" and their
            # name): its sampling scheme, rate, effective noise multiplier and steps, and the (rate, noise
            # multiplier, count) of the events it is accounted as
            "segments": [{"scheme": r["scheme"], "sampling_rate": r["sampling_rate"],
                          "effective_noise_multiplier": r["noise_multiplier"], "steps": int(r["steps"]),
                          "accounted_as": list(r["accounted_as"]),
                          **({"name": r["name"]} if r["scheme"] == RELEASE else {})} for r in rows],
            "delta": delta,
            "epsilon": epsilon,
            "dp_event": event_to_json(event),
        })
        if config.aggregation == "termwise" or has_batch_terms:
            out["batch_clip"] = config.batch_clip
    out.update(extras or {})
    return out


def statement_segments(statement: Mapping) -> list[Segment]:
    """The ledger segments a statement records (what a continued training composes with)."""
    return [tuple(map(float, s["accounted_as"][:2])) + (int(s["accounted_as"][2]),) if "accounted_as" in s else
            (float(s["sampling_rate"]), float(s["effective_noise_multiplier"]), int(s["steps"]))
            for s in statement.get("segments", [])]


def describe(statement: Mapping) -> str:
    """One line: epsilon per accountant at delta, the mechanism and its settings, a tuning job's epsilon, the
    export's own guarantee where the run states one, the version."""
    version = f"tfpriv {statement.get('tfpriv_version')}"
    if not statement.get("dp"):
        return f"privacy statement: trained without differential privacy (no epsilon; {version})"
    eps = ", ".join(f"{v:.4g} ({k})" if isinstance(v, (int, float)) else f"{v} ({k})"
                    for k, v in statement["epsilon"].items())
    line = (f"privacy statement: epsilon {eps} at delta = {statement['delta']:.3g}, {statement['adjacency']} "
            f"adjacency; {statement['steps']} {statement['sampling']}-sampled steps, "
            f"C = {statement['l2_norm_clip']:g}, noise multiplier {statement['noise_multiplier']:.4g}")
    released = [s for s in statement.get("segments", []) if s.get("scheme") == RELEASE]
    if released:
        line += "; released before training: " + ", ".join(
            f"{s['name']} (noise multiplier {s['effective_noise_multiplier']:.4g})" for s in released)
    if statement.get("tuning"):
        line += f"; tuning job epsilon {statement['tuning'].get('epsilon')}"
    served = (statement.get("guarantees") or {}).get("saved_model/")
    if served:  # a run whose export is under another guarantee (the filter's: not private)
        line += f"; saved_model/: {served['guarantee']}"
    return f"{line} ({version})"


def write_statement(path: str, statement: Mapping) -> str:
    """Puts `statement` into the saved model at `path`: a `.keras` file gets the zip member
    `STATEMENT_FILE`, a SavedModel folder `assets/STATEMENT_FILE`. Returns where it went."""
    text = json.dumps(statement, indent=2, sort_keys=True)
    if path.endswith(HDF5_SUFFIXES):
        with h5py.File(path, "a") as f:
            f.attrs[STATEMENT_ATTRIBUTE] = text
        return f"{path}:{STATEMENT_ATTRIBUTE}"
    if os.path.isdir(path):
        target = os.path.join(path, "assets", STATEMENT_FILE)
        os.makedirs(os.path.dirname(target), exist_ok=True)
        with open(target, "w") as f:
            f.write(text + "\n")
        return target
    if not zipfile.is_zipfile(path):
        raise ConfigError(f"filepath: {path} is neither a .keras nor an HDF5 file nor a SavedModel folder; the "
                          "privacy statement goes into one of those (save to a path ending in .keras)")
    with zipfile.ZipFile(path, "a") as archive:
        if STATEMENT_FILE in archive.namelist():
            raise ConfigError(f"filepath: {path} already holds a {STATEMENT_FILE}")
        archive.writestr(STATEMENT_FILE, text)
    return f"{path}:{STATEMENT_FILE}"


def read_statement(path: str) -> dict | None:
    """The statement saved in the `.keras` or HDF5 file or SavedModel folder at `path`, or None if it has none."""
    if path.endswith(HDF5_SUFFIXES):
        with h5py.File(path, "r") as f:
            text = f.attrs.get(STATEMENT_ATTRIBUTE)
        return None if text is None else json.loads(text)
    if os.path.isdir(path):
        target = os.path.join(path, "assets", STATEMENT_FILE)
        if not os.path.isfile(target):
            return None
        with open(target) as f:
            return json.load(f)
    if not zipfile.is_zipfile(path):
        return None
    with zipfile.ZipFile(path) as archive:
        if STATEMENT_FILE not in archive.namelist():
            return None
        return json.loads(archive.read(STATEMENT_FILE))
