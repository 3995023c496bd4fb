"""`--model=filter`: stage 1 (VAE, frozen) -> stage 2 (filter game per budget/user) -> stage 3 (evaluation).

Filter-only flags are defined here at import time; the common flags (--dataset, --data_dir,
--seed, --latent_dim, --beta, ...) belong to train.py and are read if defined.

Stage 1 is non-private unless `--aggregation=micro` (DP-SGD) or `batch` is given; then the VAE
is trained by the project's `plan_privacy`/`fit_private` with the common DP flags
(`--l2_norm_clip`, `--noise_multiplier` or `--epsilon`, `--delta`, `--sampling`, `--max_epsilon`)
and the filter's `--vae_batch_size` (expected Poisson batch size) and `--vae_epochs`; the run's
top-level epsilon/delta are that VAE's guarantee (see `PRIVACY_SCOPE`). With a private stage 1,
Adult/Abalone features are scaled with public constants only (`--feature_scaling=auto` picks
`public`; an explicit `train`, which uses statistics of the training split, is refused).
"""
from __future__ import annotations

import dataclasses
import json
import os
import shutil
import time

import numpy as np
import tensorflow as tf
from absl import flags, logging

from tfpriv.errors import UsageError
from tfpriv.filter import plots
from tfpriv.filter.architectures import CLASSIFIER_KIND, LATENT_DIMS
from tfpriv.filter.divergence import DIVERGENCES, estimate_precision
from tfpriv.filter.multiuser import User, run_multiuser
from tfpriv.filter.pipeline import FilterConfig, evaluate_codes, run_budget, summarize
from tfpriv.filter.tasks import num_classes_of, resolve_label

FLAGS = flags.FLAGS

DEFAULT_TASKS = {  # dataset -> (private, utility, non-target)
    "mnist": ("digit_ge5", "parity", "circle"),
    "adult": ("gender", "income", None),
    "abalone": ("sex", "rings_gt_10", None),
    "celeba": ("Male", "Smiling", None),
}


def _define(kind: str, name: str, default, help_text: str) -> None:
    if name not in FLAGS:
        getattr(flags, f"DEFINE_{kind}")(name, default, help_text)


_define("integer", "filter_epochs", 1000, "Filter-game epochs (paper: 1000).")
_define("float", "budget", 1.0, "Distortion budget b of the filter (headline metrics are at this budget).")
_define("list", "sweep_budgets", [], "Extra budgets for the accuracy-vs-budget curve, e.g. 0,0.01,0.1,1,10.")
_define("string", "divergence", "kl", "Distortion divergence: kl or chi2.")
_define("string", "private_label", None, "Private label (default per dataset; MNIST: digit, digit_ge5, parity, circle).")
_define("string", "utility_label", None, "Utility label (default per dataset).")
_define("string", "nontarget_label", None, "Optional non-target label to evaluate ('none' to skip).")
_define("float", "utility_weight", 1.0, "β, weight of the utility loss in the filter objective.")
_define("float", "penalty_rho", 10.0, "Initial ρ of the budget penalty (halved every 500 epochs, floor 2).")
_define("string", "filter_type", "linear", "linear or mlp.")
_define("integer", "noise_dim", None, "Filter noise dimension (default: latent dimension).")
_define("integer", "vae_epochs", 10, "Stage-1 VAE epochs.")
_define("integer", "vae_batch_size", 128, "Stage-1 VAE batch size.")
_define("float", "vae_learning_rate", 1e-3, "Stage-1 VAE Adam learning rate.")
_define("integer", "filter_batch_size", 128, "Filter-game batch size (paper: 128; CelebA 24).")
_define("float", "filter_learning_rate", 1e-3, "Filter-game Adam learning rate (paper: 1e-3; CelebA 2e-4).")
_define("integer", "filter_train_subset", 0, "Train the filter on the first N training codes (0: all).")
_define("integer", "filter_eval_epochs", 30, "Epochs of the fresh stage-3 classifiers.")
_define("integer", "filter_eval_min_steps", 3000, "Minimum updates of each stage-3 classifier.")
_define("string", "filter_classifier", None, "Classifier: mlp or linear (default per dataset).")
_define("float", "filter_delta", 1e-5, "δ at which the filter's RDP is converted to ε.")
_define("boolean", "gaussian_baseline", True, "Also evaluate the Gaussian mechanism at each budget.")
_define("boolean", "filter_plots", True, "Write PNG figures.")
_define("integer", "num_users", 1, "Users with their own filter (>1: multi-user run).")
_define("list", "filter_users", [], "private:utility per user, e.g. digit_ge5:parity,parity:digit_ge5.")
_define("integer", "filter_num_parts", 10, "Multi-user: equal parts of the training set; user k owns part k.")
_define("integer", "repeats", 1, "Independent filter trainings (seeds) per budget.")
_define("string", "adversary_objective", "ce", "Filter's privacy loss: ce (maximise adversary CE, paper) or confusion (CE to uniform).")
_define("integer", "adversary_steps", 1, "Adversary updates per filter update.")
_define("float", "filter_ema", 0.0, "Release with a moving average of the filter weights, this decay (0: last iterate, paper).")
_define("float", "robust_decoder", 0.0, "Weight of the eq.-14 Lipschitz decoder term in stage 1 (0: off).")


