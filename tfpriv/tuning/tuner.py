"""Hyperparameter tuning jobs on private data with keras-tuner, and the privacy cost of the whole job.

A job runs trials; every trial is a normal run (`trial_fn(values, trial_dir)` trains, evaluates
and writes its own results.json) and the best trial by the `Objective` is selected. What it costs:

- `random` search with K drawn from a `TrialCount` (Poisson, geometric, logarithmic, truncated
  negative binomial): Papernot & Steinke (2022) bound the release of the best trial by one trial's
  RDP plus a small term (`tfpriv.privacy.tuning`). The theorem needs K independent runs of one
  mechanism Q = "draw hyperparameters from the space, train": trials draw their values
  independently, with replacement (`IIDRandomSearchOracle`; keras-tuner's own random search skips
  repeats, which makes trials dependent), from the first trial on (the space is declared before
  the search). Q's RDP at each order is at most the largest over the space's privacy
  configurations (Rényi divergence is jointly quasi-convex), so every hyperparameter that can
  change a trial's privacy event must be a discrete choice; only the `neutral` ones (which do not
  change it, e.g. the learning rate) may be ranges. `trial_event(values)` gives each
  configuration's DpEvent. A cap `max_trials` (run min(K, cap) trials) is paid for in δ
  (`tfpriv.privacy.tuning.capped_job_epsilon`).
- `bayesian` and `hyperband` choose later trials from earlier trials' scores, which the theorem
  does not cover: the job is accounted as the composition of every trial started. Naive
  composition is recorded beside the bound for every job (for random search in the private
  record only: it reveals the number of trials).

Only the best trial is released (OUTPUT_DIR/best and OUTPUT_DIR/tuning.json: its values and
score, the job's privacy): the theorem's output is that trial, not K nor the other trials, which
stay in OUTPUT_DIR/private. The score that chooses it must be computed from the trial's output and
data outside the private training set: an `Objective` declares what it reads, and one that reads
private data is refused when the trials are private (`check_objective`).

The number of trials is drawn once by the job (by the chief in distributed tuning) and stored in
`private/tuning_plan.json` before the first trial: a re-run of the same folder reuses it (keras-tuner
reloads its trials; an interrupted trial is retried in its own folder, where the run resumes
from its checkpoint) instead of drawing again. Distributed tuning is keras-tuner's chief/worker
mode (`KERASTUNER_TUNER_ID`, `KERASTUNER_ORACLE_IP`, `KERASTUNER_ORACLE_PORT`): the chief holds
the oracle, draws K and writes the tuning records from the oracle's record of every trial any worker
started; workers run trials in the shared output folder.
"""
from __future__ import annotations

import dataclasses
import functools
import json
import math
import os
import shutil
import time
from typing import Callable

import dp_accounting
import keras_tuner as kt
import numpy as np
from dp_accounting.rdp import rdp_privacy_accountant
from keras_tuner.src.distribute import utils as dist_utils

from tfpriv.errors import ConfigError
from tfpriv.files import write_json
from tfpriv.privacy.accounting import DEFAULT_ORDERS, RDP
from tfpriv.privacy.statement import write_statement
from tfpriv.privacy.tuning import TrialCount, capped_job_epsilon
from tfpriv.run_folder import (BEST_DIR, PRIVATE_DIR, RESULTS_FILE, SAVED_MODEL_DIR, TRIALS_DIR, TUNING_CONSOLE_FILE,
                               TUNING_FILE, TUNING_PLAN_FILE, TUNING_TRIAL_FILE)
from tfpriv.tuning.best_run import copy_best_run
from tfpriv.tuning.console import console_to
from tfpriv.tuning.space import NEUTRAL_KEYS, Objective, Space, check_space, privacy_configurations

TUNERS = ("random", "bayesian", "hyperband")
# The folders and files: tfpriv/run_folder.py. Released: OUTPUT_DIR/tuning.json (the best trial's values and score, the job's epsilon) and
# OUTPUT_DIR/best (a copy of the best trial's run). Kept private, outside epsilon: OUTPUT_DIR/private,
# with K (tuning_plan.json), every trial's run (trials/<trial id>), keras-tuner's oracle state and
# the record of every trial (tuning.json).
# Released only by the adaptive tuners, whose epsilon (composition) covers every trial.
COUNT_KEYS = ("trials_run", "epsilon_naive_composition")

TrialFn = Callable[[dict, str], dict]
EventFn = Callable[[dict], dp_accounting.DpEvent]


