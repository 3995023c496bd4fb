"""Hyperparameter tuning jobs on private data with keras-tuner, and the privacy cost of the whole job.

A job runs K trials; every trial is a normal run (`trial_fn(values, trial_dir)` trains, evaluates
and writes its own results.json) and the best trial by `objective` is selected. What the job costs:

- `random` search with K drawn from a `TrialCount` (Poisson, geometric, logarithmic, truncated
  negative binomial): Papernot & Steinke (2022) bound the release of the best trial by one trial's
  RDP plus a small term (`tfpriv.privacy.tuning`). The trial mechanism Q is "draw hyperparameters,
  train": its RDP at each order is at most the largest over the space's privacy-relevant
  configurations (Rényi divergence is quasi-convex in the pair of distributions), so those
  hyperparameters (batch size, epochs, noise or per-trial target epsilon, aggregation,
  partitions) must be discrete choices, and `trial_event(values)` gives each one's DpEvent.
- `bayesian` and `hyperband` choose later trials from earlier trials' scores, which the theorem
  does not cover: the job is accounted as the composition of all K trials (naive), reported
  as such. Naive composition is reported beside the bound for every job.
The number of trials is drawn by the job, never fixed: a fixed count does not satisfy the theorem.
"""
from __future__ import annotations

import dataclasses
import itertools
import json
import os
from typing import Callable, Mapping

import dp_accounting
import keras_tuner as kt
import numpy as np
from dp_accounting.rdp import rdp_privacy_accountant

from tfpriv.errors import ConfigError
from tfpriv.privacy.accounting import DEFAULT_ORDERS
from tfpriv.privacy.tuning import TrialCount

TUNERS = {"random": kt.RandomSearch, "bayesian": kt.BayesianOptimization, "hyperband": kt.Hyperband}
PRIVACY_KEYS = ("batch_size", "epochs", "noise_multiplier", "epsilon", "aggregation", "num_partitions", "batch_clip")

Space = Mapping[str, Mapping]
TrialFn = Callable[[dict, str], dict]
EventFn = Callable[[dict], dp_accounting.DpEvent]


def check_space(space: Space) -> None:
    """A space maps names to {"type": "float"|"int", "min", "max"[, "log"]} or {"type": "choice", "values"}."""
    for name, spec in space.items():
        kind = spec.get("type")
        if kind == "choice":
            if not spec.get("values"):
                raise ConfigError(f"space.{name}: a choice needs a non-empty 'values' list")
        elif kind in ("float", "int"):
            if not ("min" in spec and "max" in spec and spec["min"] <= spec["max"]):
                raise ConfigError(f"space.{name}: a {kind} range needs min <= max, got {dict(spec)}")
            if name in PRIVACY_KEYS:
                raise ConfigError(f"space.{name}: privacy-relevant hyperparameters must be choices (the job's "
                                  "epsilon is the worst case over them)")
        else:
            raise ConfigError(f"space.{name}: type must be float, int or choice, got {kind!r}")


def define(hp: kt.HyperParameters, space: Space) -> dict:
    """The trial's values, declared on keras-tuner's `hp` from the space."""
    values = {}
    for name, spec in space.items():
        if spec["type"] == "choice":
            values[name] = hp.Choice(name, list(spec["values"]))
        elif spec["type"] == "float":
            values[name] = hp.Float(name, spec["min"], spec["max"], sampling="log" if spec.get("log") else "linear")
        else:
            values[name] = hp.Int(name, spec["min"], spec["max"])
    return values


def privacy_configurations(space: Space) -> list[dict]:
    """Every combination of the space's privacy-relevant choices."""
    keys = [k for k in PRIVACY_KEYS if k in space]
    return [dict(zip(keys, combo)) for combo in itertools.product(*(space[k]["values"] for k in keys))]


def worst_rdp(events: list[dp_accounting.DpEvent], orders=DEFAULT_ORDERS) -> np.ndarray:
    """Order-wise maximum of the events' RDP curves: an RDP bound for a random choice among them."""
    curves = []
    for event in events:
        accountant = dp_accounting.rdp.RdpAccountant(list(orders))
        accountant.compose(event)
        curves.append(np.asarray(accountant._rdp))  # the composed RDP curve (dp_accounting 0.4.3)
    return np.max(curves, axis=0)


