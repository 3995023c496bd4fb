"""Privacy accounting with dp_accounting (the library behind TF Privacy's analysis).

A private step is a Gaussian mechanism with the mode's *effective* noise multiplier z (noise std
over true sensitivity, `DPConfig`) under add-or-remove-one adjacency; how its batch was drawn decides
what the step is to the accountant (`SCHEMES`, derived in docs/privacy.md, "Sampling schemes"):
a Poisson-sampled Gaussian at rate q for Poisson batches, a Gaussian at z/2 (no amplification; a
record's insertion may shift batch boundaries, so a batch can change by one record in and one out)
for any other batches, one such Gaussian per epoch for tfpriv's shuffler. Steps compose; a
`PrivacyLedger` keeps the history, one segment per (scheme, q, z), in checkpointable state so a
resumed run continues its epsilon instead of restarting it.
The same events are converted to (epsilon, delta) by an `Accountant` of the registry
`ACCOUNTANTS`: "rdp" (default, TF Privacy's orders) or "pld" (privacy-loss distributions: tighter;
discretised at 1e-3, pessimistic rounding, so still an upper bound); `get_accountant(name)`.
"""
from __future__ import annotations

import abc
import contextlib
import functools
import json
import logging
import math
from typing import Iterable, Iterator, Sequence

import dp_accounting
import numpy as np
import tensorflow as tf
from scipy import optimize

from tfpriv.errors import ConfigError
from tfpriv.registry import Registry

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


# How a segment's batches were drawn, and so what its steps are to the accountant (docs/privacy.md,
# "Sampling schemes"). POISSON: tfpriv's Poisson sampler (arrays, `tfpriv.data.poisson_batches`);
# DECLARED_POISSON: a pipeline the user declares Poisson at the compiled rate (their claim); both are
# Poisson-sampled Gaussians at (q, z). FIXED: any other batches, each record at most once per batch
# (a declared pipeline, `train_on_batch`, a loop calling `train_step`): a Gaussian at z/2 per step.
# SHUFFLE: tfpriv's shuffler (a fresh uniform permutation per epoch, fixed-size batches, the last
# partial batch dropped): a Gaussian at z/2 per epoch touched.
POISSON, DECLARED_POISSON, FIXED, SHUFFLE = "poisson", "poisson_declared", "fixed", "shuffle"
SCHEMES = (POISSON, DECLARED_POISSON, FIXED, SHUFFLE)
# A ledger row that is no step: a one-shot Gaussian on the whole data set (`PrivacyLedger.release`).
RELEASE = "release"


def epochs_touched(first_step: int, steps: int, steps_per_epoch: int) -> int:
    """How many epochs of `steps_per_epoch` batches the global steps [first_step, first_step + steps) reach."""
    if steps <= 0:
        return 0
    return (first_step + steps - 1) // steps_per_epoch - first_step // steps_per_epoch + 1


def mechanisms(scheme: str, q: float, noise: float, steps: int, steps_per_epoch: int = 0,
               first_step: int = 0) -> Segment:
    """(sampling rate, noise multiplier, count) of the dp_accounting events that `steps` steps of a
    scheme are, for batches at compiled rate q and effective noise multiplier z = `noise`.

    FIXED and SHUFFLE batches are not sampled: one record added to the data set may move every later
    batch boundary, so a batch may change by one record in and one out, at most twice the
    add-or-remove sensitivity (triangle inequality): a Gaussian at z/2, rate 1. Under SHUFFLE a
    record's insertion can be coupled to change one batch per epoch (docs/privacy.md), so an epoch
    is one such Gaussian.
    """
    if scheme in (POISSON, DECLARED_POISSON):
        return (q, noise, steps)
    if scheme == FIXED:
        return (1.0, noise / 2, steps)
    if scheme == SHUFFLE:
        if steps_per_epoch < 1:
            raise ConfigError(f"steps_per_epoch: shuffled batches need the batches per epoch, got {steps_per_epoch}")
        return (1.0, noise / 2, epochs_touched(first_step, steps, steps_per_epoch))
    raise ConfigError(f"sampling: must be one of {', '.join(SCHEMES)}, got {scheme!r}")


def _event(q: float, noise: float, steps: int) -> dp_accounting.DpEvent:
    gaussian = dp_accounting.GaussianDpEvent(noise)
    return dp_accounting.SelfComposedDpEvent(gaussian if q >= 1 else dp_accounting.PoissonSampledDpEvent(q, gaussian),
                                             steps)


