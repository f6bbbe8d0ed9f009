"""ATLAS part (c) pieces: LM examinees from choice log-probs, layer dropping, the responses CLI."""

from __future__ import annotations

import io
import json
import tarfile

import numpy as np
import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st

from icml26.atlas.responses import (
    Examinee,
    dropped_layer_indices,
    examinee_grid,
    layers_dropped,
    response_matrix,
    sample_answers,
)
from icml26.core.errors import UserError
from icml26.core.lm import tiny_llama
from icml26.core.mcq import MCQItem


@given(st.integers(6, 64), st.data())
def test_dropped_layers_stay_in_the_middle(n_layers, data):
    k = data.draw(st.integers(0, n_layers - 3))
    idx = dropped_layer_indices(n_layers, k)
    assert len(idx) <= k and idx == sorted(set(idx))
    assert all(2 <= j <= n_layers - 2 for j in idx)
    if k and n_layers >= 2 * k + 4:
        assert len(idx) == k


def test_too_many_layers():
    with pytest.raises(UserError, match="cannot drop"):
        dropped_layer_indices(8, 6)


def test_layers_dropped_equals_model_without_them():
    model, _ = tiny_llama(hidden=32, layers=6, heads=2, max_len=64, seed=1)
    model.eval()
    ids = torch.randint(0, 256, (2, 12), generator=torch.Generator().manual_seed(0))
    layers = model.model.layers
    with torch.no_grad():
        full = model(ids).logits
        with layers_dropped(model, 2) as gone:
            assert len(model.model.layers) == 4 and len(gone) == 2
            cut = model(ids).logits
        assert model.model.layers is layers
        again = model(ids).logits
        # reference: run the kept layers by hand through the same modules
        model.model.layers = torch.nn.ModuleList([m for j, m in enumerate(layers) if j not in gone])
        model.config.use_cache = False
        ref = model(ids).logits
        model.model.layers = layers
    torch.testing.assert_close(cut, ref)
    torch.testing.assert_close(full, again)
    assert not torch.allclose(full, cut)


ITEMS = [MCQItem(f"i{j}", "t", "q", ("a", "b", "c"), 0) for j in range(2000)]


def test_sampling_temperature():
    lp = [[0.0, -1.0, -2.0]] * len(ITEMS)
    rng = np.random.default_rng(0)
    assert sample_answers(lp, ITEMS, 0.0, rng).all()
    p = np.exp([0.0, -1.0, -2.0])
    freq = sample_answers(lp, ITEMS, 1.0, rng).mean()
    assert freq == pytest.approx(p[0] / p.sum(), abs=0.035)  # ~4 sigma at n = 2000
    hot = sample_answers(lp, ITEMS, 1e6, rng).mean()
    assert hot == pytest.approx(1 / 3, abs=0.035)
    with pytest.raises(UserError):
        sample_answers(lp, ITEMS, -1.0, rng)


def test_grid_and_matrix_are_deterministic():
    grid = examinee_grid(["logprob", "letter"], [0, 3], [0, 0.5], seeds=3)
    assert len(grid) == 2 * 2 * (1 + 3)
    assert grid[0] == Examinee("logprob", 0, 0.0, 0)
    tables = {e.config: [[0.0, -0.5, -0.7]] * 50 for e in grid}
    Y1 = response_matrix(tables, ITEMS[:50], grid, seed=4)
    Y2 = response_matrix(tables, ITEMS[:50], grid, seed=4)
    np.testing.assert_array_equal(Y1, Y2)
    assert Y1.shape == (16, 50) and set(np.unique(Y1)) <= {0.0, 1.0}
    assert (Y1[[i for i, e in enumerate(grid) if e.temperature == 0]] == 1).all()


def test_responses_cli_round_trip(tmp_path, monkeypatch):
    from typer.testing import CliRunner

    from icml26.atlas.cli import app
    from icml26.atlas.data import load_responses

    task = {
        "examples": [
            {
                "input": f"Is {i} even?",
                "target_scores": {"yes": int(i % 2 == 0), "no": int(i % 2 == 1)},
            }
            for i in range(12)
        ]
    }
    archive = tmp_path / "bb.tar.gz"
    with tarfile.open(archive, "w:gz") as tar:
        data = json.dumps(task).encode()
        info = tarfile.TarInfo("bigbench/bigbench/benchmark_tasks/parity/task.json")
        info.size = len(data)
        tar.addfile(info, io.BytesIO(data))
    monkeypatch.setenv("ICML26_BIGBENCH", str(archive))
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    model, tok = tiny_llama(hidden=32, layers=6, heads=2, max_len=128, seed=2)
    model.save_pretrained(tmp_path / "m")
    tok.save_pretrained(tmp_path / "m")
    out = tmp_path / "r.csv"
    res = CliRunner().invoke(
        app,
        [
            "responses",
            "--tasks",
            "parity",
            "--model",
            str(tmp_path / "m"),
            "--dtype",
            "float32",
            "--drops",
            "0,1",
            "--temps",
            "0,1",
            "--seeds",
            "2",
            "-o",
            str(out),
        ],
    )
    assert res.exit_code == 0, res.output
    R = load_responses(out)
    assert R.matrix.shape == (2 * (1 + 2), 12)
    assert all(m.startswith("m|logprob|drop") for m in R.models)
    bad = CliRunner().invoke(app, ["responses", "--tasks", "parity", "-o", str(tmp_path / "x.txt")])
    assert bad.exit_code != 0 and "parquet or .csv" in bad.output