_COMMON_OVERRIDES: dict = {}


def _common(name: str, default):
    """A common flag owned by train.py (or a `run(common=...)` value), else `default`."""
    if name in _COMMON_OVERRIDES:
        return _COMMON_OVERRIDES[name]
    if name in FLAGS and FLAGS[name].value is not None:
        return FLAGS[name].value
    return default


def _budgets() -> list[float]:
    out = []
    for raw in [str(FLAGS.budget)] + list(FLAGS.sweep_budgets):
        try:
            b = float(raw)
        except ValueError:
            raise UsageError(f"--sweep_budgets: not a number: {raw!r}") from None
        if not b >= 0:
            flag = "--budget" if raw == str(FLAGS.budget) else "--sweep_budgets"
            raise UsageError(f"{flag}: must be >= 0, got {b:g}")
        out.append(b)
    return sorted(set(out))


def validate_flags() -> dict:
    """Checks every filter flag; raises UsageError (nothing written yet) on the first bad one."""
    budgets = _budgets()
    checks = [
        ("filter_epochs", FLAGS.filter_epochs >= 0, ">= 0"), ("vae_epochs", FLAGS.vae_epochs >= 0, ">= 0"),
        ("repeats", FLAGS.repeats >= 1, ">= 1"), ("num_users", FLAGS.num_users >= 1, ">= 1"),
        ("utility_weight", FLAGS.utility_weight >= 0, ">= 0"), ("penalty_rho", FLAGS.penalty_rho > 0, "> 0"),
        ("filter_batch_size", FLAGS.filter_batch_size >= 1, ">= 1"), ("vae_batch_size", FLAGS.vae_batch_size >= 1, ">= 1"),
        ("filter_learning_rate", FLAGS.filter_learning_rate > 0, "> 0"), ("vae_learning_rate", FLAGS.vae_learning_rate > 0, "> 0"),
        ("filter_train_subset", FLAGS.filter_train_subset >= 0, ">= 0"), ("filter_eval_epochs", FLAGS.filter_eval_epochs >= 1, ">= 1"),
        ("robust_decoder", FLAGS.robust_decoder >= 0, ">= 0"), ("filter_num_parts", FLAGS.filter_num_parts >= 2, ">= 2"),
        ("filter_delta", 0 < FLAGS.filter_delta < 1, "in (0, 1)"),
        ("filter_eval_min_steps", FLAGS.filter_eval_min_steps >= 0, ">= 0"),
    ]
    for name, ok, rule in checks:
        if not ok:
            raise UsageError(f"--{name}: must be {rule}, got {FLAGS[name].value}")
    if FLAGS.noise_dim is not None and FLAGS.noise_dim < 1:
        raise UsageError(f"--noise_dim: must be >= 1, got {FLAGS.noise_dim}")
    if FLAGS.divergence not in DIVERGENCES:
        raise UsageError(f"--divergence: must be one of {', '.join(DIVERGENCES)}, got {FLAGS.divergence!r}")
    if FLAGS.filter_type not in ("linear", "mlp"):
        raise UsageError(f"--filter_type: must be linear or mlp, got {FLAGS.filter_type!r}")
    if FLAGS.filter_classifier not in (None, "mlp", "linear"):
        raise UsageError(f"--filter_classifier: must be mlp or linear, got {FLAGS.filter_classifier!r}")
    dataset = _common("dataset", None)
    if dataset is None:
        raise UsageError("--dataset: required for --model=filter")
    if dataset not in DEFAULT_TASKS:
        raise UsageError(f"--dataset: the filter supports {', '.join(DEFAULT_TASKS)}, got {dataset!r}")
    stage1_dp = _stage1_dp_flags()
    from tfpriv.data.uci import resolve_feature_scaling
    feature_scaling = resolve_feature_scaling(_common("feature_scaling", "auto"), dataset,
                                              private=stage1_dp is not None)
    if FLAGS.adversary_objective not in ("ce", "confusion"):
        raise UsageError(f"--adversary_objective: must be ce or confusion, got {FLAGS.adversary_objective!r}")
    if not 0.0 <= FLAGS.filter_ema < 1.0:
        raise UsageError(f"--filter_ema: must be in [0, 1), got {FLAGS.filter_ema}")
    if FLAGS.adversary_steps < 1:
        raise UsageError(f"--adversary_steps: must be >= 1, got {FLAGS.adversary_steps}")
    users = []
    if FLAGS.num_users > 1:
        specs = list(FLAGS.filter_users)
        if not specs:
            p, u, _ = DEFAULT_TASKS[dataset]
            p, u = FLAGS.private_label or p, FLAGS.utility_label or u
            specs = [f"{p}:{u}" if k % 2 == 0 else f"{u}:{p}" for k in range(FLAGS.num_users)]
        if len(specs) != FLAGS.num_users or any(s.count(":") != 1 for s in specs):
            raise UsageError(f"--filter_users: need {FLAGS.num_users} entries private:utility, got {specs}")
        if FLAGS.num_users > FLAGS.filter_num_parts:
            raise UsageError(f"--num_users: must be <= --filter_num_parts={FLAGS.filter_num_parts}, got {FLAGS.num_users}")
        users = [User(*s.split(":")) for s in specs]
    return {"budgets": budgets, "dataset": dataset, "users": users, "stage1_dp": stage1_dp,
            "feature_scaling": feature_scaling}


