"""The verdict rule: every verdict, the straddling spread, and its mirror symmetry."""

import pytest
from hypothesis import given
from hypothesis import strategies as st

from icml26.core.claims import Measure, Verdict, decide


def m(value, spread=None, hib=True):
    return Measure("x", value, "", spread, hib)


@pytest.mark.parametrize(
    ("headline", "target", "expected"),
    [
        (m(6.0), 5.0, Verdict.REPRODUCED),
        (m(4.0), 5.0, Verdict.NOT_REPRODUCED),
        (m(5.0), 5.0, Verdict.INCONCLUSIVE),  # an exact tie is no finding either way
        (m(6.0, (5.5, 7.0)), 5.0, Verdict.REPRODUCED),
        (m(6.0, (4.5, 7.0)), 5.0, Verdict.INCONCLUSIVE),  # straddles
        (m(4.0, (3.0, 5.5)), 5.0, Verdict.INCONCLUSIVE),  # straddles from below
        (m(4.0, (3.0, 4.5)), 5.0, Verdict.NOT_REPRODUCED),
        (m(6.0, (5.0, 7.0)), 5.0, Verdict.INCONCLUSIVE),  # touches the target
        (m(0.8, hib=False), 1.0, Verdict.REPRODUCED),
        (m(1.2, hib=False), 1.0, Verdict.NOT_REPRODUCED),
        (m(0.8, (0.7, 1.1), hib=False), 1.0, Verdict.INCONCLUSIVE),
        (m(0.8, (0.7, 0.9), hib=False), 1.0, Verdict.REPRODUCED),
        (m(float("nan")), 1.0, Verdict.ERROR),
        (m(1.0), float("nan"), Verdict.ERROR),
    ],
)
def test_each_verdict(headline, target, expected):
    assert decide(headline, target) is expected


def test_spread_is_widened_to_include_the_value():
    # a spread that excludes the value (a buggy CI) must not hide a straddle
    assert decide(m(4.0, (5.5, 7.0)), 5.0) is Verdict.INCONCLUSIVE


def test_spread_must_be_ordered():
    with pytest.raises(ValueError, match="spread must be"):
        Measure("x", 1.0, spread=(2.0, 1.0))


finite = st.floats(-1e6, 1e6, allow_nan=False)


@given(finite, finite, finite, finite)
def test_lower_is_better_mirrors_higher_is_better(v, a, b, t):
    lo, hi = sorted((a, b))
    up = decide(m(v, (lo, hi)), t)
    down = decide(m(-v, (-hi, -lo), hib=False), -t)
    assert up is down


@given(finite, finite, finite)
def test_reproduced_iff_whole_interval_beats_target(v, a, t):
    lo, hi = sorted((v, a))
    verdict = decide(m(v, (lo, hi)), t)
    assert (verdict is Verdict.REPRODUCED) == (lo > t)
    assert (verdict is Verdict.NOT_REPRODUCED) == (hi < t)
    assert (verdict is Verdict.INCONCLUSIVE) == (lo <= t <= hi)


@given(finite, st.one_of(st.none(), st.tuples(finite, finite)))
def test_an_exact_tie_is_never_not_reproduced(t, spread):
    # the headline equals the target; whatever spread around it, no verdict but inconclusive
    sp = None if spread is None else (min(spread + (t,)), max(spread + (t,)))
    for hib in (True, False):
        assert decide(m(t, sp, hib), t) is Verdict.INCONCLUSIVE


def test_deepcommits_exact_tie_is_inconclusive():
    assert decide(m(1.0, (1.0, 1.0)), 1.0) is Verdict.INCONCLUSIVE


@given(finite, finite, finite, st.text(min_size=1, max_size=20))
def test_uninformative_overrides_any_headline(v, a, t, why):
    from icml26.core.claims import verdict_for

    lo, hi = sorted((v, a))
    verdict, reason = verdict_for(m(v, (lo, hi)), t, uninformative=why)
    assert verdict is Verdict.UNINFORMATIVE and reason == why


def test_nan_headline_is_error_unless_the_claim_says_why_it_cannot_be_measured():
    from icml26.core import power
    from icml26.core.claims import verdict_for

    nan = float("nan")
    assert verdict_for(m(nan), 1.0)[0] is Verdict.ERROR
    # a failed power check alone does not excuse a NaN headline (that is still a bug)
    failed = [power.degeneracy(["a", "b"], 0, 10)]
    assert verdict_for(m(nan), 1.0, power=failed)[0] is Verdict.ERROR
    assert verdict_for(m(nan), 1.0, "no informative cell") == (
        Verdict.UNINFORMATIVE, "no informative cell")
    assert verdict_for(m(1.0), nan, "no informative cell")[0] is Verdict.ERROR


def test_uninformative_result_is_its_own_verdict_whatever_the_headline(tmp_path):
    from icml26.core.claims import Claim, Measure, Result, run_claim

    def run(ctx):
        return Result(rows=[], headline=Measure("h", 5.0, "x", (4.0, 6.0)), target=1.0,
                      uninformative="the model never learned the task")

    rec = run_claim(Claim("gated", "p", "s", "f", run=run), scale="tiny", out_root=tmp_path)
    assert rec["verdict"] == "uninformative"
    assert rec["uninformative"] == "the model never learned the task"
    ok = run_claim(Claim("fine", "p", "s", "f", run=lambda c: Result(
        rows=[], headline=Measure("h", 5.0), target=1.0)), scale="tiny", out_root=tmp_path)
    assert ok["verdict"] == "reproduced" and ok["uninformative"] is None