def is_worker() -> bool:
    """A keras-tuner worker (KERASTUNER_ORACLE_IP set, KERASTUNER_TUNER_ID not a chief)."""
    return dist_utils.has_chief_oracle() and not dist_utils.is_chief_oracle()


def define(hp: kt.HyperParameters, space: Space) -> dict:
    """The trial's values, declared on keras-tuner's `hp` from the space."""
    values = {}
    for name, spec in space.items():
        if spec["type"] == "choice":
            values[name] = hp.Choice(name, list(spec["values"]))
        elif spec["type"] == "float":
            values[name] = hp.Float(name, spec["min"], spec["max"], sampling="log" if spec.get("log") else "linear")
        else:
            values[name] = hp.Int(name, spec["min"], spec["max"], sampling="log" if spec.get("log") else "linear")
    return values


def worst_rdp(events: list[dp_accounting.DpEvent]) -> np.ndarray:
    """Order-wise maximum of the events' RDP curves: an RDP bound for a random choice among them."""
    return np.max([RDP.curve(event) for event in events], axis=0)


def bounded(rdp: np.ndarray) -> bool:
    """Whether some order bounds the mechanism. dp_accounting >= 0.6 gives inf at the (fractional)
    orders where its series does not converge, excluding them; the other orders still hold."""
    return bool(np.any(np.isfinite(rdp)))


def rdp_epsilon(rdp: np.ndarray, delta: float, orders=DEFAULT_ORDERS) -> float:
    if not bounded(rdp):
        return math.inf
    return float(rdp_privacy_accountant.compute_epsilon(list(orders), rdp, delta)[0])


def job_epsilon_from_rdp(rdp: np.ndarray, count: TrialCount, delta: float, orders=DEFAULT_ORDERS) -> float:
    """Papernot & Steinke's bound for K ~ count repetitions of a mechanism with RDP curve `rdp`."""
    if not bounded(rdp):
        return math.inf
    job = rdp_privacy_accountant._compute_rdp_repeat_and_select(list(orders), rdp, count.mean, count.dp_shape)
    return rdp_epsilon(job, delta, orders)


class IIDRandomSearchOracle(kt.oracles.RandomSearchOracle):
    """Random search whose trials draw their values independently, repeats allowed (the theorem's
    i.i.d. trials); it stops only at `max_trials`, never because the space is exhausted."""

    def _duplicate(self, values):
        return False


