"""The ``cat`` claim at ``tiny`` scale runs end to end and its rows are consistent."""

import math
import os

import numpy as np

from icml26 import claims_index
from icml26.cat.claim import FP, UNIGRAM, _headline, power_checks
from icml26.core.claims import run_claim


def test_tiny_claim(tmp_path):
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    rec = run_claim(claims_index.get("cat"), scale="tiny", out_root=tmp_path)
    assert rec["verdict"] != "error", rec.get("error")
    checks = rec["power"]["checks"]
    assert [c["kind"] for c in checks] == list(claims_index.get("cat").power.kinds)
    assert all(c["passed"] in (True, False, None) for c in checks)
    assert set(checks[0]["systems"]) == {FP, "rtn"}
    assert UNIGRAM in checks[1]["systems"]
    rows = {(r["system"], r["bits"], r.get("weights", "-")): r for r in rec["rows"]}
    arms = {"rtn", "smoothquant", "hadamard", "quarot", "sq+hadamard", "sq+quarot",
            "flatquant-lite", "cat-b64"}
    assert arms <= {s for s, _, w in rows if w == "RTN"}
    # GPTQ weights: every arm at small; at tiny (CI budget) CAT, one baseline and RTN
    assert {"rtn", "sq+hadamard", "cat-b64"} <= {s for s, _, w in rows if w == "GPTQ"}
    rtn, had, cat = (rows[(a, "W4A4", "RTN")] for a in ("rtn", "hadamard", "cat-b64"))
    sqh = rows[("sq+hadamard", "W4A4", "RTN")]
    # smoothing then rotating: SmoothQuant's alignment with the rotation's concentration
    sq_align = rows[("smoothquant", "W4A4", "RTN")]["median alignment dB"]
    assert abs(sqh["median alignment dB"] - sq_align) < 0.02
    assert sqh["median concentration dB"] > rtn["median concentration dB"]
    # a rotation leaves the alignment term unchanged; CAT raises it
    assert abs(had["median alignment dB"] - rtn["median alignment dB"]) < 0.01
    assert cat["median alignment dB"] > had["median alignment dB"]
    assert had["median concentration dB"] > rtn["median concentration dB"]
    assert rec["headline"]["value"] > 0
    assert len(rec["figures"]) == 3


def _arms(rng, seeds, cat_shift, windows=16, noise=0.0):
    n = np.full(windows, 255)
    base = rng.normal(5.0, 0.3, windows) * 255
    nll = {a: np.stack([base + 255 * 1.0] * seeds) for a in ("rtn", "smoothquant", "quarot")}
    nll["hadamard"] = np.stack([base + 255 * 0.5] * seeds)
    nll["cat-b64"] = np.stack([base + 255 * (0.5 - cat_shift[i]) + rng.normal(0, noise, windows)
                               for i in range(seeds)])
    return nll, n


def test_headline_clusters_seeds_then_windows():
    rng = np.random.default_rng(0)
    nll, n = _arms(rng, 1, [0.2])  # one seed, no window noise: the CI is the point
    value, (lo, hi) = _headline(nll, n, "cat-b64", 0)
    assert math.isclose(lo, hi)
    assert math.isclose(value, math.exp(-0.2))
    nll, n = _arms(rng, 3, [0.1, 0.2, 0.3])  # seeds differ: the CI spans most of their range
    value, (lo, hi) = _headline(nll, n, "cat-b64", 0)
    assert math.isclose(value, math.exp(-0.2))
    assert lo < math.exp(-0.25) and hi > math.exp(-0.15)
    nll, n = _arms(rng, 1, [0.2], noise=80.0)  # window noise alone widens it too
    _, (lo, hi) = _headline(nll, n, "cat-b64", 0)
    assert hi - lo > 0.02


def test_power_checks_decide():
    rng = np.random.default_rng(1)
    nll, n = _arms(rng, 2, [0.2, 0.2], noise=10.0)
    fp = nll["hadamard"][0] - 255 * 0.8
    control, floor = power_checks(fp, nll, np.full(16, 255 * 7.0), n, "cat-b64", 0)
    assert control.passed is True and floor.passed is True
    # quantization that does not hurt: no error for a transform to remove
    control, _ = power_checks(nll["rtn"][0] + 1e-9, nll, np.full(16, 255 * 7.0), n, "cat-b64", 0)
    assert control.passed is False
    # every quantized model at or above the unigram: the floor fails
    _, floor = power_checks(fp, nll, np.full(16, 255 * 4.0), n, "cat-b64", 0)
    assert floor.passed is False
