"""`--model=filter`: stage 1 (VAE, frozen) -> stage 2 (filter game per budget/user) -> stage 3 (evaluation).

The filter's settings are declared here (`FilterSettings`; the shared ones, --dataset, --data_dir,
--seed, --latent_dim, --beta and the privacy settings, in tfpriv/jobs/schema.py, with the filter's defaults). Stage 1 is the shared job sequence (tfpriv/jobs/pipeline.py): plan, `fit_private`
in OUTPUT_DIR/stage1 (checkpoints, TensorBoard logs; a re-run resumes), the trained VAE saved in
OUTPUT_DIR/vae; stages 2-3 run on its codes and the headline filter is saved in OUTPUT_DIR/filter.

Stage 1 is non-private unless `--aggregation=micro` (DP-SGD) or `batch` is given; then the VAE
is trained with the shared DP flags (`--l2_norm_clip`, `--noise_multiplier` or `--epsilon`,
`--delta`, `--sampling`, `--max_epsilon`) and the filter's `--vae_batch_size` (expected Poisson
batch size) and `--vae_epochs`; the library's `batch_size`/`epochs` errors name those flags.
The run's top-level epsilon/delta are that VAE's guarantee only (see `PRIVACY_SCOPE`), also written
to OUTPUT_DIR/privacy_plan.json before training; results.json's `guarantees` (printed by train.py)
names each released artefact with its own: the filter is fitted without DP. Codes are released
with filter noise from OS entropy, never recorded, unless --seed asks for a reproducible release.
With a private stage 1, Adult/Abalone features are scaled with public constants only
(`--feature_scaling=auto` picks `public`; an explicit `train`, which uses statistics of the
training split, is refused).
"""
from __future__ import annotations

import dataclasses
import math
import os
import time

import numpy as np
from absl import logging

from tfpriv.errors import UsageError
from tfpriv.filter import serving
from tfpriv.filter.divergence import DIVERGENCES
from tfpriv.jobs import pipeline, schema
from tfpriv.jobs.job import Family, Job, register
from tfpriv.jobs.pipeline import Built, progress
from tfpriv.jobs.schema import PrivateSettings, need, setting
from tfpriv.tuning.space import NEUTRAL_KEYS, FamilyTuning, Objective
from tfpriv.run_folder import CHECKPOINTS_DIR, FILTER_DIR, PRIVACY_PLAN_FILE, STAGE1_DIR, VAE_DIR
from tfpriv.training.results import guarantee

DEFAULT_TASKS = {  # dataset -> (private, utility, non-target)
    "mnist": ("digit_ge5", "parity", "circle"),
    "adult": ("gender", "income", None),
    "abalone": ("sex", "rings_gt_10", None),
    "celeba": ("Male", "Smiling", None),
}
STAGE1_AGGREGATIONS = ("none", "micro", "batch")



