"""Term-wise noise: the paper's kappa against what add-or-remove-one accounting needs.

For the Fashion-MNIST setting (N=60000, B=256, 10 epochs, delta=1e-5) and target epsilon
1, 3, 10, prints: sigma_eps (DP-SGD noise multiplier for (eps, delta) by RDP), the paper's
kappa = 2 sqrt(log(2/delta)/log(1/delta)) (from its eq. 5), kappa needed by sequential
composition of two (eps/2, delta/2) halves with the correct 2*C2 partition sensitivity,
kappa of tfpriv's joint accounting (sqrt(1 + 2^2)), and the epsilon actually spent when
the paper's kappa is used with the correct sensitivity.

    python experiments/accounting/kappa_table.py
"""
import math
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))  # the repository root

from tfpriv.privacy.accounting import RDP  # noqa: E402

N, B, EPOCHS, DELTA = 60000, 256, 10, 1e-5
q, steps = B / N, EPOCHS * round(N / B)
kappa_paper = 2 * math.sqrt(math.log(2 / DELTA) / math.log(1 / DELTA))
print(f"q = {q:.5f}, steps = {steps}, delta = {DELTA:g}; paper kappa = {kappa_paper:.3f} (independent of epsilon)\n")
print("| target ε | σ_ε (DP-SGD) | σ_{ε/2,δ/2} | κ RDP-exact halves (paper's split, C1+C2 sens.) | κ sequential, correct 2·C2 sens. | κ joint (tfpriv) = √5 | ε spent with paper's κ, correct sens. |")
print("|---|---|---|---|---|---|---|")
for eps in (1.0, 3.0, 10.0):
    s = RDP.calibrate(eps, DELTA, q, steps)
    s_half = RDP.calibrate(eps / 2, DELTA / 2, q, steps)
    k_split = s_half / s
    k_seq = 2 * s_half / s        # the psi half has sensitivity 2*C2: needs twice the noise
    k_joint = math.sqrt(5.0)
    spent = RDP.epsilon([(q, kappa_paper * s / math.sqrt(5.0), steps)], DELTA)
    print(f"| {eps:g} | {s:.3f} | {s_half:.3f} | {k_split:.3f} | {k_seq:.3f} | {k_joint:.3f} | {spent:.2f} |")