STAGE1_AGGREGATIONS = ("none", "micro", "batch")
_DP_ONLY_FLAGS = ("epsilon", "max_epsilon", "noise_multiplier", "l2_norm_clip", "delta")


def _given(name: str) -> bool:
    """Whether a common flag was set (on the command line / flag file, or in `run(common=...)`)."""
    return name in _COMMON_OVERRIDES or (name in FLAGS and FLAGS[name].present > 0)


def _stage1_dp_flags() -> dict | None:
    """The stage-1 VAE's DP settings from the common flags, or None for a non-private stage 1.

    `--aggregation` is `none` unless given (train.py's default, termwise, is PriVAE's). Allowed:
    micro (DP-SGD: per-example clip of the whole per-example ELBO, sensitivity 1) and batch (the
    batch's gradient clipped as one group, sensitivity 2). termwise is refused: the stage-1 VAE
    has no batch-wise term, so it would be micro under another name. The robust-decoder term is
    per-example (its z' and t are drawn per example), so it is allowed; the engine checks on the
    first batch that every per-example term depends on its own example only."""
    from tfpriv.privacy.config import DPConfig
    aggregation = _common("aggregation", "none") if _given("aggregation") else "none"
    if aggregation == "termwise":
        raise UsageError("--aggregation: termwise needs a batch-wise term and the filter's stage-1 VAE has none "
                         "(it would be micro); use micro, batch or none")
    if aggregation not in STAGE1_AGGREGATIONS:
        raise UsageError(f"--aggregation: the filter's stage-1 VAE supports {', '.join(STAGE1_AGGREGATIONS)}, "
                         f"got {aggregation!r}")
    if aggregation == "none":
        for name in _DP_ONLY_FLAGS:
            if _given(name):
                raise UsageError(f"--{name}: only applies to a private stage-1 VAE (--aggregation=micro or batch), "
                                 "got --aggregation=none")
        return None
    if FLAGS.vae_epochs < 1:
        raise UsageError(f"--vae_epochs: must be >= 1 for a private stage-1 VAE, got {FLAGS.vae_epochs}")
    seed = _common("seed", None)
    config = DPConfig(aggregation=aggregation, l2_norm_clip=float(_common("l2_norm_clip", 1.0)),
                      noise_multiplier=float(_common("noise_multiplier", 3.5)), batch_clip=0.0, num_partitions=1,
                      clipping=_common("clipping", "fast"), clipped_sum=_common("clipped_sum", "bookkeeping"),
                      seed=None if seed is None else int(seed))  # raises ConfigError (a UsageError) on bad values
    target = _common("epsilon", None) if _given("epsilon") else None
    return {"config": config, "sampling": _common("sampling", "poisson"), "delta": _common("delta", None),
            "target_epsilon": None if target is None else float(target),
            "max_epsilon": _common("max_epsilon", None), "sampling_seed": None if seed is None else int(seed)}


