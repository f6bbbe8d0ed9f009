"""The claim's seed pooling: geometric means over seeds, spread covering every seed's ratio."""

import json
import math

import numpy as np
import pytest

from icml26.core.claims import Measure, Result, RunContext
from icml26.lems.claim import (
    HEADLINE_LEMS,
    HEADLINE_RANDOM,
    HEADLINE_UNIFORM,
    LEMS,
    RANDOM,
    UNIFORM,
    UNIGRAM,
    combine,
    paired_ci,
    power_checks,
    random_ranks,
)
from icml26.lems.layers import TargetLayer
from icml26.lems.lems import kept_fraction, uniform_ranks

ENERGY, ZERO = (f"KFAC-SVD (L_G), {x}" for x in ("energy (SVD-LLM v2)", "LEMS, 0 trials"))
HEADLINE_ENERGY, HEADLINE_ZERO = (f"{x} @ 0.6" for x in (ENERGY, ZERO))
NAMES = [f"l{i}" for i in range(7)]


def _unit(tmp_path, seed, shift, rng, random_shift=0.3):
    """A unit's side file: LEMS gains ``shift`` nats/token on the best baseline (LEMS trials=0,
    0.4 below uniform), the energy arm is worse (0.45), the random arm ``random_shift`` worse."""
    n_tok = [255] * 6
    base = rng.normal(3.0, 0.2, 6) * 255
    windows = {"dense": base.tolist(), HEADLINE_UNIFORM: (base + 255 * 0.5).tolist(),
               HEADLINE_ZERO: (base + 255 * 0.4).tolist(),
               HEADLINE_ENERGY: (base + 255 * 0.45).tolist(),
               HEADLINE_LEMS: (base + 255 * (0.4 - shift)).tolist(),
               HEADLINE_RANDOM: (base + 255 * (0.4 + random_shift)
                                 + rng.normal(0, 1, 6)).tolist(),
               UNIGRAM: (np.full(6, 255 * 7.0)).tolist()}
    rows = [{"system": "dense", "target": 1.0, "kept": 1.0, "linear params": 100, "perplexity": 20.0},
            {"system": UNIFORM, "left factor": "L_G", "target": 0.6, "kept": 0.599,
             "linear params": 60, "perplexity": 30.0 + seed, "dense layers": 0},
            {"system": LEMS, "left factor": "L_G", "target": 0.6, "kept": 0.6, "linear params": 60,
             "perplexity": 25.0, "alpha": 1.0, "gamma": 2.0, "dense layers": 2},
            {"system": ZERO, "left factor": "L_G", "target": 0.6, "kept": 0.6, "linear params": 60,
             "perplexity": 27.0, "alpha": 0.0, "gamma": 5.0, "dense layers": 2},
            {"system": ENERGY, "left factor": "L_G", "target": 0.6, "kept": 0.6,
             "linear params": 60, "perplexity": 28.0, "dense layers": 1},
            {"system": RANDOM, "target": 0.6, "kept": 0.6, "linear params": 60, "perplexity": 40.0}]
    meta = {"label": "m", "layers": 7, "blocks": 2, "last": 0, "dtype": "bfloat16", "seed": seed,
            "settings": {"n_calib": 4, "seq_len": 8, "n_search": 1, "eval_len": 256, "trials": 0},
            "times": {"statistics": 1.0}, "wall": 2.0}
    chosen = {LEMS: {n: 8 * (i + 1) for i, n in enumerate(NAMES)},
              ZERO: {n: 8 * (i + 1) if i < 2 else 16 for i, n in enumerate(NAMES)}}  # 5 differ
    heat = {"grid": [[0.5, 1.0], [0.3, -1]], "blocks": [0, 1], "kinds": ["a", "b"]}
    side = tmp_path / f"seed{seed}" / "windows.json"
    side.parent.mkdir(parents=True)
    side.write_text(json.dumps({"meta": meta, "rows": rows, "n_tok": n_tok, "windows": windows,
                                "trials": [], "heat": heat, "chosen": chosen, "names": NAMES}))
    return Result(rows=rows, headline=Measure("x", 1.0), target=0.9, figures=[side])


