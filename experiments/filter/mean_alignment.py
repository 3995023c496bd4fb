"""Abalone: the KL budget a label-dependent mean shift needs to hide sex from a linear classifier.

For the codes of a trained stage-1 VAE (run dir argv[1]): Σ⁻¹ as in the game (estimate_precision of
the train codes), class means μ_y and shares p_y on train, μ̄ = Σ p_y μ_y. The shift
z → z − t (μ_y − μ̄) (the linear filter's W_y part, no noise) costs D(t) = t² · ½ Σ_y p_y (μ_y − μ̄)ᵀ Σ⁻¹ (μ_y − μ̄)
(KL under the shared Σ, as in tfpriv.filter.divergence). For each t, a fresh multinomial logistic
regression is fitted on the shifted train codes and scored on the shifted test codes.
Prints JSON: D_align (t = 1), majority rate, and rows {t, D, private_accuracy, utility_accuracy}.
"""
import json
import os
import sys

import numpy as np
from sklearn.linear_model import LogisticRegression

from tfpriv.data import load_dataset
from tfpriv.filter.divergence import estimate_precision, mean_divergence
from tfpriv.filter.stage1 import frozen
from tfpriv.filter.tasks import resolve_label
from tfpriv.privae.vae import load_vae

run = sys.argv[1]
ds = load_dataset("abalone", "/work/shared/data", seed=0, feature_scaling="train")
enc = frozen(load_vae(os.path.join(run, "vae")), {}).encode
ztr, zte = enc(ds.x_train)[0].astype(np.float64), enc(ds.x_test)[0].astype(np.float64)
ytr, yte = resolve_label(ds.labels_train, "sex", "x"), resolve_label(ds.labels_test, "sex", "x")
utr, ute = resolve_label(ds.labels_train, "rings_gt_10", "x"), resolve_label(ds.labels_test, "rings_gt_10", "x")
prec = estimate_precision(ztr)
p = np.bincount(ytr) / len(ytr)
mu = np.stack([ztr[ytr == k].mean(0) for k in range(3)])
offs = mu - p @ mu
rows = []
for t in (0.0, 0.1, 0.2, 0.3, 0.5, 0.7, 0.85, 1.0):
    a, b = ztr - t * offs[ytr], zte - t * offs[yte]
    d = mean_divergence("kl", a - ztr, prec)
    priv = LogisticRegression(max_iter=2000).fit(a, ytr).score(b, yte)
    util = LogisticRegression(max_iter=2000).fit(a, utr).score(b, ute)
    rows.append({"t": t, "D_train": d, "private_accuracy": priv, "utility_accuracy": util})
d_align = mean_divergence("kl", offs[ytr], prec)
print(json.dumps({"run": run, "D_align": d_align, "t_at_b0.01": float(np.sqrt(0.01 / d_align)),
                  "test_majority_rate": float(np.bincount(yte).max() / len(yte)), "rows": rows}, indent=1))