def _labels(ds, dataset: str):
    p, u, n = DEFAULT_TASKS[dataset]
    names = {"private": FLAGS.private_label or p, "utility": FLAGS.utility_label or u,
             "nontarget": FLAGS.nontarget_label if FLAGS.nontarget_label is not None else n}
    if names["nontarget"] in (None, "none", ""):
        names.pop("nontarget")
    flag = {"private": "--private_label", "utility": "--utility_label", "nontarget": "--nontarget_label"}
    tr = {r: resolve_label(ds.labels_train, v, flag[r]) for r, v in names.items()}
    te = {r: resolve_label(ds.labels_test, v, flag[r]) for r, v in names.items()}
    return names, tr, te, {r: num_classes_of(tr[r], te[r]) for r in tr}


def run(output_dir: str, common: dict | None = None) -> dict:
    """Runs stage 1 -> 2 -> 3 from FLAGS, writes figures and results.json into output_dir.

    `common` supplies values of train.py's common flags (dataset, data_dir, seed, latent_dim,
    beta, aggregation) for callers without train.py, e.g. tests; FLAGS are used otherwise."""
    _COMMON_OVERRIDES.clear()
    _COMMON_OVERRIDES.update(common or {})
    from tfpriv.data import load_dataset
    from tfpriv.filter.stage1 import build_stage1_vae, plan_stage1_privacy, train_stage1
    from tfpriv.training.runner import read_ledger
    from tfpriv.training.results import write_results

    checked = validate_flags()
    dataset, budgets, users = checked["dataset"], checked["budgets"], checked["users"]
    seed = int(_common("seed", 0))
    ds = load_dataset(dataset, _common("data_dir", None), seed=seed, feature_scaling=checked["feature_scaling"])
    names, ytr, yte, ncls = _labels(ds, dataset)  # label errors surface before any output
    t_start = time.time()

    latent_dim = _common("latent_dim", None) or LATENT_DIMS[dataset]
    beta = float(_common("beta", 1.0))
    vae, plan, dp = None, None, checked["stage1_dp"]
    if dp is not None:  # plan (and refuse) before anything is trained or written
        tf.random.set_seed(seed)
        vae, _ = build_stage1_vae(ds, latent_dim, beta, FLAGS.robust_decoder)
        plan = plan_stage1_privacy(vae, dp["config"], len(ds.x_train), FLAGS.vae_batch_size, FLAGS.vae_epochs,
                                   dp["sampling"], dp["delta"], dp["target_epsilon"], dp["max_epsilon"],
                                   history=read_ledger(os.path.join(output_dir, "stage1")))
    existed = os.path.exists(output_dir)
    if plan is not None:
        os.makedirs(output_dir, exist_ok=True)
        with open(os.path.join(output_dir, "privacy_plan.json"), "w") as f:
            json.dump({**plan.summary(), "planned_steps": plan.planned_steps, "privacy_scope": PRIVACY_SCOPE,
                       "feature_scaling": checked["feature_scaling"]},
                      f, indent=2, default=str)
    try:
        stage1 = train_stage1(ds, latent_dim, FLAGS.vae_epochs, FLAGS.vae_batch_size, FLAGS.vae_learning_rate,
                              beta=beta, robust_decoder=FLAGS.robust_decoder, seed=seed, plan=plan, vae=vae,
                              checkpoint_dir=os.path.join(output_dir, "stage1") if plan else None,
                              sampling_seed=dp["sampling_seed"] if dp else None,
                              verbose=int(_common("verbose", 0)) if plan else 0)
    except UsageError:  # e.g. the engine's first-batch check: leave no half-written run behind
        if not existed:
            shutil.rmtree(output_dir, ignore_errors=True)
        raise
    codes_train, _ = stage1.encode(ds.x_train)
    codes_test, _ = stage1.encode(ds.x_test)
    precision = estimate_precision(codes_train)
    os.makedirs(output_dir, exist_ok=True)

    cfg = FilterConfig(filter_type=FLAGS.filter_type, noise_dim=FLAGS.noise_dim, divergence=FLAGS.divergence,
                       utility_weight=FLAGS.utility_weight, rho_init=FLAGS.penalty_rho, epochs=FLAGS.filter_epochs,
                       batch_size=FLAGS.filter_batch_size, learning_rate=FLAGS.filter_learning_rate,
                       classifier_kind=FLAGS.filter_classifier or CLASSIFIER_KIND[dataset],
                       eval_epochs=FLAGS.filter_eval_epochs, eval_min_steps=FLAGS.filter_eval_min_steps,
                       rdp_delta=FLAGS.filter_delta, seed=seed,
                       adversary_objective=FLAGS.adversary_objective, adversary_steps=FLAGS.adversary_steps,
                       ema_decay=FLAGS.filter_ema)
    raw = evaluate_codes(codes_train, codes_test, ytr, yte, ncls, cfg)
    logging.info("raw codes: %s", raw)
    info = {k: v for k, v in stage1.info.items() if k != "vae"}
    results = {
        "model": "filter", "dataset": dataset, **_stage1_privacy_record(info),
        "feature_scaling": checked["feature_scaling"],
        "epochs": FLAGS.vae_epochs, "stage1": info, "labels": names,
        "num_classes": ncls, "latent_source": "encoder mean", "covariance": "empirical covariance of training codes",
        "raw_metrics": raw, "filter_config": dataclasses.asdict(cfg), "metrics_source": _metrics_source(),
    }

    if users:
        mu = run_multiuser(codes_train, codes_test, ds.labels_train, ds.labels_test, users, precision,
                           dataclasses.replace(cfg, budget=FLAGS.budget), FLAGS.filter_num_parts)
        results["multiuser"] = mu
        u1 = mu["users"][0]
        results["metrics"] = {k: u1["released"][k] for k in
                              ("private_accuracy", "private_auroc", "utility_accuracy", "utility_auroc", "mutual_information")}
        results["filter_rdp"], results["filter_epsilon"] = u1["filter_rdp"], u1["filter_epsilon"]
        results["filter_delta"] = FLAGS.filter_delta
    else:
        sub = slice(0, FLAGS.filter_train_subset or len(codes_train))
        sweep, runs = [], []
        for b in budgets:
            per = []
            for r in range(FLAGS.repeats):
                rc = dataclasses.replace(cfg, budget=b, seed=seed + r)
                t0 = time.time()
                res = _run_one(codes_train, codes_test, ytr, yte, ncls, precision, rc, sub)
                res["seconds"] = time.time() - t0
                logging.info("budget %g repeat %d: %s", b, r, {k: v for k, v in res["filter"].items() if k != "filter_rdp"})
                per.append(res)
            sweep.append(_aggregate(b, per))
            runs.append(per)
        head = budgets.index(FLAGS.budget)
        head_runs = runs[head]
        results["sweep"] = sweep
        results["metrics"] = {k: v["mean"] for k, v in sweep[head]["filter"].items()}
        results["metrics_std"] = {k: v["std"] for k, v in sweep[head]["filter"].items()}
        results["filter_rdp"] = head_runs[0]["filter"]["filter_rdp"]
        results["filter_epsilon"] = head_runs[0]["filter"]["filter_epsilon"]
        results["filter_delta"] = FLAGS.filter_delta
        results["filter_train_examples"] = len(codes_train[sub])
        results["filter_seconds"] = [r["seconds"] for r in head_runs]
        if FLAGS.filter_plots:
            _figures(output_dir, dataset, sweep, codes_test, head_runs[0], yte, stage1, ds)
    results["wall_seconds"] = time.time() - t_start
    write_results(output_dir, results)
    return results