def training_event(segments: Iterable[Segment]) -> dp_accounting.DpEvent:
    """The DpEvent of one training run: its Poisson-sampled Gaussian segments, composed."""
    events = [_event(q, noise, int(steps)) for q, noise, steps in segments if steps > 0 and q > 0]
    if any(noise <= 0 for q, noise, steps in segments if steps > 0 and q > 0):
        return dp_accounting.NonPrivateDpEvent()
    return dp_accounting.ComposedDpEvent(events) if events else dp_accounting.NoOpDpEvent()


# dp_accounting's default is 1e-4; 1e-3 stated at most 0.1 % more epsilon on six settings of the committed
# experiments (234-4,000 steps; 0.4306 -> 0.4310 at 234 steps, q = 256/60000, z = 0.97) and computes 5-10x faster (a run's
# statement, each epoch's epsilon and every calibration step use it).
PLD_DISCRETIZATION = 1e-3


class Accountant(abc.ABC):
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

    @abc.abstractmethod
    def fresh(self) -> dp_accounting.PrivacyAccountant:
        """A new, empty dp_accounting accountant of this method."""

    def _bracket(self, target_epsilon: float, delta: float, q: float, steps: int,
                 history: tuple[Segment, ...]) -> tuple[float, float]:
        """The effective noise multipliers between which calibration searches."""
        return 1e-3, MAX_NOISE

    def epsilon(self, segments: Iterable[Segment], delta: float) -> float:
        """(epsilon at delta) of the composition of Poisson-sampled Gaussian segments; remembered per
        accountant (a run's statement, results, export and each epoch's log state the same epsilon)."""
        segments = tuple((float(q), float(noise), int(steps)) for q, noise, steps in segments)
        with _quiet_orders():
            return self._remembered_epsilon(segments, float(delta))

    @functools.lru_cache(maxsize=1024)
    def _remembered_epsilon(self, segments: tuple[Segment, ...], delta: float) -> float:
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
        """Smallest effective noise multiplier that keeps `steps` more steps within target epsilon.

        A pure function of its arguments, remembered per accountant: a plan, its resume and a
        synthesizer's fit ask the same question, and the search costs up to seconds."""
        history = tuple((float(hq), float(hn), int(hs)) for hq, hn, hs in history if int(hs) > 0)
        with _quiet_orders():
            return self._calibrated(float(target_epsilon), float(delta), float(q), int(steps), history)

    @functools.lru_cache(maxsize=256)
    def _calibrated(self, target_epsilon: float, delta: float, q: float, steps: int,
                    history: tuple[Segment, ...]) -> float:
        if steps <= 0:
            raise ConfigError(f"target_epsilon: calibration needs at least one planned step, got {steps}")
        spent = self._epsilon(history, delta)
        if spent >= target_epsilon:
            raise ConfigError(f"target_epsilon: {target_epsilon:g} is already spent by the resumed run "
                              f"(epsilon {spent:.4g})")

        def gap(noise: float) -> float:
            return self._epsilon([*history, (q, noise, steps)], delta) - target_epsilon

        unreachable = (f"target_epsilon: cannot reach epsilon={target_epsilon:g} at delta={delta:g} with q={q:g} "
                       f"over {steps} steps")
        if gap(MAX_NOISE) > 0:
            raise ConfigError(f"{unreachable} (even an effective noise multiplier of {MAX_NOISE:g} gives more)")
        lower, upper = self._bracket(target_epsilon, delta, q, steps, history)
        if gap(upper) > 0:
            upper = MAX_NOISE
        if lower > 1e-3 and gap(lower) <= 0:
            lower, upper = 1e-3, lower
        tol = self.calibration_tolerance
        try:  # as dp_accounting.calibrate_dp_mechanism, on `_epsilon` (whose RDP curves are cached)
            noise = optimize.brentq(gap, lower, upper, xtol=tol)
        except ValueError as exc:  # no sign change: even the smallest noise searched spends less
            raise ConfigError(f"{unreachable} ({exc})") from None
        while gap(noise) > 0:  # brentq's root is within tol of the boundary; the answer must not exceed the target
            noise += tol
        return float(noise)

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

    def _bracket(self, target_epsilon, delta, q, steps, history):
        # Poisson subsampling at q < 1 lowers the Gaussian's RDP at every order, so the noise of the
        # same steps without subsampling (cheap curves: closed form) bounds the answer from above.
        # Below, subsampling scales the needed noise by about q (the search widens if it does not).
        if q >= 1:
            return super()._bracket(target_epsilon, delta, q, steps, history)
        try:
            unsampled = self.calibrate(target_epsilon, delta, 1.0, steps, history)
        except ConfigError:  # a history that leaves too little for unsampled steps (subsampled ones may fit)
            return super()._bracket(target_epsilon, delta, q, steps, history)
        return max(1e-3, unsampled * q / 2), unsampled

    def _epsilon(self, segments: Iterable[Segment], delta: float) -> float:
        # dp_accounting composes `steps` steps as `rdp += steps * curve(q, z)` and takes the minimum
        # over orders of its conversion; the same sums over cached one-step values give the same
        # floats. Only the orders that can hold the minimum are computed (`_orders_to_compute`): one
        # fractional order's series costs up to 6 ms at q = 0.125, the whole curve 0.1-0.4 s, and fit
        # computes epsilon every epoch, calibration at every noise it tries.
        steps_of = [(float(q), float(noise), int(steps)) for q, noise, steps in segments if steps > 0 and q > 0]
        if not steps_of:
            return 0.0
        if any(noise <= 0 for _, noise, _ in steps_of):
            return math.inf
        rdp = _composed(steps_of, _FIRST_ORDERS)
        if delta <= 0 or not np.all(rdp > 0):  # zero, negative or NaN values (extreme events): every order
            return self._epsilon_at(steps_of, delta, range(len(DEFAULT_ORDERS)))
        best = float(dp_accounting.rdp.compute_epsilon(_orders(_FIRST_ORDERS), rdp, delta)[0])
        if best <= 0:  # the minimum over every order is 0 as well
            return 0.0
        more = _orders_to_compute(dict(zip(_FIRST_ORDERS, rdp)), _kl_lower_bound(steps_of), best, delta)
        return self._epsilon_at(steps_of, delta, sorted((*_FIRST_ORDERS, *more))) if more else best

    @staticmethod
    def _epsilon_at(segments: list[Segment], delta: float, indices: Iterable[int]) -> float:
        """dp_accounting's conversion over the orders `indices` (positions in `DEFAULT_ORDERS`, ascending)."""
        indices = tuple(indices)
        return float(dp_accounting.rdp.compute_epsilon(_orders(indices), _composed(segments, indices), delta)[0])

    def curve(self, event: dp_accounting.DpEvent) -> np.ndarray:
        """The event's RDP at each of `DEFAULT_ORDERS` (inf where dp_accounting's series does not
        converge): what a composition over a random choice of events (tuning) takes the maximum of."""
        with _quiet_orders():
            accountant = self.fresh()
            accountant.compose(event)
        return np.asarray(accountant._rdp)  # the composed curve; dp_accounting has no public getter


