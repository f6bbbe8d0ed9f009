"""`icml26 tie simulate`: the what-if predictor, LTR vs SSJF, --rate-scale, P50/P99."""

import itertools
import re

import numpy as np
import pytest
from typer.testing import CliRunner

from icml26.sim.trace import synthetic_trace, write_trace
from icml26.tie.cli import app, policy_scores
from icml26.tie.lengths import whatif_predictions


def _metric(output, key):
    return float(re.search(rf"^\s+{key}\s+(\S+)$", output, re.M).group(1))


def _discordant(reqs, a, b, q=0):
    fa, fb = a[0], b[0]
    pairs = list(itertools.combinations(reqs, 2))
    return sum((fa(x, q) - fa(y, q)) * (fb(x, q) - fb(y, q)) < 0 for x, y in pairs) / len(pairs)


def test_whatif_predictions_sigma_per_request():
    reqs = synthetic_trace(4000, rate=5.0, seed=0)
    same = whatif_predictions(reqs, noise=0.5, spread=0.0, seed=1)
    assert {r.meta["sigma"] for r in same} == {0.5}
    spread = whatif_predictions(reqs, noise=0.5, spread=0.5, seed=1)
    ls = np.log([r.meta["sigma"] for r in spread])
    assert np.median(ls) == pytest.approx(np.log(0.5), abs=0.03) and ls.std() == pytest.approx(0.5, rel=0.05)
    # the true length is a log-t draw around the prediction: (ln L - mu) / sigma ~ t(3.5), median |t| = 0.74
    z = np.array([(np.log(r.output_tokens) - r.meta["mu"]) / r.meta["sigma"] for r in spread])
    assert np.median(np.abs(z)) == pytest.approx(0.74, abs=0.04)
    assert reqs[0].meta == {} and [r.id for r in spread] == [r.id for r in reqs]


def test_ltr_and_ssjf_rank_differently_only_when_sigma_varies():
    reqs = synthetic_trace(120, rate=5.0, seed=0)
    one = policy_scores(whatif_predictions(reqs, 0.5, spread=0.0, seed=0), 32, 2048)
    assert _discordant(reqs, one["ltr"], one["ssjf"]) == 0  # both monotone in mu when sigma is shared
    many = policy_scores(whatif_predictions(reqs, 0.5, spread=0.8, seed=0), 32, 2048)
    assert _discordant(reqs, many["ltr"], many["ssjf"]) > 0.02
    assert _discordant(reqs, many["ltr"], many["tie"], q=64) > 0.02  # TIE's tail term acts
    assert many["ltr"][1] is False and many["ssjf"][1] is False and many["tie"][1] is True


@pytest.fixture(scope="module")
def trace(tmp_path_factory):
    return write_trace(tmp_path_factory.mktemp("tr") / "t.csv", synthetic_trace(400, rate=12.0, seed=0))


def test_cli_ltr_differs_from_ssjf_and_prints_p50_p99(trace):
    out = {p: CliRunner().invoke(app, ["simulate", "--trace", str(trace), "--policy", p]) for p in ("ltr", "ssjf")}
    for r in out.values():
        assert r.exit_code == 0, (r.output, r.exception)
        for key in ("ptla_p50", "ptla_p99", "ttft_p50", "ttft_p99", "e2e_p50", "e2e_p99"):
            assert _metric(r.output, key) > 0
    assert _metric(out["ltr"].output, "ptla_p99") != _metric(out["ssjf"].output, "ptla_p99")


def test_cli_rate_scale(trace):
    def run(scale):
        r = CliRunner().invoke(app, ["simulate", "--trace", str(trace), "--policy", "fcfs", "--rate-scale", scale])
        assert r.exit_code == 0, (r.output, r.exception)
        return r.output

    base, fast = run("1"), run("2")
    rate = [float(re.search(r"arrival rate ([\d.]+) req/s", o).group(1)) for o in (base, fast)]
    assert rate[1] == pytest.approx(2 * rate[0], rel=1e-3)
    assert _metric(fast, "ttft_mean") > 1.5 * _metric(base, "ttft_mean")
    r = CliRunner().invoke(app, ["simulate", "--trace", str(trace), "--rate-scale", "0"])
    assert r.exit_code != 0 and "--rate-scale must be > 0" in str(r.exception)