@dataclasses.dataclass
class TuningJob:
    """One tuning job: what a trial is, the space, the tuner, the trial count and the objective."""

    trial_fn: TrialFn
    trial_event: EventFn
    space: Space
    objective: Objective | str
    direction: str = "max"  # when `objective` is a metric name
    tuner: str = "random"
    trials: TrialCount = dataclasses.field(default_factory=lambda: TrialCount("geometric", 5))
    delta: float = 1e-5
    seed: int | None = None
    max_trials: int | None = None  # a cap on K (accounted in delta)
    neutral: tuple[str, ...] = NEUTRAL_KEYS
    budget_key: str = "epochs"  # the hyperparameter hyperband sets to its epoch budget
    privacy_note: str | None = None  # what the trials' epsilon covers, if the job says more than "the run"
    epsilon_caveat: str | None = None  # a qualification of every trial's epsilon (shuffled batches)

    def __post_init__(self):
        if isinstance(self.objective, str):
            self.objective = Objective(self.objective, self.direction)
        check_space(self.space, self.neutral)
        if self.tuner not in TUNERS:
            raise ConfigError(f"tuner: must be one of {', '.join(TUNERS)}, got {self.tuner!r}")
        if self.max_trials is not None and self.max_trials < 1:
            raise ConfigError(f"max_trials: must be >= 1, got {self.max_trials}")
        if self.tuner == "hyperband":
            if self.max_trials is not None:
                raise ConfigError("max_trials: hyperband's schedule fixes its trials; not with tuner=hyperband")
            spec = self.space.get(self.budget_key, {})
            if spec.get("type") != "choice" or not all(isinstance(v, int) and v >= 1 for v in spec["values"]):
                raise ConfigError(f"space.{self.budget_key}: hyperband needs the epoch budget as a choice of "
                                  "positive integers (the largest is its max_epochs)")

    def check_objective(self) -> None:
        """Refuses to choose among private trials by an objective that reads private data: the choice
        would release that data outside the job's epsilon (non-private trials have no epsilon to keep)."""
        if self.objective.reads == "private" and bounded(self.worst_trial_rdp):
            raise ConfigError(f"objective: {self.objective.name} reads private data (reads='private'): choosing "
                              "among private trials by it is not covered by the job's epsilon; use an objective "
                              "computed on the test split or on public data")

    @functools.cached_property
    def worst_trial_rdp(self) -> np.ndarray:
        """RDP curve bounding one trial: the order-wise worst over the space's privacy configurations."""
        return worst_rdp([self.trial_event(c) for c in privacy_configurations(self.space, self.neutral)])

    def privacy(self, trials_run: int) -> dict:
        """The job's epsilon: the bound (random search) or the composition (adaptive tuners)."""
        worst = self.worst_trial_rdp
        naive = rdp_epsilon(trials_run * worst, self.delta) if trials_run > 0 else 0.0
        out = {"delta": self.delta, "accountant": "rdp", "trials_run": trials_run,
               "trial_count": None if self.tuner == "hyperband" else dataclasses.asdict(self.trials),
               "max_trials": self.max_trials,
               "epsilon_naive_composition": naive, "epsilon_one_trial": rdp_epsilon(worst, self.delta)}
        if self.tuner == "random":
            if self.max_trials is None or not bounded(worst):
                out["epsilon"] = job_epsilon_from_rdp(worst, self.trials, self.delta)
            else:
                out["epsilon"], out["delta_uncapped_bound"] = capped_job_epsilon(worst, self.trials, self.max_trials,
                                                                                 self.delta)
                out["prob_trials_above_cap"] = self.trials.tail(self.max_trials)
            out["analysis"] = ("Papernot & Steinke 2022 (random search, random number of trials, best trial "
                               "released), RDP worst case over the space's privacy configurations"
                               + ("; the cap max_trials paid for in delta" if self.max_trials else ""))
        else:
            out["epsilon"] = naive
            out["analysis"] = (f"composition of the {trials_run} trials started: the {self.tuner} tuner picks trials "
                               "from earlier scores, which the random-trials theorem does not cover")
        if self.privacy_note:
            out["scope"] = self.privacy_note
        if self.epsilon_caveat:
            out["epsilon_caveat"] = self.epsilon_caveat
        return out

    # -- running ---------------------------------------------------------------------------------
    def draw_trials(self, output_dir: str) -> int | None:
        """K for this job: read from tuning_plan.json if the folder has one (never drawn again), else
        drawn now and written there before any trial runs. None for hyperband (its schedule)."""
        path = os.path.join(output_dir, PRIVATE_DIR, TUNING_PLAN_FILE)
        plan = self.plan_record(None)
        if os.path.isfile(path):
            with open(path) as f:
                stored = json.load(f)
            mismatched = [k for k in ("tuner", "objective", "trial_count", "max_trials", "space")
                          if json.dumps(stored.get(k), sort_keys=True, default=str)
                          != json.dumps(plan[k], sort_keys=True, default=str)]
            if mismatched:
                raise ConfigError(f"output_dir: {output_dir} holds a tuning job with another {', '.join(mismatched)}; "
                                  "use a new folder")
            return stored["trials_drawn"]
        k = None if self.tuner == "hyperband" else self.trials.sample(np.random.default_rng(self.seed))
        if k is not None and self.max_trials is not None:
            plan["trials_drawn_uncapped"] = k
            k = min(k, self.max_trials)
        write_json(path, {**plan, "trials_drawn": k})
        return k

    def plan_record(self, k: int | None) -> dict:
        return {"tuner": self.tuner, "objective": dataclasses.asdict(self.objective),
                "trial_count": dataclasses.asdict(self.trials), "max_trials": self.max_trials,
                "space": {n: dict(s) for n, s in self.space.items()}, "trials_drawn": k,
                "epsilon_one_trial": rdp_epsilon(self.worst_trial_rdp, self.delta), "delta": self.delta}

    def _oracle(self, k: int | None) -> kt.Oracle:
        hp = kt.HyperParameters()
        define(hp, self.space)  # declared up front: the first trial is drawn too, not the defaults
        objective = kt.Objective(self.objective.name, self.objective.direction)
        common = dict(objective=objective, seed=self.seed, hyperparameters=hp, max_retries_per_trial=0)
        if self.tuner == "random":
            return IIDRandomSearchOracle(max_trials=max(k, 1), **common)
        if self.tuner == "bayesian":
            return kt.oracles.BayesianOptimizationOracle(max_trials=max(k, 1), **common)
        return kt.oracles.HyperbandOracle(max_epochs=max(self.space[self.budget_key]["values"]),
                                          hyperband_iterations=1, **common)

    def run(self, output_dir: str, poll_seconds: float = 0.2) -> dict:
        """Runs the job (or, in distributed tuning, this process's part of it). The chief or a single
        process writes private/tuning.json (every trial, K) and what the job releases (`release`),
        and returns the released record; a worker returns its role and tuner id (its trials: private/)."""
        worker = is_worker()
        if not worker:  # the chief (or a single process) accounts the job and refuses before any output
            self.check_objective()
        os.makedirs(output_dir, exist_ok=True)
        k = None if worker else self.draw_trials(output_dir)
        job = self

        class Tuner(kt.Tuner):
            def run_trial(self, trial, *args, **kwargs):
                values = define(trial.hyperparameters, job.space)
                if "tuner/epochs" in trial.hyperparameters.values:  # hyperband's budget
                    values[job.budget_key] = int(trial.hyperparameters.values["tuner/epochs"])
                trial_dir = os.path.join(output_dir, TRIALS_DIR, trial.trial_id)
                results = job.trial_fn(values, trial_dir)
                try:
                    score = job.objective.score(results)
                except ConfigError as exc:  # the job is misconfigured, not this trial: stop (one process)
                    if dist_utils.has_chief_oracle():
                        raise  # a worker records a failed trial; stopping it would leave the chief waiting
                    raise kt.errors.FatalError(str(exc)) from exc
                write_json(os.path.join(trial_dir, TUNING_TRIAL_FILE),
                            {"trial_id": trial.trial_id, "tuner_id": self.tuner_id, "values": values,
                             "objective": score, "epsilon": results.get("epsilon")})
                return {job.objective.name: score}

            def search(self, *args, **kwargs):
                if dist_utils.is_chief_oracle():
                    self.save()
                    serve(self.oracle, poll_seconds)
                    return
                super().search(*args, **kwargs)

        # Every trial's console output (its progress, keras-tuner's tables of values and scores) names
        # the trials: it goes to private/console-<tuner id>.log (keras-tuner's id: "tuner0" alone).
        console = os.path.join(output_dir, PRIVATE_DIR,
                               TUNING_CONSOLE_FILE.format(os.environ.get("KERASTUNER_TUNER_ID", "tuner0")))
        with console_to(console):
            # A worker's oracle only proxies the chief's (keras-tuner replaces it); its trial cap is unused.
            tuner = Tuner(oracle=self._oracle(1 if worker else k), directory=os.path.join(output_dir, PRIVATE_DIR),
                          project_name="keras_tuner", overwrite=False)
            if k != 0:  # Poisson may draw no trial: nothing is trained or released
                try:
                    tuner.search()  # a trial that raises is recorded as FAILED (keras-tuner) and still counted
                except kt.errors.FatalError as exc:
                    if isinstance(exc.__cause__, ConfigError):
                        raise exc.__cause__ from None
                    raise
        if worker:
            return {"role": "worker", "tuner_id": tuner.tuner_id}
        return self.finish(tuner.oracle, output_dir, k)

    def finish(self, oracle: kt.Oracle, output_dir: str, k: int | None) -> dict:
        """The tuning records from the oracle's record of every trial started, in any process."""
        records = []
        for trial_id in oracle.start_order:
            trial = oracle.trials[trial_id]
            trial_dir = os.path.join(output_dir, TRIALS_DIR, trial_id)
            record = {"trial_id": trial_id, "status": trial.status, "objective": trial.score,
                      "values": {n: trial.hyperparameters.values.get(n) for n in self.space}}
            if os.path.isfile(os.path.join(trial_dir, TUNING_TRIAL_FILE)):
                with open(os.path.join(trial_dir, TUNING_TRIAL_FILE)) as f:
                    record.update(json.load(f))
                if os.path.isfile(os.path.join(trial_dir, RESULTS_FILE)):  # a trial_fn may write none
                    record["results"] = os.path.join(trial_dir, RESULTS_FILE)
            elif trial.message:
                record["error"] = trial.message.strip().splitlines()[-1]
            records.append(record)
        done = [r for r in records if r["status"] == "COMPLETED" and r.get("objective") is not None]
        pick = max if self.objective.direction == "max" else min
        best = pick(done, key=lambda r: r["objective"]) if done else None
        privacy = self.privacy(len(records))
        one = privacy["epsilon_one_trial"]
        for r in records:  # the plan's event must bound what each trial's ledger spent (else a bug: loud)
            eps = r.get("epsilon")
            if eps is not None and math.isfinite(one) and eps > one * (1 + 1e-6) + 1e-9:
                raise RuntimeError(f"trial {r['trial_id']} spent epsilon {eps:.6g}, more than the worst case "
                                   f"{one:.6g} of the space's privacy configurations: the trials are kept in "
                                   f"{output_dir}, tuning.json is not written")
        common = {"tuner": self.tuner, "objective": dataclasses.asdict(self.objective),
                  "space": {n: dict(s) for n, s in self.space.items()}}
        write_json(os.path.join(output_dir, PRIVATE_DIR, TUNING_FILE),
                   {**common, "trials_drawn": k, "trials": records, "best": best, "privacy": privacy})
        return self.release(output_dir, common, best, privacy)

    def release(self, output_dir: str, common: dict, best: dict | None, privacy: dict) -> dict:
        """Writes what the job releases: OUTPUT_DIR/best (the best trial's run, naming no trial:
        `tfpriv.tuning.best_run`) and OUTPUT_DIR/tuning.json (its values and score, the job's
        privacy). Random search's bound covers the best trial alone: the number of trials, the other
        trials and their scores stay in OUTPUT_DIR/private (its index among the trials would bound K
        from below)."""
        best_dir = os.path.join(output_dir, BEST_DIR)
        shutil.rmtree(best_dir, ignore_errors=True)
        released = None
        if best is not None:
            copy_best_run(os.path.join(output_dir, TRIALS_DIR, best["trial_id"]), best_dir,
                          os.path.join(output_dir, PRIVATE_DIR))
            released = {"values": best["values"], "objective": best["objective"], "run": BEST_DIR}
        if self.tuner == "random":
            privacy = {k: v for k, v in privacy.items() if k not in COUNT_KEYS}
        if best is not None:
            add_tuning_to_statement(best_dir, privacy)
        covered = ("not covered by epsilon, which is for the best trial alone: keep it private"
                   if self.tuner == "random" else "epsilon (composition over the trials) covers every trial's model")
        result = {**common, "best": released, "privacy": privacy,
                  "private": f"{PRIVATE_DIR}/: the number of trials, every trial's run, score and console output; "
                             f"{covered}"}
        write_json(os.path.join(output_dir, TUNING_FILE), result)
        return result