# The RDP orders `RdpAccounting._epsilon` computes first (integers: a closed form, the cheapest, spread
# over the range); any other order's series (the slowest are fractional orders near 1, where
# dp_accounting >= 0.6 may also give up: inf) only if its lower bound can beat their minimum.
_FIRST_ORDERS: tuple[int, ...] = tuple(i for i, a in enumerate(DEFAULT_ORDERS)
                                       if a in (2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 14, 16, 20, 24, 28, 32, 40, 48,
                                                56, 63, 128, 256, 512))
_BOUND_MARGIN = 1e-9  # relative (and, times 1e-3, absolute) slack on the lower bounds: rounding of the series


def _orders(indices: Sequence[int]) -> list[float]:
    return [DEFAULT_ORDERS[i] for i in indices]


def _orders_to_compute(known: dict[int, float], kl: float, best: float, delta: float) -> list[int]:
    """The orders (positions in `DEFAULT_ORDERS`) not in `known` whose epsilon may be below `best`,
    given the composed RDP at the orders `known` (all positive) and a lower bound `kl` on the
    composition's KL divergence (`_kl_lower_bound`).

    A Renyi divergence of order a >= 1 is at least the KL divergence and does not decrease with a;
    the composed log-moment f(a) = (a - 1) RDP(a) is convex in a with f(1) = 0 (a sum over steps of
    log E[L^a]), so it lies above every secant extended beyond its two points. From the two known
    orders nearest below a (or 1 and the nearest) and the two nearest above:
    RDP(a) >= max(kl, RDP(below), f-secant(a) / (a - 1)). dp_accounting's epsilon at a,
    RDP(a) + log1p(-1/a) - log(delta a)/(a - 1) (Balle et al. 2020, Prop. 12), increases with RDP(a):
    an order whose bound exceeds `best` is not the minimum. An order is computed whenever its bound
    allows dp_accounting's KL case (RDP(a) below -log1p(-delta^2): epsilon 0). Infinite values (an
    overflow or a series that did not converge, not a bound) are not used."""
    points = [(1.0, 0.0)] + [(DEFAULT_ORDERS[i], (DEFAULT_ORDERS[i] - 1) * r) for i, r in sorted(known.items())
                             if math.isfinite(r)]

    def extended(p: tuple[float, float], q: tuple[float, float], a: float) -> float:
        return p[1] + (q[1] - p[1]) / (q[0] - p[0]) * (a - p[0])

    kl_case = -math.log1p(-delta * delta)
    more = []
    for i, a in enumerate(DEFAULT_ORDERS):
        if i in known:
            continue
        below = [p for p in points if p[0] < a]
        above = [p for p in points if p[0] > a]
        lower = max(kl, below[-1][1] / (below[-1][0] - 1) if len(below) > 1 else 0.0)
        if len(below) > 1:
            lower = max(lower, extended(below[-2], below[-1], a) / (a - 1))
        if len(above) > 1:
            lower = max(lower, extended(above[0], above[1], a) / (a - 1))
        lower = lower * (1 - _BOUND_MARGIN) - 1e-3 * _BOUND_MARGIN
        if lower <= kl_case or lower + math.log1p(-1 / a) - math.log(delta * a) / (a - 1) <= best:
            more.append(i)
    return more