@dataclasses.dataclass(frozen=True, kw_only=True)
class FilterSettings(PrivateSettings):
    dataset: str = schema.dataset("mnist")
    aggregation: str = schema.aggregation("none")
    feature_scaling: str = schema.feature_scaling()
    clipped_sum: str = schema.clipped_sum()
    latent_dim: int | None = schema.latent_dim()
    beta: float = schema.beta()
    filter_epochs: int = setting(1000, "Filter-game epochs (paper: 1000).", ge=0)
    budget: float = setting(1.0, "Distortion budget b of the filter (headline metrics are at this budget).")
    sweep_budgets: list = setting([], "Extra budgets for the accuracy-vs-budget curve, e.g. 0,0.01,0.1,1,10.")
    divergence: str = setting("kl", "Distortion divergence: kl or chi2.", choices=DIVERGENCES)
    private_label: str | None = setting(None, "Private label (default per dataset; MNIST: digit, digit_ge5, parity, "
                                        "circle).")
    utility_label: str | None = setting(None, "Utility label (default per dataset).")
    nontarget_label: str | None = setting(None, "Optional non-target label to evaluate ('none' to skip).",
                                          evaluation=True)
    utility_weight: float = setting(1.0, "β, weight of the utility loss in the filter objective.", ge=0)
    penalty_rho: float = setting(10.0, "Initial ρ of the budget penalty (halved every 500 epochs, floor 2).", gt=0)
    filter_type: str = setting("linear", "linear or mlp.", choices=("linear", "mlp"))
    noise_dim: int | None = setting(None, "Filter noise dimension (default: latent dimension).", ge=1)
    vae_epochs: int = setting(10, "Stage-1 VAE epochs.", ge=1)
    vae_batch_size: int = setting(128, "Stage-1 VAE (expected) batch size.", ge=1)
    vae_learning_rate: float = setting(1e-3, "Stage-1 VAE Adam learning rate.", gt=0)
    filter_batch_size: int = setting(128, "Filter-game batch size (paper: 128; CelebA 24).", ge=1)
    filter_learning_rate: float = setting(1e-3, "Filter-game Adam learning rate (paper: 1e-3; CelebA 2e-4).", gt=0)
    filter_train_subset: int = setting(0, "Train the filter on the first N training codes (0: all).", ge=0)
    filter_eval_epochs: int = setting(30, "Epochs of the fresh stage-3 classifiers.", ge=1, evaluation=True)
    filter_eval_min_steps: int = setting(3000, "Minimum updates of each stage-3 classifier.", ge=0, evaluation=True)
    filter_classifier: str | None = setting(None, "Classifier: mlp or linear (default per dataset).",
                                            choices=("mlp", "linear"), evaluation=True)
    filter_delta: float = setting(1e-5, "δ at which the filter's RDP is converted to ε.", gt=0, lt=1)
    gaussian_baseline: bool = setting(True, "Also evaluate the Gaussian mechanism at each budget.", evaluation=True)
    filter_plots: bool = setting(True, "Write PNG figures.", evaluation=True)
    num_users: int = setting(1, "Users with their own filter (>1: multi-user run).", ge=1)
    filter_users: list = setting([], "private:utility per user, e.g. digit_ge5:parity,parity:digit_ge5.")
    filter_num_parts: int = setting(10, "Multi-user: equal parts of the training set; user k owns part k.", ge=2)
    repeats: int = setting(1, "Independent filter trainings (seeds) per budget.", ge=1)
    adversary_objective: str = setting("ce", "Filter's privacy loss: ce (maximise adversary CE, paper) or confusion "
                                       "(CE to uniform).", choices=("ce", "confusion"))
    adversary_steps: int = setting(1, "Adversary updates per filter update.", ge=1)
    filter_ema: float = setting(0.0, "Release with a moving average of the filter weights, this decay (0: last "
                                "iterate, paper).", ge=0, lt=1)
    label_epsilon: float | None = setting(
        None, "Train the (linear) filter so that its label-change epsilon at --filter_delta is at most this "
        "(projection during the game; unset: unconstrained). It protects codes released with secret noise: without "
        "--seed, which makes the release reproducible.")
    robust_decoder: float = setting(0.0, "Weight of the eq.-14 Lipschitz decoder term in stage 1 (0: off).", ge=0)


PRIVACY_SCOPE = (
    "epsilon/delta: record-level (add-or-remove-one) DP of the stage-1 VAE's weights with respect to the "
    "training examples it was fitted on (RDP accountant, Poisson-sampled Gaussian); nothing else. Not covered "
    "(see `guarantees`): stage 2, whose filter is fitted without DP on the codes and labels of the training "
    "records (in a single-user run all of them, or the first --filter_train_subset; in a multi-user run each "
    "user's filter on the records of that user's part), so its weights and saved_model/ are not private; "
    "codes released through a linear filter with secret noise have only the label-change guarantee "
    "filter_rdp / filter_epsilon (one record's private label in its own released code, given that code and "
    "the filter); the stage-3 evaluation. The data loader's preprocessing is inside the guarantee: with a "
    "private stage 1, Adult/Abalone features are scaled with public constants only (feature_scaling = public: "
    "the public schema, census top-codes, abalone.names' published Mean/SD), never with statistics of the "
    "training split.")