PRIVACY_SCOPE = (
    "epsilon/delta: record-level (add-or-remove-one) DP of the stage-1 VAE's weights with respect to the "
    "training examples it was fitted on (RDP accountant, Poisson-sampled Gaussian). Not covered: the "
    "per-user stage 2 (each user's filter is fitted on that user's own codes; its label-change RDP is "
    "filter_rdp / filter_epsilon) and the stage-3 evaluation. The data loader's preprocessing is inside the "
    "guarantee: with a private stage 1, Adult/Abalone features are scaled with public constants only "
    "(feature_scaling = public: the public schema, census top-codes, abalone.names' published Mean/SD), "
    "never with statistics of the training split.")


def _stage1_privacy_record(info: dict) -> dict:
    """Top-level privacy keys of results.json: the stage-1 VAE's guarantee (inf when non-private)."""
    p = info.get("privacy")
    if not p:
        return {"aggregation": "none", "epsilon": float("inf"), "delta": None, "noise_multiplier": 0.0,
                "effective_noise_multiplier": 0.0, "sampling_rate": None, "steps": info["steps"]}
    return {"aggregation": p["aggregation"], "epsilon": p["epsilon"], "delta": p["delta"],
            "noise_multiplier": p["noise_multiplier"], "effective_noise_multiplier": p["effective_noise_multiplier"],
            "sampling_rate": p["sampling_rate"], "sampling": p["sampling"], "l2_norm_clip": p["l2_norm_clip"],
            "target_epsilon": p["target_epsilon"], "steps": p["steps"], "privacy_scope": PRIVACY_SCOPE}