def _kl_lower_bound(segments: Sequence[Segment]) -> float:
    """A lower bound on the KL divergence of the composed Poisson-sampled Gaussians (Pinsker's
    inequality, KL >= 2 TV^2, per step; KL adds up over steps): a step at rate q and noise z is the
    mixture (1 - q) N(0, z^2) + q N(1, z^2) against N(0, z^2), at total variation q erf(1 / (2 sqrt(2) z))."""
    return sum(steps * 2 * (min(q, 1.0) * math.erf(1 / (2 * math.sqrt(2) * noise))) ** 2
               for q, noise, steps in segments)


def _composed(segments: Sequence[Segment], indices: Sequence[int]) -> np.ndarray:
    """The composed RDP of `segments` at the orders `indices`, as dp_accounting sums it."""
    rdp = np.zeros(len(indices))
    for q, noise, steps in segments:
        rdp += steps * _one_step_rdp(q, noise, tuple(indices))
    return rdp


_ONE_STEP: dict[tuple[float, float], tuple[np.ndarray, np.ndarray]] = {}
_ONE_STEP_MAX = 2048  # (q, noise) pairs remembered


def _one_step_rdp(q: float, noise: float, indices: tuple[int, ...]) -> np.ndarray:
    """dp_accounting's RDP of one step (`_event(q, noise, 1)`) at the orders `indices`, each order's
    series computed once per (q, noise) and remembered."""
    values, known = _ONE_STEP.get((q, noise)) or (np.zeros(len(DEFAULT_ORDERS)), np.zeros(len(DEFAULT_ORDERS), bool))
    missing = [i for i in indices if not known[i]]
    if missing:
        with _quiet_orders():
            accountant = dp_accounting.rdp.RdpAccountant(_orders(missing))
            accountant.compose(_event(q, noise, 1))
        values[missing] = accountant._rdp  # dp_accounting has no public getter
        known[missing] = True
        if len(_ONE_STEP) >= _ONE_STEP_MAX and (q, noise) not in _ONE_STEP:
            _ONE_STEP.pop(next(iter(_ONE_STEP)))
        _ONE_STEP[q, noise] = values, known
    return values[list(indices)]


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
ACCOUNTANTS: Registry[Accountant] = Registry("accountant", error=ConfigError)
ACCOUNTANTS.register("rdp", RDP)
ACCOUNTANTS.register("pld", PldAccounting())


def get_accountant(name: str) -> Accountant:
    """The accountant registered under `name` ("rdp" or "pld"); ConfigError naming `accountant` otherwise.

    Example:
        >>> from tfpriv.privacy import get_accountant
        >>> get_accountant("pld").name
        'pld'
    """
    return ACCOUNTANTS.get(name)