STAGE1_SCOPE = "(epsilon, delta)-DP per training record (add-or-remove-one), from the stage-1 ledger"
LABEL_SCOPE = ("label-change (epsilon, delta)-DP: one record's private label in its own released code, given its "
               "code and the filter, with secret filter noise; not record-level DP")


def guarantees(private_stage1: bool, epsilon: float, delta: float, caveat: str | None, filter_epsilons: list,
               filter_delta: float, train_examples: int, multiuser: bool, release_seed: int | None = None) -> dict:
    """What each artefact of a filter run is protected by (results.json `guarantees`, printed by train.py):
    the stage-1 VAE by its ledger's epsilon (if private), the filter by nothing (fitted without DP on the
    training codes), released codes by the largest user's label-change epsilon, which needs secret filter
    noise: `release_seed` (from --seed) makes this run's release reproducible and voids it."""
    vae = (guarantee("stage-1 VAE (encoder, decoder)", STAGE1_SCOPE, epsilon, delta, caveat) if private_stage1 else
           guarantee("stage-1 VAE (encoder, decoder)", "trained without DP (--aggregation=none)"))
    fitted_on = ("each user's filter is fitted without DP on the codes and labels of that user's part of the "
                 "training set" if multiuser else
                 f"fitted without DP on the codes and labels of {train_examples} training records")
    label = max(filter_epsilons, key=lambda e: math.inf if e is None else e)
    released = "codes released through the filter (this run's; saved_model/ privatize_* with a secret seed)"
    if label is None or not math.isfinite(label):
        codes = guarantee(released, "no finite label-change bound (the mlp filter has no closed form)")
    elif release_seed is not None:
        codes = guarantee(released, f"this run's release noise is reproducible from --seed (release seed "
                                    f"{release_seed}), which removes it; with secret noise the label-change "
                                    f"epsilon would be {label:.4g} at delta = {filter_delta:.3g}")
    else:
        codes = guarantee(released, f"{LABEL_SCOPE}; this run's noise: OS entropy, never recorded", label,
                          filter_delta)
    return {
        "vae/": vae,
        "filter/": guarantee("the filter of each user (filter/user<k>/)" if multiuser else "the filter", fitted_on),
        "released codes": codes,
        "saved_model/": guarantee("serving signatures of the stage-1 VAE and the filter", "holds filter/"),
        "metrics": guarantee("stage-3 metrics (metrics, raw_metrics, sweep, multiuser) and figures",
                             "classifiers fitted on training codes and labels, released codes of training records"),
    }


def budgets(s: FilterSettings) -> list[float]:
    out = []
    for raw in [str(s.budget)] + list(s.sweep_budgets):
        try:
            b = float(raw)
        except ValueError:
            raise UsageError(f"--sweep_budgets: not a number: {raw!r}") from None
        if not b >= 0:
            flag = "--budget" if raw == str(s.budget) else "--sweep_budgets"
            raise UsageError(f"{flag}: must be >= 0, got {b:g}")
        out.append(b)
    return sorted(set(out))


