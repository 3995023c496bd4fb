"""Privacy accounting with dp_accounting (the library behind TF Privacy's analysis).

Every private step is one Poisson-sampled Gaussian mechanism with sampling rate q and the
mode's *effective* noise multiplier (noise std over true sensitivity, `DPConfig`), under
add-or-remove-one adjacency. Steps compose; a `PrivacyLedger` keeps the composed history in
checkpointable variables so a resumed run continues its epsilon instead of restarting it.
The same events are converted to (epsilon, delta) by an `Accountant` of the registry
`ACCOUNTANTS`: "rdp" (default, TF Privacy's orders) or "pld" (privacy-loss distributions: tighter;
discretised at 1e-4, pessimistic rounding, so still an upper bound); `get_accountant(name)`.
"""
from __future__ import annotations

import contextlib
import json
import logging
import math
from typing import Iterable, Iterator, Sequence

import dp_accounting
import numpy as np
import tensorflow as tf

from tfpriv.errors import ConfigError

# TF Privacy's default RDP orders (compute_dp_sgd_privacy_lib).
DEFAULT_ORDERS: tuple[float, ...] = tuple([1 + x / 10.0 for x in range(1, 100)] + list(range(11, 64)) + [128, 256, 512])

Segment = tuple[float, float, int]  # (sampling rate q, effective noise multiplier, steps)
MAX_NOISE = 1000.0  # calibration searches effective noise multipliers in [1e-3, MAX_NOISE]


NON_CONVERGING_ORDER = "_compute_log_a_frac failed to converge"  # dp_accounting's warning, per order


class _NonConvergingOrders(logging.Filter):
    """dp_accounting (>= 0.6) warns once per fractional RDP order whose series does not converge and
    leaves that order out of the minimum over orders; the bound still holds from the others. tfpriv
    computes epsilon every epoch and in each calibration step, so those lines would fill the console."""

    def filter(self, record: logging.LogRecord) -> bool:
        return not str(record.msg).startswith(NON_CONVERGING_ORDER)


@contextlib.contextmanager
def _quiet_orders() -> Iterator[None]:
    """Leaves out dp_accounting's non-converging-order warnings while tfpriv accounts (only then:
    the user's own dp_accounting calls log as before)."""
    logger, quiet = logging.getLogger("absl"), _NonConvergingOrders()
    logger.addFilter(quiet)
    try:
        yield
    finally:
        logger.removeFilter(quiet)


def _event(q: float, noise: float, steps: int) -> dp_accounting.DpEvent:
    return dp_accounting.SelfComposedDpEvent(
        dp_accounting.PoissonSampledDpEvent(q, dp_accounting.GaussianDpEvent(noise)), steps)


def training_event(segments: Iterable[Segment]) -> dp_accounting.DpEvent:
    """The DpEvent of one training run: its Poisson-sampled Gaussian segments, composed."""
    events = [_event(q, noise, int(steps)) for q, noise, steps in segments if steps > 0 and q > 0]
    if any(noise <= 0 for q, noise, steps in segments if steps > 0 and q > 0):
        return dp_accounting.NonPrivateDpEvent()
    return dp_accounting.ComposedDpEvent(events) if events else dp_accounting.NoOpDpEvent()


PLD_DISCRETIZATION = 1e-4


