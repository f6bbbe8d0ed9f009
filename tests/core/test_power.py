"""Power checks: each kind's pass rule, the runner's validation, and the verdict they force."""

import math

import pytest
from hypothesis import given
from hypothesis import strategies as st

from icml26.core import power
from icml26.core.claims import Claim, Measure, Result, run_claim
from icml26.core.power import PowerSpec

SPEC = PowerSpec(control="oracle vs null", floor="majority", degeneracy="answers changed")
ROWS = [
    {"system": "method", "acc": 0.6},
    {"system": "oracle", "acc": 0.9},
    {"system": "null", "acc": 0.5},
    {"system": "majority", "acc": 0.3},
]


def checks(control_ok=True, floor_ok=True, changed=10):
    return [
        power.control(
            "oracle",
            0.9 if control_ok else 0.51,
            "null",
            0.5,
            spread=(0.85, 0.95) if control_ok else (0.4, 0.6),
        ),
        power.floor({"method": 0.6 if floor_ok else 0.2}, "majority", 0.3),
        power.degeneracy(["method", "null"], changed, 300, what="answers"),
    ]


def run_with(power_checks, spec=SPEC, rows=ROWS, tmp=None):
    def run(ctx):
        return Result(
            rows=rows,
            headline=Measure("ratio", 2.0, "x", (1.5, 2.5)),
            target=1.0,
            power=power_checks,
        )

    return run_claim(Claim("c", "p", "s", "f", run=run, power=spec), scale="tiny", out_root=tmp)


def test_control_needs_its_interval_beyond_the_nulls():
    assert power.control("o", 2.0, "n", 1.0, spread=(1.6, 2.4), null_spread=(0.8, 1.2)).passed
    overlap = power.control("o", 2.0, "n", 1.0, spread=(1.1, 2.9), null_spread=(0.8, 1.2))
    assert overlap.passed is False and "does not separate" in overlap.reason
    # lower is better mirrors it
    assert power.control("o", 1.0, "n", 2.0, higher_is_better=False).passed
    assert not power.control("o", 2.0, "n", 1.0, higher_is_better=False).passed
    # an absolute noise margin must be exceeded too
    assert not power.control("o", 1.05, "n", 1.0, noise=0.1).passed


def test_paired_control_tests_the_paired_effect_not_two_intervals():
    # overlapping unpaired intervals, but the paired difference is clearly positive
    unpaired = power.control(
        "full", 0.80, "reduced", 0.70, spread=(0.6, 1.0), null_spread=(0.5, 0.9)
    )
    paired = power.control(
        "full",
        0.80,
        "reduced",
        0.70,
        spread=(0.6, 1.0),
        null_spread=(0.5, 0.9),
        paired=(0.05, 0.15),
    )
    assert unpaired.passed is False and paired.passed is True
    assert "paired effect [0.05, 0.15]" in paired.reason
    # a ratio interval against 1, lower is better
    assert power.control(
        "o", 0.8, "n", 1.0, paired=(0.7, 0.9), paired_null=1.0, higher_is_better=False
    ).passed
    assert not power.control(
        "o", 0.8, "n", 1.0, paired=(0.7, 1.01), paired_null=1.0, higher_is_better=False
    ).passed


@given(st.floats(-100, 100), st.floats(-100, 100), st.floats(0, 10), st.floats(0, 10))
def test_control_passes_iff_intervals_are_disjoint_on_the_better_side(c, n, wc, wn):
    chk = power.control("o", c, "n", n, spread=(c - wc, c + wc), null_spread=(n - wn, n + wn))
    assert chk.passed == ((c - wc) - (n + wn) > 0)