def validate(s: FilterSettings) -> dict:
    """Checks every filter setting once (UsageError naming the flag, nothing written yet);
    returns what the checks resolve: budgets, users, feature scaling."""
    resolved = {"budgets": budgets(s)}
    if s.label_epsilon is not None:
        from tfpriv.filter.rdp import max_sensitivity_sq
        if s.filter_type != "linear":
            raise UsageError(f"--label_epsilon: needs --filter_type=linear (no closed-form label RDP for "
                             f"{s.filter_type!r})")
        try:
            max_sensitivity_sq(s.label_epsilon, s.filter_delta)
        except UsageError as err:
            raise UsageError(f"--{err}") from None
    if s.dataset not in DEFAULT_TASKS:
        raise UsageError(f"--dataset: the filter supports {', '.join(DEFAULT_TASKS)}, got {s.dataset!r}")
    if s.aggregation == "termwise":
        raise UsageError("--aggregation: termwise needs a batch-wise term and the filter's stage-1 VAE has none "
                         "(it would be micro); use micro, batch or none")
    need("aggregation", s.aggregation in STAGE1_AGGREGATIONS,
         f"one of {', '.join(STAGE1_AGGREGATIONS)} for the filter's stage-1 VAE", repr(s.aggregation))
    from tfpriv.data.uci import resolve_feature_scaling
    resolved["feature_scaling"] = resolve_feature_scaling(s.feature_scaling, s.dataset, private=s.aggregation != "none")
    users = []
    if s.num_users > 1:
        from tfpriv.filter.multiuser import User
        specs = list(s.filter_users)
        if not specs:
            p, u, _ = DEFAULT_TASKS[s.dataset]
            p, u = s.private_label or p, s.utility_label or u
            specs = [f"{p}:{u}" if k % 2 == 0 else f"{u}:{p}" for k in range(s.num_users)]
        if len(specs) != s.num_users or any(x.count(":") != 1 for x in specs):
            raise UsageError(f"--filter_users: need {s.num_users} entries private:utility, got {specs}")
        if s.num_users > s.filter_num_parts:
            raise UsageError(f"--num_users: must be <= --filter_num_parts={s.filter_num_parts}, got {s.num_users}")
        users = [User(*x.split(":")) for x in specs]
    resolved["users"] = users
    return resolved