class Accountant:
    """Converts composed Poisson-sampled Gaussian segments to (epsilon, delta); one per method of
    dp_accounting (`ACCOUNTANTS`, by the name the `--accountant` flag and results.json use).

    Example:
        >>> from tfpriv.privacy import get_accountant
        >>> rdp = get_accountant("rdp")
        >>> round(rdp.epsilon([(0.01, 1.1, 1000)], delta=1e-5), 3)   # 1000 steps at q = 0.01, z = 1.1
        1.712
        >>> round(rdp.calibrate(2.0, 1e-5, q=0.01, steps=1000), 3)   # the z that spends 2.0 instead
        1.022
    """

    name: str
    calibration_tolerance: float

    def fresh(self) -> dp_accounting.PrivacyAccountant:
        """A new, empty dp_accounting accountant of this method."""
        raise NotImplementedError

    def _bracket(self, target_epsilon: float, delta: float, q: float, steps: int,
                 history: Sequence[Segment]) -> tuple[float, float]:
        """The effective noise multipliers between which calibration searches."""
        return 1e-3, MAX_NOISE

    def epsilon(self, segments: Iterable[Segment], delta: float) -> float:
        """(epsilon at delta) of the composition of Poisson-sampled Gaussian segments."""
        with _quiet_orders():
            return self._epsilon(segments, delta)

    def _epsilon(self, segments: Iterable[Segment], delta: float) -> float:
        acc = self.fresh()
        any_step = False
        for q, noise, steps in segments:
            if steps <= 0 or q <= 0:
                continue
            if noise <= 0:
                return math.inf
            try:
                acc.compose(_event(q, noise, int(steps)))
            except (ValueError, MemoryError, OverflowError) as exc:  # PLD: too many buckets to discretise
                raise ConfigError(f"accountant: {self.name} cannot account noise multiplier {noise:g} at sampling "
                                  f"rate {q:g} ({exc}); use the rdp accountant") from None
            any_step = True
        if not any_step:
            return 0.0
        return float(acc.get_epsilon(delta))

    def calibrate(self, target_epsilon: float, delta: float, q: float, steps: int,
                  history: Sequence[Segment] = ()) -> float:
        """Smallest effective noise multiplier that keeps `steps` more steps within target epsilon."""
        with _quiet_orders():
            return self._calibrate(target_epsilon, delta, q, steps, history)

    def _calibrate(self, target_epsilon: float, delta: float, q: float, steps: int,
                   history: Sequence[Segment]) -> float:
        if steps <= 0:
            raise ConfigError(f"target_epsilon: calibration needs at least one planned step, got {steps}")
        spent = self.epsilon(history, delta)
        if spent >= target_epsilon:
            raise ConfigError(f"target_epsilon: {target_epsilon:g} is already spent by the resumed run "
                              f"(epsilon {spent:.4g})")

        def make_event(noise: float) -> dp_accounting.DpEvent:
            return dp_accounting.ComposedDpEvent(
                [_event(hq, hn, hs) for hq, hn, hs in history if hs > 0] + [_event(q, noise, steps)])

        if self.fresh().compose(make_event(MAX_NOISE)).get_epsilon(delta) > target_epsilon:
            raise ConfigError(f"target_epsilon: cannot reach epsilon={target_epsilon:g} at delta={delta:g} with "
                              f"q={q:g} over {steps} steps (even an effective noise multiplier of {MAX_NOISE:g} "
                              "gives more)")
        lower, upper = self._bracket(target_epsilon, delta, q, steps, history)
        try:
            return float(dp_accounting.calibrate_dp_mechanism(
                self.fresh, make_event, target_epsilon, delta, dp_accounting.ExplicitBracketInterval(lower, upper),
                tol=self.calibration_tolerance))
        except Exception as exc:  # dp_accounting raises ValueError/RuntimeError when no bracket fits
            raise ConfigError(f"target_epsilon: cannot reach epsilon={target_epsilon:g} at delta={delta:g} "
                              f"with q={q:g} over {steps} steps ({exc})") from None

    def max_steps_within(self, budget: float, delta: float, q: float, noise: float,
                         history: Sequence[Segment] = (), limit: int = 10**9) -> int:
        """Largest number of further steps whose composed epsilon stays <= budget (bisection)."""
        def eps(n: int) -> float:
            return self.epsilon(list(history) + [(q, noise, n)], delta)

        if eps(1) > budget:
            return 0
        lo, hi = 1, 2
        while hi < limit and eps(hi) <= budget:
            lo, hi = hi, hi * 2
        hi = min(hi, limit)
        if eps(hi) <= budget:
            return hi
        while hi - lo > 1:
            mid = (lo + hi) // 2
            if eps(mid) <= budget:
                lo = mid
            else:
                hi = mid
        return lo

    def __repr__(self) -> str:
        return f"get_accountant({self.name!r})"


class RdpAccounting(Accountant):
    """dp_accounting's RDP accountant at TF Privacy's orders (`DEFAULT_ORDERS`), the default: `RDP`.

    Example:
        >>> from tfpriv.privacy.accounting import RDP
        >>> RDP.name, round(RDP.epsilon([(0.01, 1.1, 1000)], 1e-5), 3)
        ('rdp', 1.712)
    """

    name, calibration_tolerance = "rdp", 1e-4

    def fresh(self) -> dp_accounting.PrivacyAccountant:
        return dp_accounting.rdp.RdpAccountant(list(DEFAULT_ORDERS))

    def curve(self, event: dp_accounting.DpEvent) -> np.ndarray:
        """The event's RDP at each of `DEFAULT_ORDERS` (inf where dp_accounting's series does not
        converge): what a composition over a random choice of events (tuning) takes the maximum of."""
        with _quiet_orders():
            accountant = self.fresh()
            accountant.compose(event)
        return np.asarray(accountant._rdp)  # the composed curve; dp_accounting has no public getter


