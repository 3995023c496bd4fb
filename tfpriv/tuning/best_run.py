"""The released copy of a tuning job's best trial (`OUTPUT_DIR/best`): its run folder, naming no trial.

Random search's ε (Papernot & Steinke) covers the best trial's run, not the number of trials K, and
the best trial's position among the trials bounds K from below. So the copy leaves out the trial's
tuning record (`tuning_trial.json`: its id), points every path in its JSON records at the copy
instead of the trial's folder under `private/trials/`, renames TensorBoard's event files
(`events.out.tfevents.<time>.<host>.<pid>.<n>.v2`, where n counts the summary writers the process
made before: one or more per earlier trial) to `events.out.tfevents.<i>.v2` (i: the file's order in
its folder) and takes fresh file times. The copy is then read whole (the members of zip archives,
.keras and .npz, too) and refused, loudly, if it still holds the path of the private folder.
"""
from __future__ import annotations

import json
import os
import re
import shutil
import zipfile
from typing import Any, Iterator

from tfpriv.files import write_json
from tfpriv.run_folder import TRIALS_DIR, TUNING_TRIAL_FILE

EVENTS_PREFIX = "events.out.tfevents."


def copy_best_run(trial_dir: str, best_dir: str, private_dir: str) -> None:
    """Copies the run folder `trial_dir` to `best_dir` (which must not exist) without naming the
    trial; raises RuntimeError (and removes `best_dir`) if the copy still names `private_dir`."""
    shutil.copytree(trial_dir, best_dir, ignore=shutil.ignore_patterns(TUNING_TRIAL_FILE),
                    copy_function=shutil.copy)  # shutil.copy: fresh file times, not the trial's
    moved = _path_forms(trial_dir, best_dir)
    for folder, _, files in os.walk(best_dir):
        events = sorted(name for name in files if name.startswith(EVENTS_PREFIX))
        for i, name in enumerate(events):
            os.rename(os.path.join(folder, name), os.path.join(folder, f"{EVENTS_PREFIX}{i}.v2"))
        for name in files:
            if name.endswith(".json"):
                path = os.path.join(folder, name)
                with open(path) as f:
                    record = json.load(f)
                released = _moved(record, moved)
                if released != record:
                    write_json(path, released)
    leaks = sorted(naming(best_dir, private_dir))
    if leaks:
        shutil.rmtree(best_dir, ignore_errors=True)
        raise RuntimeError(f"the copy of the best trial names the private folder {private_dir} in "
                           f"{', '.join(leaks)}: best/ is not written")


def naming(folder: str, private_dir: str) -> Iterator[str]:
    """The files under `folder` (or `file:member` of a zip archive) whose bytes hold `private_dir`
    (as given, absolute or resolved) or `private/trials`."""
    needles = {os.fsencode(p) for p in (private_dir, os.path.abspath(private_dir), os.path.realpath(private_dir),
                                        TRIALS_DIR)}
    for root, _, files in os.walk(folder):
        for name in files:
            path = os.path.join(root, name)
            where = os.path.relpath(path, folder)
            if any(n in os.fsencode(where) for n in needles):
                yield where
                continue
            with open(path, "rb") as f:
                data = f.read()
            if any(n in data for n in needles):
                yield where
            elif zipfile.is_zipfile(path):
                with zipfile.ZipFile(path) as archive:
                    for member in archive.namelist():
                        if any(n in archive.read(member) for n in needles):
                            yield f"{where}:{member}"


def _path_forms(trial_dir: str, best_dir: str) -> tuple[re.Pattern, dict[str, str]]:
    """The trial's folder as given, absolute or resolved, each as a path prefix (not .../trials/1 in
    .../trials/10), and the same form of `best_dir` for each."""
    forms = {form(trial_dir): form(best_dir) for form in (str, os.path.abspath, os.path.realpath)}
    pattern = re.compile("(" + "|".join(map(re.escape, sorted(forms, key=len, reverse=True))) + r")(?=/|$)")
    return pattern, forms


def _moved(value: Any, moved: tuple[re.Pattern, dict[str, str]]) -> Any:
    """`value` (a JSON record) with every path into the trial's folder pointing into the copy."""
    pattern, forms = moved
    if isinstance(value, str):
        return pattern.sub(lambda m: forms[m.group(1)], value)
    if isinstance(value, dict):
        return {k: _moved(v, moved) for k, v in value.items()}
    if isinstance(value, list):
        return [_moved(v, moved) for v in value]
    return value