class FilterRun(pipeline.TrainingRun):
    """Stage 1 through the shared sequence (in OUTPUT_DIR/stage1); `evaluate` runs stages 2 and 3."""

    train_subdir = STAGE1_DIR

    def validate(self) -> None:
        self.resolved = validate(self.s)
        self.seed = self.s.seed if self.s.seed is not None else 0
        # the filter noise of released codes: secret (OS entropy) unless --seed asks for a reproducible release
        self.release_seed = None if self.s.seed is None else self.s.seed + 7

    def load(self):
        from tfpriv.data import load_dataset
        from tfpriv.filter.tasks import num_classes_of, resolve_label
        s = self.s
        ds = load_dataset(s.dataset, s.data_dir, seed=self.seed, feature_scaling=self.resolved["feature_scaling"])
        p, u, n = DEFAULT_TASKS[s.dataset]
        names = {"private": s.private_label or p, "utility": s.utility_label or u,
                 "nontarget": s.nontarget_label if s.nontarget_label is not None else n}
        if names["nontarget"] in (None, "none", ""):
            names.pop("nontarget")
        flag = {"private": "--private_label", "utility": "--utility_label", "nontarget": "--nontarget_label"}
        # label errors surface before any output
        self.ytr = {r: resolve_label(ds.labels_train, v, flag[r]) for r, v in names.items()}
        self.yte = {r: resolve_label(ds.labels_test, v, flag[r]) for r, v in names.items()}
        self.ncls = {r: num_classes_of(self.ytr[r], self.yte[r]) for r in self.ytr}
        self.label_names = names
        return ds

    def build(self, data) -> Built:
        from tfpriv.compat import keras

        from tfpriv.filter.architectures import LATENT_DIMS
        from tfpriv.filter.stage1 import build_stage1_vae
        s = self.s
        self.started = time.time()
        keras.utils.set_random_seed(self.seed)
        vae = build_stage1_vae(data, s.latent_dim or LATENT_DIMS[s.dataset], s.beta, s.robust_decoder)
        # micro: per-example clip of the whole per-example ELBO (sensitivity 1); batch: the batch's
        # gradient clipped as one group (sensitivity 2). The robust-decoder term is per example (its
        # z' and t are drawn per example); the engine checks before training, on a public batch,
        # that every per-example term depends on its own example only.
        config = s.dp_config(batch_clip=0.0, num_partitions=1)
        # A non-private stage 1 trains on shuffled fixed-size batches unless --sampling is given.
        sampling = s.sampling if config.private or "sampling" in s.given else "shuffle"
        return Built(vae, np.asarray(data.x_train, np.float32), keras.optimizers.Adam(s.vae_learning_rate), config,
                     s.vae_batch_size, s.vae_epochs, sampling)

    def planned(self, plan) -> None:
        if plan.config.private:  # the guarantee and its scope, before anything is trained
            from tfpriv.files import write_json
            write_json(os.path.join(self.output_dir, PRIVACY_PLAN_FILE),
                       {**plan.summary(), "planned_steps": plan.planned_steps, "privacy_scope": PRIVACY_SCOPE,
                        "feature_scaling": self.resolved["feature_scaling"]})

    def evaluate(self) -> dict:
        from tfpriv.filter.architectures import CLASSIFIER_KIND
        from tfpriv.filter.divergence import estimate_precision
        from tfpriv.filter.multiuser import run_multiuser
        from tfpriv.filter.pipeline import FilterConfig, evaluate_codes, save_filter
        from tfpriv.filter.stage1 import frozen, privacy_record
        s, ds, fit, vae = self.s, self.data, self.fit, self.built.model
        info = {"epochs": s.vae_epochs, "epochs_completed": fit["epochs_completed"], "batch_size": s.vae_batch_size,
                "learning_rate": s.vae_learning_rate, "beta": s.beta, "robust_decoder": s.robust_decoder,
                "sampling": self.plan.sampling, "seconds": fit["train_seconds"], "history": fit["history"],
                "steps": fit["steps"], "private": self.plan.config.private,
                "privacy": privacy_record(vae, self.plan, fit)}
        vae.save_vae(os.path.join(self.output_dir, VAE_DIR))
        stage1 = frozen(vae, info)
        codes_train, _ = stage1.encode(ds.x_train)
        codes_test, _ = stage1.encode(ds.x_test)
        precision = estimate_precision(codes_train)
        cfg = FilterConfig(filter_type=s.filter_type, noise_dim=s.noise_dim, divergence=s.divergence,
                           utility_weight=s.utility_weight, rho_init=s.penalty_rho, epochs=s.filter_epochs,
                           batch_size=s.filter_batch_size, learning_rate=s.filter_learning_rate,
                           classifier_kind=s.filter_classifier or CLASSIFIER_KIND[s.dataset],
                           eval_epochs=s.filter_eval_epochs, eval_min_steps=s.filter_eval_min_steps,
                           rdp_delta=s.filter_delta, seed=self.seed, adversary_objective=s.adversary_objective,
                           adversary_steps=s.adversary_steps, ema_decay=s.filter_ema, label_epsilon=s.label_epsilon,
                           release_seed=self.release_seed)
        progress(s, "stage 3 on the raw codes (fresh classifiers, mutual information) ...")
        raw = evaluate_codes(codes_train, codes_test, self.ytr, self.yte, self.ncls, cfg)
        logging.info("raw codes: %s", raw)
        self.extra = {
            "feature_scaling": self.resolved["feature_scaling"], "privacy_scope": PRIVACY_SCOPE,
            "stage1": {k: v for k, v in stage1.info.items() if k != "vae"}, "labels": self.label_names,
            "num_classes": self.ncls, "latent_source": "encoder mean",
            "covariance": "empirical covariance of training codes", "raw_metrics": raw,
            "filter_config": dataclasses.asdict(cfg), "metrics_source": _metrics_source(),
            "filter_delta": s.filter_delta,
        }
        filter_dir = os.path.join(self.output_dir, FILTER_DIR)
        labels = {"private_label": self.label_names["private"], "utility_label": self.label_names["utility"]}
        if self.resolved["users"]:
            progress(s, f"stage 2: one filter per user ({len(self.resolved['users'])} users) ...")
            mu = run_multiuser(codes_train, codes_test, ds.labels_train, ds.labels_test, self.resolved["users"],
                               precision, dataclasses.replace(cfg, budget=s.budget), s.filter_num_parts)
            for k, (game, entry) in enumerate(zip(mu.pop("_games"), mu["users"])):
                save_filter(game, os.path.join(filter_dir, f"user{k + 1}"),
                            {"budget": s.budget, "divergence": s.divergence, "private_label": entry["private_label"],
                             "utility_label": entry["utility_label"], "user": k + 1})
            self.extra["multiuser"] = mu
            u1 = mu["users"][0]
            self.extra["filter_rdp"], self.extra["filter_epsilon"] = u1["filter_rdp"], u1["filter_epsilon"]
            self.extra["guarantees"] = self.guarantees([u["filter_epsilon"] for u in mu["users"]], len(codes_train))
            self.extra["wall_seconds"] = time.time() - self.started
            return {k: u1["released"][k] for k in
                    ("private_accuracy", "private_auroc", "utility_accuracy", "utility_auroc", "mutual_information")}
        sub = slice(0, s.filter_train_subset or len(codes_train))
        sweep, runs = [], []
        all_budgets = self.resolved["budgets"]
        for b in all_budgets:
            per = []
            for r in range(s.repeats):
                progress(s, f"stage 2: filter at budget {b:g}, repeat {r + 1} of {s.repeats} "
                            f"({s.filter_epochs} epochs), then stage 3 ...")
                rc = dataclasses.replace(cfg, budget=b, seed=self.seed + r)
                t0 = time.time()
                res = _run_one(codes_train, codes_test, self.ytr, self.yte, self.ncls, precision, rc, sub,
                               s.gaussian_baseline)
                res["seconds"] = time.time() - t0
                logging.info("budget %g repeat %d: %s", b, r, {k: v for k, v in res["filter"].items() if k != "filter_rdp"})
                per.append(res)
            sweep.append(_aggregate(b, per))
            runs.append(per)
        head_runs = runs[all_budgets.index(s.budget)]
        head = sweep[all_budgets.index(s.budget)]
        save_filter(head_runs[0]["_game"], filter_dir, {"budget": s.budget, "divergence": s.divergence,
                                                        "seed": self.seed, "release_seed": cfg.release_seed,
                                                        "label_epsilon": s.label_epsilon,
                                                        **labels})
        self.extra.update(
            sweep=sweep, metrics_std={k: v["std"] for k, v in head["filter"].items()},
            filter_rdp=head_runs[0]["filter"]["filter_rdp"], filter_epsilon=head_runs[0]["filter"]["filter_epsilon"],
            filter_train_examples=len(codes_train[sub]), filter_seconds=[r["seconds"] for r in head_runs])
        # only repeat 0's filter is saved (filter/) and served
        self.extra["guarantees"] = self.guarantees([head_runs[0]["filter"]["filter_epsilon"]], len(codes_train[sub]))
        if s.filter_plots:
            _figures(self.output_dir, s.dataset, sweep, codes_test, head_runs[0], self.yte, stage1, ds)
        self.extra["wall_seconds"] = time.time() - self.started
        return {k: v["mean"] for k, v in head["filter"].items()}

    def guarantees(self, filter_epsilons: list, train_examples: int) -> dict:
        plan = self.plan
        return guarantees(plan.config.private, self.fit["epsilon"], plan.delta, plan.summary().get("epsilon_caveat"),
                          filter_epsilons, self.s.filter_delta, train_examples, bool(self.resolved["users"]),
                          self.release_seed)

    def record(self) -> dict:
        return self.extra