def add_tuning_to_statement(run_dir: str, privacy: dict) -> None:
    """Puts the tuning job's budget (`privacy`, as tuning.json releases it) into the privacy statement
    of the released run `run_dir`: its results.json's `privacy_statement` and `saved_model/`'s copy."""
    path = os.path.join(run_dir, RESULTS_FILE)
    if not os.path.isfile(path):  # a trial function that writes no results.json
        return
    with open(path) as f:
        record = json.load(f)
    if record.get("privacy_statement") is None:  # a run that records no statement
        return
    # The budget's public terms, named without the words the released folder must not hold (tests)
    budget = {"job_epsilon": privacy.get("epsilon"), "delta": privacy.get("delta"),
              "accountant": privacy.get("accountant"), "count_distribution": privacy.get("trial_count"),
              "count_cap": privacy.get("max_trials"),
              "bound": ("Papernot & Steinke 2022: a random number of runs, the best one released"
                        if privacy.get("trial_count") else "composition over the runs")}
    statement = {**record["privacy_statement"], "tuning": budget}
    write_json(path, {**record, "privacy_statement": statement}, sort_keys=True)
    if os.path.isdir(os.path.join(run_dir, SAVED_MODEL_DIR)):
        write_statement(os.path.join(run_dir, SAVED_MODEL_DIR), statement)


def serve(oracle: kt.Oracle, poll_seconds: float = 0.2) -> None:
    """The chief: keras-tuner's oracle service on KERASTUNER_ORACLE_IP:PORT until every trial has
    ended and every worker has been told to stop (keras-tuner's own loop re-checks every 20 s)."""
    from concurrent import futures

    import grpc
    from keras_tuner.src import protos
    from keras_tuner.src.distribute import oracle_chief

    server = grpc.server(futures.ThreadPoolExecutor(max_workers=1))
    servicer = oracle_chief.OracleServicer(oracle)
    protos.get_service_grpc().add_OracleServicer_to_server(servicer, server)
    server.add_insecure_port(f"{os.environ['KERASTUNER_ORACLE_IP']}:{os.environ['KERASTUNER_ORACLE_PORT']}")
    server.start()
    try:
        while not (servicer.stop_triggered and oracle_chief.exit_chief(oracle)):
            time.sleep(poll_seconds)
    finally:
        server.stop(grace=1.0)
