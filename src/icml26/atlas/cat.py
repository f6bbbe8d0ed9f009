"""The adaptive test (ATLAS, after catR): MFI with randomesque exposure control, EAP updates.

Per examinee:

1. theta0 = 0. Item 1 is drawn uniformly among selectable items with |b - theta0| < 0.5
   (``first_window``; ``start="random_b"``, the paper's); if none, the item with the nearest b.
   ``start="max_info"`` picks item 1 like every later one, by information at theta0 (catsim's
   and catR's usual start).
2. Item t > 1: the ``randomesque`` most informative unadministered items at the current theta
   (Fisher information, :func:`icml26.atlas.bank.item_information`); one drawn uniformly.
3. After each answer theta and SE are updated by EAP (N(0, 1) prior, 61 nodes on [-6, 6]; SE =
   posterior SD, catR's semTheta for EAP). Other estimators ("map", "mle", "wle") solve their
   estimating equation on the administered items (:func:`icml26.atlas.scoring.solve`), with the
   log-likelihood, score, information and Warm's J on the estimation grid kept as running sums
   (one column added per answer), so a step costs O(grid) plus a few O(items) evaluations.
4. Stop when >= ``min_items`` were given and SE <= ``se_stop``, or at ``max_items``.

Items with a <= 0 are skipped by default (``exclude_nonpositive_a``): information grows with a^2,
so MFI would otherwise prefer mis-keyed items with large negative slopes.

Reconstructed accuracy (p-IRT): with n of N items seen,
``acc_hat = (n/N) mean(observed) + ((N - n)/N) mean_{unseen} P_i(theta_hat)``.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np

from icml26.atlas.bank import ItemBank, irf
from icml26.atlas.calibrate import log_irf, quadrature
from icml26.core.errors import UserError

__all__ = ["AdaptiveTest", "CATResult", "acc_hat"]

ESTIMATORS = ("eap", "map", "mle", "wle")
STARTS = ("random_b", "max_info")
GRID_POINTS = 121  # the non-EAP estimators' grid, as estimate_theta's default


def acc_hat(bank: ItemBank, items_idx, responses, theta: float) -> float:
    """p-IRT accuracy over the whole bank from ``responses`` to ``items_idx`` and ``theta``."""
    N = bank.n_items
    seen = np.zeros(N, dtype=bool)
    seen[np.asarray(items_idx, dtype=np.int64)] = True
    n = int(seen.sum())
    observed = float(np.mean(responses)) if n else 0.0
    if n == N:
        return observed
    p_unseen = irf(np.array([theta]), bank.a[~seen], bank.d[~seen], bank.g[~seen])[0]
    return n / N * observed + (N - n) / N * float(p_unseen.mean())


@dataclass
class CATResult:
    """theta, se: final estimates; items: administered ids in order; responses: 0/1 answers;
    trace: one dict per step (item, y, theta, se); acc_hat: p-IRT accuracy over the bank."""

    theta: float
    se: float
    items: list[str]
    responses: list[int]
    trace: list[dict] = field(default_factory=list)
    acc_hat: float = float("nan")

    @property
    def n_items(self) -> int:
        return len(self.items)


class AdaptiveTest:
    """One adaptive test over ``bank``; drive it with ``next_item`` / ``record`` or ``run``.

    Parameters
    ----------
    bank : ItemBank
    se_stop : float > 0 -- stop once SE <= se_stop (and at least min_items given)
    min_items, max_items : int -- 30 and 500 in ATLAS
    randomesque : int >= 1 -- draw among this many most informative items (1 = pure MFI)
    estimator : "eap" | "map" | "mle" | "wle" -- the in-loop ability update
    seed : int or np.random.Generator -- ATLAS uses 123 + model index
    exclude_nonpositive_a : bool -- skip items with a <= 0 (default True)
    allowed : bool array (N,) or None -- restrict selection to these items
    theta0, first_window : start ability and the |b - theta0| window for item 1
    start : "random_b" (the paper: uniform among |b - theta0| < first_window) or "max_info"
        (item 1 chosen by the same information rule as the rest, at theta0)
    """

    def __init__(
        self,
        bank: ItemBank,
        se_stop: float = 0.1,
        min_items: int = 30,
        max_items: int = 500,
        randomesque: int = 5,
        estimator: str = "eap",
        seed=0,
        *,
        exclude_nonpositive_a: bool = True,
        allowed=None,
        theta0: float = 0.0,
        first_window: float = 0.5,
        start: str = "random_b",
        quadpts: int = 61,
        theta_lim: tuple[float, float] = (-6.0, 6.0),
    ) -> None:
        if not se_stop > 0:
            raise UserError(f"`se_stop` must be > 0; got {se_stop}")
        if min_items < 1 or max_items < min_items:
            raise UserError(
                f"need 1 <= min_items <= max_items; got min_items={min_items}, max_items={max_items}"
            )
        if randomesque < 1:
            raise UserError(f"`randomesque` must be >= 1; got {randomesque}")
        if start not in STARTS:
            raise UserError(f"`start` must be one of {', '.join(STARTS)}; got {start!r}")
        if estimator not in ESTIMATORS:
            raise UserError(
                f"`estimator` must be one of {', '.join(ESTIMATORS)}; got {estimator!r}"
            )
        self.bank, self.se_stop, self.min_items = bank, float(se_stop), int(min_items)
        self.max_items, self.randomesque, self.estimator = (
            int(max_items),
            int(randomesque),
            estimator,
        )
        self.rng = seed if isinstance(seed, np.random.Generator) else np.random.default_rng(seed)
        self.theta0, self.first_window, self.start = float(theta0), float(first_window), start
        self.quadpts, self.theta_lim = quadpts, theta_lim
        self.selectable = (
            ~bank.nonpositive_a if exclude_nonpositive_a else np.ones(bank.n_items, bool)
        )
        if not self.selectable.any():
            raise UserError(
                "the bank has no item with a > 0 to select; pass exclude_nonpositive_a=False"
            )
        if allowed is not None:  # e.g. items this examinee can answer (omitted ones excluded)
            self.selectable = self.selectable & np.asarray(allowed, dtype=bool)
        self._nodes, w = quadrature(quadpts, theta_lim)
        self._log_p, self._log_q = _grid_tables(bank, quadpts, tuple(theta_lim))
        self._logpost = np.log(w)
        if estimator != "eap":  # running grid sums of log L, l', I and J over the answers
            self._grid, self._tables = _estimation_tables(bank, tuple(theta_lim))
            self._sums = {k: np.zeros((1, GRID_POINTS)) for k in ("ll", "score", "info", "J")}
        self.available = self.selectable.copy()
        self.items_idx: list[int] = []
        self.responses: list[int] = []
        self.trace: list[dict] = []
        self.theta, self.se = self.theta0, float("inf")

    # ---------------------------------------------------------------------------------------
    @property
    def done(self) -> bool:
        n = len(self.items_idx)
        return (
            n >= self.max_items
            or not self.available.any()
            or (n >= self.min_items and self.se <= self.se_stop)
        )

    def next_index(self) -> int:
        """Column index of the next item (the test must not be done)."""
        if self.done:
            raise RuntimeError("the adaptive test has stopped; read .theta / .se")
        cand = np.flatnonzero(self.available)
        if not self.items_idx and self.start == "random_b":
            dist = np.abs(self.bank.b[cand] - self.theta0)
            near = cand[dist < self.first_window]
            return int(self.rng.choice(near)) if near.size else int(cand[np.argmin(dist)])
        info = self._info_at(self.theta)
        info[~self.available] = -np.inf
        k = min(self.randomesque, cand.size)
        if k == 1:
            return int(np.argmax(info))
        top = np.argpartition(-info, k - 1)[:k]
        return int(top[self.rng.integers(k)])

    def _info_at(self, theta: float) -> np.ndarray:
        """Fisher information (N,) of every item at ``theta`` (1-D fast path of item_information)."""
        a, g = self.bank.a, self.bank.g
        sig = 1.0 / (1.0 + np.exp(-np.clip(theta * a + self.bank.d, -35, 35)))
        p = g + (1.0 - g) * sig
        return a * a * sig * sig * (1.0 - sig) * (1.0 - g) / p  # = a^2 ((P-g)/(1-g))^2 (1-P)/P

    def next_item(self) -> str:
        return self.bank.ids[self.next_index()]

    def record_index(self, j: int, y: int) -> None:
        if y not in (0, 1):
            raise UserError(f"answer to item {self.bank.ids[j]!r} must be 0 or 1; got {y!r}")
        if not self.available[j] and j in self.items_idx:
            raise UserError(f"item {self.bank.ids[j]!r} was already administered")
        self.available[j] = False
        self.items_idx.append(j)
        self.responses.append(int(y))
        self._logpost += self._log_p[:, j] if y else self._log_q[:, j]
        if self.estimator == "eap":
            lp = self._logpost - self._logpost.max()
            w = np.exp(lp)
            w /= w.sum()
            self.theta = float(w @ self._nodes)
            self.se = float(np.sqrt(max(w @ self._nodes**2 - self.theta**2, 0.0)))
        else:
            from icml26.atlas.scoring import objective_target, solve, standard_error

            t, sums = self._tables, self._sums
            sums["ll"][0] += t["log_p"][:, j] if y else t["log_q"][:, j]
            sums["score"][0] += (t["y_score"][:, j] if y else 0.0) - t["score"][:, j]
            sums["info"][0] += t["info"][:, j]
            sums["J"][0] += t["J"][:, j]
            prior = (0.0, 1.0)
            obj, f = objective_target(sums, self._grid, self.estimator, prior)
            idx = np.asarray(self.items_idx)
            a, d, g = self.bank.a[idx], self.bank.d[idx], self.bank.g[idx]
            Y = np.asarray(self.responses, dtype=np.float64)[None]
            obs = np.ones_like(Y, dtype=bool)
            theta, _ = solve(a, d, g, Y, obs, self.estimator, prior, self._grid, obj, f)
            se = standard_error(a, d, g, theta, Y, obs, self.estimator, prior)
            self.theta, self.se = float(theta[0]), float(se[0])
        self.trace.append(
            {"item": self.bank.ids[j], "y": int(y), "theta": self.theta, "se": self.se}
        )

    def record(self, item: str, y: int) -> None:
        self.record_index(int(self.bank.index([item])[0]), y)

    def result(self) -> CATResult:
        return CATResult(
            self.theta,
            self.se,
            [self.bank.ids[j] for j in self.items_idx],
            list(self.responses),
            list(self.trace),
            acc_hat(self.bank, self.items_idx, self.responses, self.theta),
        )

    def run(self, answer: Callable[[str], int]) -> CATResult:
        """Ask ``answer(item_id) -> 0/1`` until a stop rule fires."""
        while not self.done:
            item = self.next_item()
            y = answer(item)
            if isinstance(y, (bool, np.bool_)):
                y = int(y)
            if y not in (0, 1):
                raise UserError(f"answer to item {item!r} must be 0 or 1; got {y!r}")
            self.record(item, int(y))
        return self.result()

    def run_indices(self, answers: np.ndarray) -> CATResult:
        """Simulation shortcut: ``answers`` (N,) holds this examinee's 0/1 answer to every item."""
        while not self.done:
            j = self.next_index()
            self.record_index(j, int(answers[j]))
        return self.result()