def run(settings: FilterSettings, output_dir: str) -> dict:
    """Runs stages 1 -> 2 -> 3 under `settings`, writes figures, the models and results.json into output_dir."""
    return FilterRun(settings, output_dir).run()


def _metrics_source() -> str:
    from tfpriv.filter.evaluation import METRICS_SOURCE
    return METRICS_SOURCE


def _run_one(codes_train, codes_test, ytr, yte, ncls, precision, cfg, sub, gaussian: bool):
    """Filter trained on the subset `sub` of train codes; release/evaluation on all codes."""
    from tfpriv.filter import pipeline as filter_pipeline
    t0 = time.time()
    game = filter_pipeline.train_filter(codes_train[sub], ytr["private"][sub], ytr["utility"][sub],
                                        ncls["private"], ncls["utility"], precision, cfg)
    train_seconds = time.time() - t0
    res = filter_pipeline.release_and_evaluate(game, codes_train, codes_test, ytr, yte, ncls, precision, cfg,
                                               gaussian=gaussian)
    res["filter_train_seconds"] = train_seconds
    return res


def _aggregate(budget: float, per: list[dict]) -> dict:
    from tfpriv.filter.pipeline import summarize
    out = {"budget": budget, "repeats": len(per)}
    for method in ("filter", "gaussian", "gaussian_cov"):
        if method in per[0]:
            keys = [k for k, v in per[0][method].items() if isinstance(v, (int, float)) and v is not None]
            out[method] = {k: summarize([p[method][k] for p in per]) for k in keys}
    out["filter_train_seconds"] = [p["filter_train_seconds"] for p in per]
    return out