def test_floor_fails_when_every_system_is_at_or_below_it():
    # CyberPal's case: both arms at or below the constant label (10/105 OOD)
    chk = power.floor({"grounded SFT": 9 / 105, "plain SFT": 10 / 105}, "constant CWE-20", 10 / 105)
    assert chk.passed is False and "at or below" in chk.reason
    assert power.floor({"a": 0.2, "b": 0.1}, "majority", 0.15).passed
    assert not power.floor({"a": 0.2}, "majority", 0.15, floor_spread=(0.1, 0.2)).passed
    assert power.floor({"a": 3.0}, "unigram", 10.0, higher_is_better=False).passed


def test_degeneracy_fails_on_zero_changed_decisions():
    assert power.degeneracy(["CorrSteer", "base"], 0, 300).passed is False
    assert power.degeneracy(["CorrSteer", "base"], 1, 300).passed is True
    assert power.degeneracy(["a", "b"], 3, 300, min_differing=5).passed is False
    with pytest.raises(ValueError, match="at least two"):
        power.degeneracy(["a"], 1, 2)


def test_spec_requires_control_floor_and_a_word_on_degeneracy():
    with pytest.raises(ValueError, match="control"):
        PowerSpec(control="", floor="f", degeneracy="d")
    with pytest.raises(ValueError, match="degeneracy"):
        PowerSpec(control="c", floor="f")
    assert PowerSpec(control="c", floor="f", degeneracy_na="one system").kinds == (
        "control",
        "floor",
    )


def test_all_passing_checks_keep_the_headline_verdict(tmp_path):
    rec = run_with(checks(), tmp=tmp_path)
    assert rec["verdict"] == "reproduced" and rec["uninformative"] is None
    assert rec["power"]["passed"] is True
    assert [c["kind"] for c in rec["power"]["checks"]] == ["control", "floor", "degeneracy"]
    assert rec["power"]["declared"]["floor"] == "majority"
    ctl = rec["power"]["checks"][0]
    assert ctl["systems"] == ["oracle", "null"] and ctl["spreads"]["oracle"] == [0.85, 0.95]


@pytest.mark.parametrize(
    ("kw", "word"),
    [
        ({"control_ok": False}, "control"),
        ({"floor_ok": False}, "floor"),
        ({"changed": 0}, "degeneracy"),
    ],
)
def test_any_failed_check_makes_the_verdict_uninformative(tmp_path, kw, word):
    rec = run_with(checks(**kw), tmp=tmp_path)
    assert rec["verdict"] == "uninformative"
    assert rec["uninformative"].startswith(f"{word}:")
    assert rec["power"]["passed"] is False


def test_not_measured_counts_as_not_passed(tmp_path):
    cs = checks()[:2] + [power.not_measured("degeneracy", "too few items at tiny")]
    rec = run_with(cs, tmp=tmp_path)
    assert rec["verdict"] == "uninformative" and "too few items" in rec["uninformative"]


@pytest.mark.parametrize(
    ("bad", "match"),
    [
        ("missing", "lacks the declared check"),
        ("kind", "known kinds"),
        ("system", "no row of the result contains"),
        ("nan", "not a finite number"),
        ("undeclared", "not declared"),
    ],
)
def test_bad_checks_are_errors_naming_claim_and_field(tmp_path, bad, match):
    cs = checks()
    spec = SPEC
    if bad == "missing":
        cs = cs[:2]
    elif bad == "kind":
        cs = [*cs, power.PowerCheck("oracle", "x", ("oracle",), {}, {}, True, "")]
    elif bad == "system":
        cs[0] = power.control("ghost arm", 0.9, "null", 0.5)
    elif bad == "nan":
        cs[0] = power.control("oracle", math.nan, "null", 0.5)
        cs[0] = power.PowerCheck(
            "control", "c", ("oracle", "null"), {"oracle": math.nan, "null": 0.5}, {}, False, ""
        )
    elif bad == "undeclared":
        spec = PowerSpec(control="c", floor="f", degeneracy_na="n/a here")
    rec = run_with(cs, spec=spec, tmp=tmp_path)
    assert rec["verdict"] == "error"
    assert rec["error"]["type"] == "ValueError"
    assert "'c'" in rec["error"]["message"] and match in rec["error"]["message"]
