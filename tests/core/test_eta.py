"""Expected CPU time per claim: the last usable record, else the claim's estimate."""

import json

from icml26.core.claims import Claim, result_path
from icml26.core.eta import expected, expected_all, format_table

CLAIM = Claim("c", "P", "S", "F", run=lambda ctx: None, cpu_minutes={"tiny": 0.5, "small": 30})


def _record(root, **fields):
    path = result_path(root, "c", "small")
    path.parent.mkdir(parents=True)
    base = {"verdict": "reproduced", "options": {}, "started_at": "2026-12-01T10:00:00+00:00",
            "wall_time_s": 600.0, "environment": {"threads": 2}}
    path.write_text(json.dumps(base | fields))


def test_estimate_without_a_record(tmp_path):
    e = expected(CLAIM, "small", tmp_path)
    assert (e.cpu_min, e.source, e.upper_bound) == (30, "estimate", False)
    e = expected(CLAIM, "full", tmp_path)
    assert (e.cpu_min, e.source) == (None, "unknown")


def test_last_run_cpu_time_wins(tmp_path):
    _record(tmp_path, cpu_time_s=90.0)
    e = expected(CLAIM, "small", tmp_path)
    assert (e.cpu_min, e.source, e.upper_bound) == (1.5, "last run 2026-12-01", False)


def test_record_without_cpu_time_gives_wall_times_threads_as_upper_bound(tmp_path):
    _record(tmp_path)
    e = expected(CLAIM, "small", tmp_path)
    assert e.cpu_min == 20.0 and e.upper_bound and "<= wall x 2 threads" in e.source


def test_errored_or_other_options_record_is_not_used(tmp_path):
    _record(tmp_path, cpu_time_s=90.0, options={"seeds": "1"})
    assert expected(CLAIM, "small", tmp_path).source == "estimate"
    assert expected(CLAIM, "small", tmp_path, {"seeds": "1"}).cpu_min == 1.5
    other = expected(CLAIM, "small", tmp_path, {"seeds": "2", "dtype": "fp32"})
    assert (other.cpu_min, other.options_ignored) == (30, True)
    assert other.source == "estimate at default options; --opt dtype=fp32 seeds=2 not counted"
    result_path(tmp_path, "c", "small").write_text(json.dumps({"verdict": "error",
                                                               "cpu_time_s": 1.0}))
    assert expected(CLAIM, "small", tmp_path).source == "estimate"


def test_units_run_elsewhere_fall_back_to_the_estimate(tmp_path):
    _record(tmp_path, cpu_time_s=None, units=3)
    assert expected(CLAIM, "small", tmp_path).source == "estimate"


def test_total_and_table(tmp_path):
    other = Claim("d", "P", "S", "F", run=lambda ctx: None)
    etas, total = expected_all([CLAIM, other], "small", tmp_path)
    assert total == 30
    lines = format_table(etas)
    assert lines[0].split() == ["claim", "scale", "CPU-min", "source"]
    assert lines[1].split() == ["c", "small", "30.0", "estimate"]
    assert lines[2].split() == ["d", "small", "?", "unknown"]
    assert lines[3].startswith("total") and "30.0" in lines[3] and "1 claim(s) without" in lines[3]


def test_every_landed_claim_has_tiny_and_small_estimates():
    from icml26 import claims_index

    for c in claims_index.CLAIMS:
        if not c.planned:
            assert set(c.cpu_minutes) >= {"tiny", "small"}, c.name
            assert all(v > 0 for v in c.cpu_minutes.values()), c.name
