"""RDP epsilon and calibration: every order (before e7e1c1e) against only the orders that can hold the
minimum (after), in one process, interleaved, on the settings a run meets (a first epoch's epsilon,
a run's end, a calibration at its start). Checks that both give the same float.

    python experiments/accounting/orders_before_after.py [ROUNDS]

Prints the 1-minute load average before and after and, per setting, the median [IQR] milliseconds
of each side over ROUNDS (default 7) rounds after one warm-up, caches cleared before every call.
"""
import math
import os
import statistics
import sys
import time

import dp_accounting
import numpy as np

from tfpriv.privacy import accounting as A


def every_order_epsilon(segments, delta, curves={}) -> float:
    """The method before: dp_accounting's one-step curve at every order, cached per (q, z), summed."""
    rdp, any_step = np.zeros(len(A.DEFAULT_ORDERS)), False
    for q, noise, steps in segments:
        if steps <= 0 or q <= 0:
            continue
        if noise <= 0:
            return math.inf
        if (q, noise) not in curves:
            curves[q, noise] = A.RDP.curve(A._event(q, noise, 1))
        rdp += int(steps) * curves[q, noise]
        any_step = True
    return float(dp_accounting.rdp.compute_epsilon(A.DEFAULT_ORDERS, rdp, delta)[0]) if any_step else 0.0


class EveryOrder(A.RdpAccounting):
    def _epsilon(self, segments, delta):
        return every_order_epsilon(list(segments), delta)


BEFORE, AFTER = EveryOrder(), A.RdpAccounting()
SETTINGS = {
    "first epoch, bench convnet (q = 0.5, z = 1, 2 steps)": lambda acc: acc.epsilon([(0.5, 1.0, 2)], 1e-5),
    "first epoch, README MLP (q = 64/1437, z = 1, 22 steps)": lambda acc: acc.epsilon([(64 / 1437, 1.0, 22)], 1e-5),
    "first epoch, q = 0.125, z = 1, 8 steps": lambda acc: acc.epsilon([(0.125, 1.0, 8)], 1e-5),
    "run end, MNIST eps 1 (q = 2048/60000, z = 4.46, 4012 steps)": lambda acc: acc.epsilon([(2048 / 60000, 4.46, 4012)], 1e-5),
    "calibration, eps 3, q = 256/60000, 2340 steps": lambda acc: acc.calibrate(3.0, 1e-5, 256 / 60000, 2340),
    "calibration, eps 1, q = 2048/60000, 4012 steps": lambda acc: acc.calibrate(1.0, 1e-5, 2048 / 60000, 4012),
    "calibration, eps 3, q = 0.125, 80 steps": lambda acc: acc.calibrate(3.0, 1e-5, 0.125, 80),
}


def clear() -> None:
    A._ONE_STEP.clear()
    every_order_epsilon.__defaults__[0].clear()
    for cls in (EveryOrder, A.RdpAccounting):
        cls._remembered_epsilon.cache_clear()
        cls._calibrated.cache_clear()


def main(rounds: int) -> None:
    print(f"load average (1 min) {os.getloadavg()[0]:.2f}")
    print("| setting | every order, ms | orders that can hold the minimum, ms | speed-up |\n|---|---|---|---|")
    for name, call in SETTINGS.items():
        times = {"before": [], "after": []}
        for r in range(rounds + 1):
            sides = (("before", BEFORE), ("after", AFTER))
            for label, acc in sides if r % 2 else sides[::-1]:
                clear()
                start = time.perf_counter()
                call(acc)
                if r:
                    times[label].append((time.perf_counter() - start) * 1e3)
        clear()
        assert call(BEFORE) == call(AFTER), name
        cell = {k: f"{statistics.median(v):.1f} [{np.percentile(v, 25):.1f}, {np.percentile(v, 75):.1f}]"
                for k, v in times.items()}
        ratio = statistics.median(times["before"]) / statistics.median(times["after"])
        print(f"| {name} | {cell['before']} | {cell['after']} | {ratio:.1f}× |")
    print(f"load average (1 min) {os.getloadavg()[0]:.2f}")


if __name__ == "__main__":
    main(int(sys.argv[1]) if len(sys.argv) > 1 else 7)
