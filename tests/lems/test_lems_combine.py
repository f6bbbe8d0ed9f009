"""The claim's seed pooling: geometric means over seeds, spread covering every seed's ratio."""

import json
import math

import numpy as np
import pytest

from icml26.core.claims import Measure, Result, RunContext
from icml26.lems.claim import HEADLINE_LEMS, HEADLINE_UNIFORM, combine


def _unit(tmp_path, seed, shift, rng):
    n_tok = [255] * 6
    base = rng.normal(3.0, 0.2, 6) * 255
    windows = {"dense": base.tolist(), HEADLINE_UNIFORM: (base + 255 * 0.5).tolist(),
               HEADLINE_LEMS: (base + 255 * (0.5 - shift)).tolist()}
    rows = [{"system": "dense", "target": 1.0, "kept": 1.0, "linear params": 100, "perplexity": 20.0},
            {"system": "KFAC-SVD (L_G), uniform", "target": 0.6, "kept": 0.599, "linear params": 60,
             "perplexity": 30.0 + seed},
            {"system": "KFAC-SVD (L_G), LEMS", "target": 0.6, "kept": 0.6, "linear params": 60,
             "perplexity": 25.0, "alpha": 1.0, "gamma": 2.0}]
    meta = {"label": "m", "layers": 7, "blocks": 2, "last": 0, "dtype": "bfloat16", "seed": seed,
            "settings": {"n_calib": 4, "seq_len": 8, "n_search": 1, "eval_len": 256, "trials": 0},
            "times": {"statistics": 1.0}, "wall": 2.0}
    side = tmp_path / f"seed{seed}" / "windows.json"
    side.parent.mkdir(parents=True)
    side.write_text(json.dumps({"meta": meta, "rows": rows, "n_tok": n_tok, "windows": windows,
                                "trials": [], "heat": None}))
    return Result(rows=rows, headline=Measure("x", 1.0), target=0.9, figures=[side])


def test_combine_pools_seeds(tmp_path):
    rng = np.random.default_rng(0)
    shifts = [0.1, 0.2, 0.3]  # per-token NLL gains of LEMS: ratios exp(-shift)
    results = [_unit(tmp_path, s, sh, rng) for s, sh in enumerate(shifts)]
    res = combine(RunContext(scale="small", out_dir=tmp_path / "all"), results[::-1])
    assert res.headline.value == pytest.approx(math.exp(-np.mean(shifts)), rel=1e-9)
    lo, hi = res.headline.spread
    assert lo <= math.exp(-0.3) + 1e-12 and hi >= math.exp(-0.1) - 1e-12  # every seed covered
    uni = next(r for r in res.rows if r["system"] == "KFAC-SVD (L_G), uniform")
    assert uni["perplexity"] == pytest.approx((30 * 31 * 32) ** (1 / 3), abs=1e-3)
    assert (uni["ppl min"], uni["ppl max"]) == (30.0, 32.0)
    assert uni["vs dense"] == pytest.approx(uni["perplexity"] / 20.0, abs=1e-3)
    assert uni["kept"] == 0.599
    assert "0.905, 0.819, 0.741" in " ".join(res.notes)


def test_combine_refuses_different_windows(tmp_path):
    rng = np.random.default_rng(1)
    a, b = _unit(tmp_path, 0, 0.1, rng), _unit(tmp_path, 1, 0.1, rng)
    side = b.figures[0]
    d = json.loads(side.read_text())
    d["n_tok"][0] = 100
    side.write_text(json.dumps(d))
    with pytest.raises(RuntimeError, match="different test windows"):
        combine(RunContext(scale="small", out_dir=tmp_path / "all"), [a, b])
