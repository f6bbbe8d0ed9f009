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


def test_runner_turns_the_reason_into_uninformative(tmp_path):
    b, a = _hits(1, 105), _hits(0, 105)

    def run(ctx):  # a headline far above target, but both arms at the floor
        return Result(rows=[{"x": 1}], headline=Measure("B / A", _ratio(b, a), "x", (1.0, 7.0)),
                      target=1.0, uninformative=floor_reason(b, a, 50))

    rec = run_claim(Claim("floor", "p", "s", "f", run=run), scale="tiny", out_root=tmp_path)
    assert rec["verdict"] == "uninformative" and "floor" in rec["uninformative"]


def test_constant_label_floor_is_the_most_frequent_training_answer():
    from icml26.cyberpal.report import constant_labels

    train = [41] * 5 + [20] * 3 + [59] * 3 + [7] * 5  # 41 and 7 tie: lowest id wins
    ood = [[20], [20, 59], [287], [20]]
    const, name, hind, hname = constant_labels(train, ood)
    assert const == 7 and "CWE-7 " in name and "5 records" in name
    assert hind == 20 and "hindsight" in hname  # best on the test set: a reference, not the floor


def _per_cve(**arms):
    """system -> (seeds, CVEs) OOD correctness, as power_checks reads it"""
    return {k: np.asarray(v, dtype=float) for k, v in arms.items()}


def test_floor_fails_when_both_arms_are_at_or_below_the_constant_label():
    """The issue's case: both SFT arms at or below always answering one label -> uninformative."""
    from icml26.core.claims import verdict_for
    from icml26.cyberpal.report import ARM_NAMES, NN, power_checks

    n = 20
    const = "constant CWE-20 (most frequent training answer, 25 records)"
    texts = {("A", 0): {"texts": {"ood": ["CWE-20"] * n}},
             ("B", 0): {"texts": {"ood": ["CWE-79"] * 10 + ["CWE-20"] * 10}}}
    per = _per_cve(**{ARM_NAMES["A"]: [_hits(2, n)], ARM_NAMES["B"]: [_hits(1, n)],
                      const: [_hits(2, n)], NN: [_hits(12, n)]})
    checks = {c.kind: c for c in power_checks(per, texts, ["A", "B"], [0], const, 0)}
    assert checks["floor"].passed is False
    assert checks["control"].passed is True  # MiniLM 0.6 vs constant 0.1: the task is doable
    assert checks["degeneracy"].passed is True and checks["degeneracy"].values["differing"] == 10
    v, why = verdict_for(Measure("B / A", 0.6, "x", (0.2, 0.9)), 1.0,
                         power=list(checks.values()))
    assert v.value == "uninformative" and "floor" in why
    # one arm above the floor's CVE-bootstrap interval: the floor passes
    per[ARM_NAMES["A"]] = np.asarray([_hits(9, n)])
    assert {c.kind: c for c in power_checks(per, texts, ["A", "B"], [0], const, 0)}[
        "floor"].passed is True


def test_seed_then_cve_ci_is_the_smoothed_ratio_and_wider_when_seeds_disagree():
    from icml26.core.torchutil import bootstrap_ci
    from icml26.cyberpal.report import seed_cve_ci

    n = 105
    b = np.stack([_hits(5, n), _hits(1, n)])  # seed 0: B ahead; seed 1: A far ahead
    a = np.stack([_hits(3, n), _hits(15, n)])
    ci = seed_cve_ci(b, a, seed=0)
    assert ci.value == pytest.approx(_ratio(b.mean(0), a.mean(0)))
    assert ci.n_clusters == 2
    cve_only = bootstrap_ci(_ratio, b.mean(0), a.mean(0), seed=0)
    assert ci.high - ci.low > cve_only[1] - cve_only[0]
    assert ci.high > 1.0  # seed 0 alone reads 1.57x: the CI must reach it