def test_combine_pools_seeds_against_the_best_baseline(tmp_path):
    rng = np.random.default_rng(0)
    shifts = [0.1, 0.2, 0.3]  # per-token NLL gains of LEMS over the best baseline
    results = [_unit(tmp_path, s, sh, rng) for s, sh in enumerate(shifts)]
    res = combine(RunContext(scale="small", out_dir=tmp_path / "all"), results[::-1])
    assert res.headline.value == pytest.approx(math.exp(-np.mean(shifts)), rel=1e-9)
    lo, hi = res.headline.spread
    # clustered over seeds: the spread reflects the seed-to-seed spread of the ratio, far wider
    # than the windows' noise (the windows' part is identical across seeds here)
    assert lo < math.exp(-0.25) and hi > math.exp(-0.15)
    joint = paired_ci(np.array([[0.0]] * 6), np.array([[0.0]] * 6), np.array([255] * 6), 0)
    assert joint == (1.0, 1.0)
    assert [c.kind for c in res.power] == ["control", "floor", "degeneracy"]
    assert all(c.passed for c in res.power)
    assert set(res.power[0].systems) == {ZERO, RANDOM}  # the best baseline, not the energy arm
    assert res.power[2].values == {"differing": 15.0, "total": 21.0}
    assert UNIGRAM in {r["system"] for r in res.rows}
    uni = next(r for r in res.rows if r["system"] == UNIFORM)
    assert uni["perplexity"] == pytest.approx((30 * 31 * 32) ** (1 / 3), abs=1e-3)
    assert (uni["ppl min"], uni["ppl max"]) == (30.0, 32.0)
    assert uni["vs dense"] == pytest.approx(uni["perplexity"] / 20.0, abs=1e-3)
    assert uni["kept"] == 0.599 and uni["left factor"] == "L_G"
    text = " ".join(res.notes)
    assert "0.905, 0.819, 0.741" in text and "Best non-uniform arm" in text and ZERO in text


def test_combine_refuses_different_windows(tmp_path):
    rng = np.random.default_rng(1)
    a, b = _unit(tmp_path, 0, 0.1, rng), _unit(tmp_path, 1, 0.1, rng)
    side = b.figures[0]
    d = json.loads(side.read_text())
    d["n_tok"][0] = 100
    side.write_text(json.dumps(d))
    with pytest.raises(RuntimeError, match="different test windows"):
        combine(RunContext(scale="small", out_dir=tmp_path / "all"), [a, b])


def _stack(windows_per_seed):
    return {k: np.stack([np.asarray(w[k], dtype=float) for w in windows_per_seed], axis=1)
            for k in windows_per_seed[0]}


def test_power_checks_decide():
    rng = np.random.default_rng(3)
    n_tok = np.array([255] * 8)
    base = rng.normal(3.0, 0.2, 8) * 255

    def windows(random_shift, unigram=7.0):
        return {HEADLINE_UNIFORM: base + 255 * 0.5, HEADLINE_LEMS: base + 255 * 0.3,
                HEADLINE_ZERO: base + 255 * 0.4,
                HEADLINE_RANDOM: base + 255 * (0.4 + random_shift) + rng.normal(0, 20, 8),
                UNIGRAM: np.full(8, 255 * unigram)}

    # the best baseline beats a random allocation: the setup can tell allocations apart
    control, floor, degen = power_checks(_stack([windows(0.3)]), n_tok, HEADLINE_ZERO, 3, 7, 0)
    assert control.passed is True and floor.passed is True and degen.passed is True
    # a random allocation as good as (or better than) the best informed one: uninformative
    for shift in (0.0, -0.3):
        control, _, _ = power_checks(_stack([windows(shift)]), n_tok, HEADLINE_ZERO, 3, 7, 0)
        assert control.passed is False
    # every compressed model at or above the unigram: floor fails; same ranks: degenerate
    _, floor, degen = power_checks(_stack([windows(0.3, unigram=3.0)]), n_tok, HEADLINE_ZERO, 0, 7, 0)
    assert floor.passed is False and degen.passed is False


def test_random_ranks_meet_the_budget_and_vary():
    layers = [TargetLayer(f"model.layers.{b}.mlp.{k}", n_in, n_out, b)
              for b in range(4) for k, n_in, n_out in (("up_proj", 64, 160), ("down_proj", 160, 64))]
    uniform = uniform_ranks(layers, 0.6)
    a, b = random_ranks(layers, 0.6, seed=0), random_ranks(layers, 0.6, seed=1)
    for ranks in (a, b):
        assert 0.6 - 0.02 <= kept_fraction(layers, ranks) <= 0.6 + 1e-12
        assert ranks != uniform
    assert a != b  # the allocation depends on the draw
