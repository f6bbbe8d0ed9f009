"""``icml26 quartet2 error``: CSV rows equal the library's numbers; bad input is a UserError."""

import csv

import pytest
import torch
from safetensors.torch import save_file
from typer.testing import CliRunner

from icml26.core.errors import UserError
from icml26.quartet2.analysis import quantizer_errors
from icml26.quartet2.cli import app


def test_error_command_writes_the_library_numbers(tmp_path):
    g = torch.Generator().manual_seed(0)
    t = {"act": torch.randn(64, 128, generator=g), "grad": torch.randn(32, 200, generator=g) ** 3}
    src, out = tmp_path / "t.safetensors", tmp_path / "e.csv"
    save_file(t, str(src))
    res = CliRunner().invoke(app, ["error", str(src), "-o", str(out), "--hadamard-dim", "64"])
    assert res.exit_code == 0, res.output
    rows = list(csv.DictReader(out.open()))
    assert len(rows) == 8
    want = quantizer_errors(t["act"], hadamard_dim=64, seed=0)
    got = {r["mode"]: float(r["relative_mse"]) for r in rows if r["tensor"] == "act"}
    assert got == pytest.approx(want, rel=1e-5)


def test_error_command_bad_input(tmp_path):
    res = CliRunner().invoke(app, ["error", str(tmp_path / "missing.safetensors")])
    assert isinstance(res.exception, UserError) and "no such file" in str(res.exception)
    bad = tmp_path / "bad.safetensors"
    bad.write_bytes(b"not safetensors")
    res = CliRunner().invoke(app, ["error", str(bad)])
    assert isinstance(res.exception, UserError) and "cannot read" in str(res.exception)
    save_file({"x": torch.randn(4, 16)}, str(tmp_path / "ok.safetensors"))
    res = CliRunner().invoke(app, ["error", str(tmp_path / "ok.safetensors"), "--hadamard-dim", "24"])
    assert isinstance(res.exception, UserError) and "power of two" in str(res.exception)
