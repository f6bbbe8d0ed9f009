"""`icml26 tie fit`: KS bootstrap on heavy uncensored tails (no int64 overflow), --cap, bad input."""

import json
import warnings

import numpy as np
import pytest
from typer.testing import CliRunner

from icml26.tie.cli import app
from icml26.tie.lengths import MAX_LENGTH, LogT, ks_test


def _heavy():
    # 12 uncensored lengths spread over 4 decades: the free-nu fit has a tail whose draws pass 2**63
    return np.maximum(np.ceil(np.exp(np.random.default_rng(1).normal(2, 3, 12))), 1).astype(int)


def test_heavy_tail_draws_stay_finite_integers():
    L, _ = LogT(0.0, 40.0, 1.05).sample_lengths(np.random.default_rng(0), 2000)
    assert L.dtype == np.int64 and L.min() >= 1 and L.max() == MAX_LENGTH


def test_ks_bootstrap_on_an_uncensored_heavy_tail_does_not_overflow():
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # the old cast gave "invalid value encountered in cast"
        D, p = ks_test(_heavy(), None, "logt", None, n_boot=20, seed=0)
    assert 0 < D < 1 and 1 / 21 <= p <= 1


def test_fit_cli_with_ks_boot_99_writes_p_values(tmp_path):
    (tmp_path / "l.json").write_text(json.dumps({"a": {"lengths": _heavy().tolist(), "censored": [False] * 12}}))
    r = CliRunner().invoke(app, ["fit", str(tmp_path / "l.json"), "--ks-boot", "99", "-o", str(tmp_path / "f.json")])
    assert r.exit_code == 0, (r.output, r.exception)
    fit = json.loads((tmp_path / "f.json").read_text())["a"]
    for k in ("ks_p_logt", "ks_p_logt_free", "ks_p_lognormal"):
        assert 0.01 <= fit[k] <= 1 and round(fit[k] * 100) == pytest.approx(fit[k] * 100)  # (1 + hits) / 100
    assert "KS pass rates" in r.output


@pytest.mark.parametrize("entry,args,match", [
    ({"lengths": [3, 4, 300], "censored": [False] * 3}, ["--cap", "256"], "prompt a: a length 300 exceeds --cap 256"),
    ({"lengths": [8, 8], "censored": [True, True]}, [], "prompt a: all 2 lengths are censored"),
    ({"lens": [1, 2]}, [], "prompt a: need 'lengths'"),
])
def test_fit_cli_bad_entries_name_file_and_prompt(tmp_path, entry, args, match):
    (tmp_path / "l.json").write_text(json.dumps({"a": entry}))
    r = CliRunner().invoke(app, ["fit", str(tmp_path / "l.json"), *args, "-o", str(tmp_path / "f.json")])
    assert r.exit_code != 0 and match in str(r.exception) and "l.json" in str(r.exception)
    assert not (tmp_path / "f.json").exists()