class PldAccounting(Accountant):
    """dp_accounting's privacy-loss-distribution accountant: tighter than RDP; discretised at
    `PLD_DISCRETIZATION` with pessimistic rounding, so still an upper bound.

    Example:
        >>> from tfpriv.privacy.accounting import RDP, PldAccounting
        >>> segments = [(0.01, 1.1, 1000)]
        >>> PldAccounting().epsilon(segments, 1e-5) < RDP.epsilon(segments, 1e-5)
        True
    """

    name, calibration_tolerance = "pld", 1e-3

    def fresh(self) -> dp_accounting.PrivacyAccountant:
        return dp_accounting.pld.PLDAccountant(dp_accounting.NeighboringRelation.ADD_OR_REMOVE_ONE,
                                               value_discretization_interval=PLD_DISCRETIZATION)

    def _bracket(self, target_epsilon, delta, q, steps, history):
        # PLD is at least as tight as RDP: the RDP noise brackets it from above.
        upper = RDP.calibrate(target_epsilon, delta, q, steps, history)
        return upper / 4, upper


RDP = RdpAccounting()
ACCOUNTANTS: dict[str, Accountant] = {"rdp": RDP, "pld": PldAccounting()}


def get_accountant(name: str) -> Accountant:
    """The accountant registered under `name` ("rdp" or "pld"); ConfigError naming `accountant` otherwise.

    Example:
        >>> from tfpriv.privacy import get_accountant
        >>> get_accountant("pld").name
        'pld'
    """
    if name not in ACCOUNTANTS:
        raise ConfigError(f"accountant: must be one of {', '.join(ACCOUNTANTS)}, got {name!r}")
    return ACCOUNTANTS[name]


class _Record(tf.train.experimental.PythonState):
    """The ledger's host-side record, JSON in checkpoints: finished segments and the current
    segment's (q, noise). Python state, not variables: a tf.distribute strategy would mirror a
    variable, and MultiWorkerMirroredStrategy cannot broadcast a string to its workers."""

    def __init__(self):
        self.history: list[list] = []
        self.current: list | None = None

    def serialize(self) -> str:
        return json.dumps({"history": self.history, "current": self.current})

    def deserialize(self, string_value) -> None:
        value = string_value.decode() if isinstance(string_value, bytes) else str(string_value)
        record = json.loads(value)
        self.history, self.current = record["history"], record["current"]


class PrivacyLedger(tf.Module):
    """Composed privacy history, saved by `tf.train.Checkpoint`.

    `record` holds the finished segments and the current segment's mechanism; `steps` counts
    the current segment's steps and is incremented inside the compiled train step, once per
    private update.

    Example:
        >>> from tfpriv.privacy import PrivacyLedger, get_accountant
        >>> ledger = PrivacyLedger()
        >>> ledger.begin(0.01, 1.1)            # sampling rate q, effective noise multiplier
        >>> _ = ledger.steps.assign_add(1000)  # what the train step does, once per private update
        >>> round(ledger.epsilon(1e-5), 3), round(ledger.epsilon(1e-5, get_accountant("pld")), 3)
        (1.712, 1.515)
    """

    def __init__(self, name: str = "privacy_ledger"):
        super().__init__(name=name)
        self.record = _Record()
        # One increment per global step, not per replica, under a tf.distribute strategy.
        self.steps = tf.Variable(0, dtype=tf.int64, trainable=False, name="steps",
                                 aggregation=tf.VariableAggregation.ONLY_FIRST_REPLICA)

    def begin(self, q: float, noise: float) -> None:
        """Starts (or, after a resume with the same mechanism, continues) a segment."""
        current = self.record.current
        if current:
            cq, cn = current
            if math.isclose(cq, q, rel_tol=1e-12) and math.isclose(cn, noise, rel_tol=1e-12):
                return
            self._fold()
        self.record.current = [q, noise]
        self.steps.assign(0)

    def _fold(self) -> None:
        current = self.record.current
        if current and int(self.steps.numpy()) > 0:
            q, noise = current
            self.record.history.append([q, noise, int(self.steps.numpy())])
        self.steps.assign(0)

    def segments(self) -> list[Segment]:
        hist = self.finished_segments()
        if self.record.current:
            q, noise = self.record.current
            hist.append((q, noise, int(self.steps.numpy())))
        return hist

    def finished_segments(self) -> list[Segment]:
        return [tuple(s) for s in self.record.history]

    @property
    def total_steps(self) -> int:
        return sum(s[2] for s in self.segments())

    def epsilon(self, delta: float, accountant: Accountant = RDP) -> float:
        """The accountant's epsilon at `delta` for every segment recorded so far."""
        return accountant.epsilon(self.segments(), delta)