class _Record(tf.train.experimental.PythonState):
    """The ledger's host-side record, JSON in checkpoints: finished segments
    `[q, noise, steps, scheme, steps_per_epoch, first_step]`, the current segment's
    `[q, noise, scheme, steps_per_epoch, first_step]` (records written before schemes existed,
    `[q, noise, steps]` and `[q, noise]`, are Poisson) and the releases `[name, noise]` (records
    written before releases existed have none). Python state, not variables: a tf.distribute
    strategy would mirror a variable, and MultiWorkerMirroredStrategy cannot broadcast a string to
    its workers."""

    def __init__(self):
        self.history: list[list] = []
        self.current: list | None = None
        self.releases: list[list] = []

    def serialize(self) -> str:
        return json.dumps({"history": self.history, "current": self.current, "releases": self.releases})

    def deserialize(self, string_value) -> None:
        value = string_value.decode() if isinstance(string_value, bytes) else str(string_value)
        record = json.loads(value)
        self.releases = [list(row) for row in record.get("releases", [])]
        self.history = [row if len(row) > 3 else [*row, POISSON, 0, 0] for row in record["history"]]
        current = record["current"]
        self.current = current if not current or len(current) > 2 else [*current, POISSON, 0, 0]


class PrivacyLedger(tf.Module):
    """Composed privacy history, saved by `tf.train.Checkpoint`.

    `record` holds the finished segments and the current segment's mechanism (sampling scheme,
    compiled rate q, effective noise multiplier); `steps` counts the current segment's steps and
    is incremented inside the compiled train step, once per private update. `release(name, noise)`
    records a one-shot Gaussian mechanism the run made outside its steps (e.g. DP class means before
    the first step): one event at rate 1, composed with the steps but not counted as one.
    `segments()` is what the accountant composes: the releases, then each segment's steps as the
    events of its scheme (`mechanisms`).

    Example:
        >>> from tfpriv.privacy import PrivacyLedger, get_accountant
        >>> ledger = PrivacyLedger()
        >>> ledger.begin(0.01, 1.1)            # Poisson batches at rate q, effective noise multiplier
        >>> _ = ledger.steps.assign_add(1000)  # what the train step does, once per private update
        >>> round(ledger.epsilon(1e-5), 3), round(ledger.epsilon(1e-5, get_accountant("pld")), 3)
        (1.712, 1.515)
        >>> ledger.begin(0.01, 1.1, "fixed")   # then 10 steps on batches tfpriv did not sample
        >>> _ = ledger.steps.assign_add(10)
        >>> ledger.segments()[-1], ledger.total_steps
        ((1.0, 0.55, 10), 1010)
        >>> ledger.release("class_means", 40.0)  # a Gaussian of std 40 x its sensitivity: not a step
        >>> ledger.segments()[0], ledger.total_steps
        ((1.0, 40.0, 1), 1010)
    """

    def __init__(self, name: str = "privacy_ledger"):
        super().__init__(name=name)
        self.record = _Record()
        # One increment per global step, not per replica, under a tf.distribute strategy.
        self.steps = tf.Variable(0, dtype=tf.int64, trainable=False, name="steps",
                                 aggregation=tf.VariableAggregation.ONLY_FIRST_REPLICA)

    def begin(self, q: float, noise: float, scheme: str = POISSON, steps_per_epoch: int = 0,
              first_step: int = 0) -> None:
        """Starts a segment of `scheme` batches at compiled rate q and effective noise multiplier
        `noise`, or continues the current one if it has the same mechanism (a resumed run).
        SHUFFLE needs `steps_per_epoch` and the global step of the segment's first batch."""
        mechanisms(scheme, q, noise, 0, steps_per_epoch, first_step)  # ConfigError for an unknown scheme
        if scheme != SHUFFLE:  # only the shuffler's events depend on where the epochs fall
            steps_per_epoch = first_step = 0
        def same(row) -> bool:
            return (math.isclose(row[0], q, rel_tol=1e-12) and math.isclose(row[1], noise, rel_tol=1e-12)
                    and row[-3] == scheme and row[-2] == steps_per_epoch)

        current = self.record.current
        if current:
            if same(current):
                return
            self._fold()
        history = self.record.history
        if history and scheme != SHUFFLE and same(history[-1]):
            # nothing ran since that segment (a fit after a fit): it continues
            q, noise, steps, scheme, steps_per_epoch, first_step = history.pop()
            self.record.current = [q, noise, scheme, steps_per_epoch, first_step]
            self.steps.assign(steps)
            return
        self.record.current = [q, noise, scheme, int(steps_per_epoch), int(first_step)]
        self.steps.assign(0)

    def _fold(self) -> None:
        current = self.record.current
        if current and int(self.steps.numpy()) > 0:
            q, noise, scheme, per_epoch, first = current
            self.record.history.append([q, noise, int(self.steps.numpy()), scheme, per_epoch, first])
        self.steps.assign(0)

    def release(self, name: str, noise: float) -> None:
        """Records the release `name`: one Gaussian mechanism whose noise std is `noise` times its
        add-or-remove-one sensitivity, on the whole data set (rate 1). A name is released once."""
        if name in self.released:
            raise ConfigError(f"name: the ledger already holds a release {name!r}")
        if not (math.isfinite(noise) and noise > 0):
            raise ConfigError(f"noise: a release's noise multiplier must be positive and finite, got {noise}")
        self.record.releases.append([str(name), float(noise)])

    @property
    def released(self) -> dict[str, float]:
        """Each release's name and noise multiplier, in the order they were made."""
        return {name: noise for name, noise in self.record.releases}

    @property
    def scheme(self) -> str | None:
        """The current segment's sampling scheme (None before the first `begin`)."""
        return self.record.current[2] if self.record.current else None

    def raw_segments(self, extra_steps: int = 0) -> list[dict]:
        """Every segment as recorded: scheme, sampling_rate, noise_multiplier (effective), steps,
        steps_per_epoch, first_step, and `accounted_as` [rate, noise multiplier, count] (what the
        accountant composes); first the releases (scheme `RELEASE`, 0 steps, their `name`).
        `extra_steps` are added to the current segment (what-if)."""
        rows = [list(r) for r in self.record.history]
        taken = int(self.steps.numpy()) + extra_steps
        if self.record.current and taken > 0:  # a segment begun but without steps spends nothing
            q, noise, scheme, per_epoch, first = self.record.current
            rows.append([q, noise, taken, scheme, per_epoch, first])
        out = [{"scheme": RELEASE, "name": name, "sampling_rate": 1.0, "noise_multiplier": noise, "steps": 0,
                "steps_per_epoch": 0, "first_step": 0, "accounted_as": [1.0, noise, 1]}
               for name, noise in self.record.releases]
        for q, noise, steps, scheme, per_epoch, first in rows:
            out.append({"scheme": scheme, "sampling_rate": q, "noise_multiplier": noise, "steps": steps,
                        "steps_per_epoch": per_epoch, "first_step": first,
                        "accounted_as": list(mechanisms(scheme, q, noise, steps, per_epoch, first))})
        return out

    def segments(self, extra_steps: int = 0) -> list[Segment]:
        """What the accountant composes: (rate, noise multiplier, count) per segment (`mechanisms`)."""
        return [tuple(row["accounted_as"]) for row in self.raw_segments(extra_steps)]

    def finished_segments(self) -> list[Segment]:
        """The releases and the segments before the current one."""
        return self.segments()[:len(self.record.releases) + len(self.record.history)]

    def steps_within(self, budget: float, delta: float, accountant: Accountant = RDP) -> int:
        """How many more steps of the current segment keep epsilon <= budget."""
        q, noise, scheme, per_epoch, first = self.record.current
        taken = int(self.steps.numpy())
        rate, z, _ = mechanisms(scheme, q, noise, 1, per_epoch, first)
        units = accountant.max_steps_within(budget, delta, rate, z, history=self.finished_segments())
        if scheme != SHUFFLE:
            return max(0, units - taken)
        # the last step of the `units`-th epoch the segment reaches
        return max(0, (first // per_epoch + units) * per_epoch - first - taken)

    @property
    def total_steps(self) -> int:
        """Private steps taken, over every segment."""
        return sum(int(row[2]) for row in self.record.history) + (int(self.steps.numpy()) if self.record.current else 0)

    def epsilon(self, delta: float, accountant: Accountant = RDP) -> float:
        """The accountant's epsilon at `delta` for every segment recorded so far."""
        return accountant.epsilon(self.segments(), delta)