def sample(output_dir: str) -> dict:
    """`--mode=sample` has no meaning for the filter (it privatizes given data, it does not sample)."""
    raise UsageError("--mode: sample is not supported for --model=filter; use --mode=train")


def _metrics_source() -> str:
    from tfpriv.filter.evaluation import metrics_source
    return metrics_source()


def _run_one(codes_train, codes_test, ytr, yte, ncls, precision, cfg, sub):
    """Filter trained on the subset `sub` of train codes; release/evaluation on all codes."""
    from tfpriv.filter import pipeline
    t0 = time.time()
    game = pipeline.train_filter(codes_train[sub], ytr["private"][sub], ytr["utility"][sub],
                                 ncls["private"], ncls["utility"], precision, cfg)
    train_seconds = time.time() - t0
    res = pipeline.release_and_evaluate(game, codes_train, codes_test, ytr, yte, ncls, precision, cfg,
                                        gaussian=FLAGS.gaussian_baseline)
    res["filter_train_seconds"] = train_seconds
    return res


def _aggregate(budget: float, per: list[dict]) -> dict:
    out = {"budget": budget, "repeats": len(per)}
    for method in ("filter", "gaussian", "gaussian_cov"):
        if method in per[0]:
            keys = [k for k, v in per[0][method].items() if isinstance(v, (int, float)) and v is not None]
            out[method] = {k: summarize([p[method][k] for p in per]) for k in keys}
    out["filter_train_seconds"] = [p["filter_train_seconds"] for p in per]
    return out


def _figures(output_dir, dataset, sweep, codes_test, run0, yte, stage1, ds):
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