def _figures(output_dir, dataset, sweep, codes_test, run0, yte, stage1, ds):
    from tfpriv.filter import plots
    if len(sweep) > 1:
        plots.plot_budget_curves(sweep, os.path.join(output_dir, "accuracy_vs_budget.png"),
                                 title=f"{dataset}: filter (solid) vs Gaussian mechanisms (dashed, dotted)")
    rel_test = run0["_release_test"]
    plots.plot_tsne(codes_test, rel_test, yte["private"], yte["utility"], os.path.join(output_dir, "tsne.png"))
    if ds.kind == "image":
        idx = np.arange(12)
        plots.plot_image_grid([("input", ds.x_test[idx]), ("decoded raw", stage1.decode(codes_test[idx])),
                               ("decoded filtered", stage1.decode(rel_test[idx]))],
                              os.path.join(output_dir, "decoded_grid.png"))


# --tune: the default space tunes the filter game (stage 2), which does not change the stage-1 VAE's
# privacy event; stage-1 settings (--vae_batch_size, --vae_epochs, noise) may be added as choices.
TUNING = FamilyTuning(
    space={"filter_learning_rate": {"type": "float", "min": 1e-4, "max": 1e-2, "log": True},
           "utility_weight": {"type": "float", "min": 0.5, "max": 2.0},
           "penalty_rho": {"type": "float", "min": 2.0, "max": 20.0, "log": True}},
    # Stage 3's accuracies come from classifiers fitted on the released training codes, through a
    # filter fitted on the training codes without privacy: they read private data, so they may only
    # choose among trials with a non-private stage 1 (the job then has no epsilon).
    objectives=(Objective("utility_minus_private", "max", {"utility_accuracy": 1.0, "private_accuracy": -1.0},
                          reads="private"),
                Objective("utility_accuracy", "max", reads="private"),
                Objective("private_accuracy", "min", reads="private")),
    neutral=NEUTRAL_KEYS + ("vae_learning_rate", "filter_epochs", "budget", "divergence", "utility_weight",
                            "penalty_rho", "filter_type", "noise_dim", "filter_batch_size", "filter_learning_rate",
                            "filter_ema", "adversary_steps", "adversary_objective"),
    scope=PRIVACY_SCOPE)

JOB = Job(
    names=("filter",), settings_type=FilterSettings, run=run, sample=None,
    training_run=FilterRun, tuning=TUNING,
    # plan_privacy / DPConfig name the stage-1 VAE's batch size, epochs and learning rate plainly.
    flag_names={"batch_size": "vae_batch_size", "epochs": "vae_epochs", "learning_rate": "vae_learning_rate",
                "expected_batch_size": "vae_batch_size", "sampling_rate": "vae_batch_size"},
    checkpoint_subdir=os.path.join(STAGE1_DIR, CHECKPOINTS_DIR),
    summary="generative privacy filter (stage-1 VAE, per-user filters, evaluation)",
)

FAMILY = register(Family(JOB, load=serving.load, serving=serving.serving))