_CACHE: dict = {}


def _grid_tables(bank: ItemBank, quadpts: int, theta_lim: tuple) -> tuple[np.ndarray, np.ndarray]:
    """log P and log(1 - P) on the quadrature (Q, N), memoised per bank object (many CATs)."""
    key = (id(bank), quadpts, theta_lim)
    hit = _CACHE.get(key)
    if hit is not None and hit[0] is bank:
        return hit[1], hit[2]
    nodes, _ = quadrature(quadpts, theta_lim)
    log_p, log_q = log_irf(nodes, bank.a, bank.d, bank.g)
    if len(_CACHE) > 8:
        _CACHE.clear()
    _CACHE[key] = (bank, log_p, log_q)
    return log_p, log_q


_TABLES: dict = {}


def _estimation_tables(bank: ItemBank, theta_lim: tuple) -> tuple[np.ndarray, dict]:
    """The non-EAP estimators' grid (G,) and per-item grid terms (G, N), memoised per bank."""
    from icml26.atlas.scoring import grid_tables

    key = (id(bank), theta_lim)
    hit = _TABLES.get(key)
    if hit is not None and hit[0] is bank:
        return hit[1], hit[2]
    grid = np.linspace(theta_lim[0], theta_lim[1], GRID_POINTS)
    tables = grid_tables(bank.a, bank.d, bank.g, grid)
    if len(_TABLES) > 4:
        _TABLES.clear()
    _TABLES[key] = (bank, grid, tables)
    return grid, tables