def job_epsilon_from_rdp(rdp: np.ndarray, count: TrialCount, delta: float, orders=DEFAULT_ORDERS) -> float:
    """Papernot & Steinke's bound for K ~ count repetitions of a mechanism with RDP curve `rdp`."""
    job = rdp_privacy_accountant._compute_rdp_repeat_and_select(list(orders), rdp, count.mean, count.dp_shape)
    return float(rdp_privacy_accountant.compute_epsilon(list(orders), job, delta)[0])


@dataclasses.dataclass
class TuningJob:
    """One tuning job: what a trial is, the space, the tuner, the trial count and the objective."""

    trial_fn: TrialFn
    trial_event: EventFn
    space: Space
    objective: str
    direction: str = "max"
    tuner: str = "random"
    trials: TrialCount = dataclasses.field(default_factory=lambda: TrialCount("geometric", 5))
    delta: float = 1e-5
    seed: int | None = None

    def __post_init__(self):
        check_space(self.space)
        if self.tuner not in TUNERS:
            raise ConfigError(f"tuner: must be one of {', '.join(TUNERS)}, got {self.tuner!r}")
        if self.direction not in ("min", "max"):
            raise ConfigError(f"direction: must be min or max, got {self.direction!r}")

    def privacy(self, trials_run: int) -> dict:
        """The job's epsilon: the bound (random search) or the composition (adaptive tuners)."""
        events = [self.trial_event(c) for c in privacy_configurations(self.space)] or [self.trial_event({})]
        worst = worst_rdp(events)
        naive = float(rdp_privacy_accountant.compute_epsilon(list(DEFAULT_ORDERS), trials_run * worst, self.delta)[0]) \
            if trials_run > 0 else 0.0
        out = {"delta": self.delta, "trials_run": trials_run, "trial_count": dataclasses.asdict(self.trials),
               "epsilon_naive_composition": naive,
               "epsilon_one_trial": float(rdp_privacy_accountant.compute_epsilon(list(DEFAULT_ORDERS), worst,
                                                                                  self.delta)[0])}
        if self.tuner == "random":
            out["epsilon"] = job_epsilon_from_rdp(worst, self.trials, self.delta)
            out["analysis"] = ("Papernot & Steinke 2022 (random search, random number of trials, best trial "
                               "released), RDP worst case over the space's privacy-relevant choices")
        else:
            out["epsilon"] = naive
            out["analysis"] = (f"composition of the {trials_run} trials: the {self.tuner} tuner picks trials from "
                               "earlier scores, which the random-trials theorem does not cover")
        return out

    def run(self, output_dir: str) -> dict:
        """Draws K, runs the trials, writes `tuning.json` (trials, best configuration, the job's privacy)."""
        rng = np.random.default_rng(self.seed)
        k = self.trials.sample(rng)
        os.makedirs(output_dir, exist_ok=True)
        records: list[dict] = []
        job = self

        class Tuner(TUNERS[self.tuner]):
            def run_trial(self, trial, *args, **kwargs):
                values = define(trial.hyperparameters, job.space)
                if "tuner/epochs" in trial.hyperparameters.values:   # hyperband's budget
                    values["epochs"] = int(trial.hyperparameters.values["tuner/epochs"])
                trial_dir = os.path.join(output_dir, "trials", trial.trial_id)
                results = job.trial_fn(values, trial_dir)
                score = float(results["metrics"][job.objective])
                records.append({"trial_id": trial.trial_id, "values": values, "objective": score,
                                "epsilon": results.get("epsilon"), "results": os.path.join(trial_dir, "results.json")})
                return {job.objective: score}

        kwargs = dict(objective=kt.Objective(self.objective, self.direction), directory=output_dir,
                      project_name="keras_tuner", seed=self.seed, overwrite=False)
        if self.tuner == "hyperband":
            epochs = self.space.get("epochs", {}).get("values", [1])
            kwargs.update(max_epochs=max(epochs), hyperband_iterations=1)
        else:
            kwargs.update(max_trials=max(k, 1))
        tuner = Tuner(**kwargs)
        if k > 0:
            tuner.search()
        best = (max if self.direction == "max" else min)(records, key=lambda r: r["objective"]) if records else None
        result = {"tuner": self.tuner, "objective": self.objective, "direction": self.direction,
                  "trials_drawn": k, "trials": records, "best": best, "privacy": self.privacy(len(records)),
                  "space": {n: dict(s) for n, s in self.space.items()}}
        with open(os.path.join(output_dir, "tuning.json.tmp"), "w") as f:
            json.dump(result, f, indent=2, default=str)
        os.replace(os.path.join(output_dir, "tuning.json.tmp"), os.path.join(output_dir, "tuning.json"))
        return result


