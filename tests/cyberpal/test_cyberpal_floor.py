"""The floor rule: a B / A ratio of two near-zero OOD counts is marked uninformative."""

import numpy as np
import pytest

from icml26.core.claims import Claim, Measure, Result, run_claim
from icml26.cyberpal.report import _ratio, floor_reason


def _hits(k, n):
    v = np.zeros(n)
    v[:k] = 1
    return v


def test_one_vs_zero_is_uninformative_though_the_ratio_reads_3x():
    b, a = _hits(1, 105), _hits(0, 105)
    assert _ratio(b, a) == pytest.approx(3.0)
    why = floor_reason(b, a, 50)
    assert why is not None and "B 1/105, A 0/105" in why and "floor 0.048" in why


@pytest.mark.parametrize("kb,ka,n,labels,floored", [
    (4, 4, 105, 50, True),  # both under 5 correct
    (5, 4, 105, 50, False),  # B reaches the floor exactly: the ratio is informative
    (40, 0, 105, 50, False),  # one arm far off the floor: A's zero is a real result
    (0, 30, 105, 50, False),
    (30, 12, 105, 50, False),
    (9, 9, 1000, 10, True),  # under 2x chance (0.2) though > 5 correct
    (250, 9, 1000, 10, False),
])
def test_floor_boundaries(kb, ka, n, labels, floored):
    assert (floor_reason(_hits(kb, n), _hits(ka, n), labels) is not None) is floored


def test_seed_averaged_counts_and_parameters():
    b = np.r_[np.full(8, 0.5), np.zeros(92)]  # 4 CVEs' worth over two seeds
    a = np.r_[np.full(9, 0.5), np.zeros(91)]  # 4.5
    assert floor_reason(b, a, 50) is not None
    assert floor_reason(b, a, 50, min_correct=4, chance_mult=1.0) is None
    assert floor_reason(b, a, 50, min_correct=4.6, chance_mult=1.0) is not None


def test_runner_turns_the_reason_into_inconclusive(tmp_path):
    b, a = _hits(1, 105), _hits(0, 105)

    def run(ctx):  # a headline far above target, but both arms at the floor
        return Result(rows=[{"x": 1}], headline=Measure("B / A", _ratio(b, a), "x", (1.0, 7.0)),
                      target=1.0, uninformative=floor_reason(b, a, 50))

    rec = run_claim(Claim("floor", "p", "s", "f", run=run), scale="tiny", out_root=tmp_path)
    assert rec["verdict"] == "inconclusive" and "floor" in rec["uninformative"]
