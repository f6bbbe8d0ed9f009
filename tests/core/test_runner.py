"""The runner: records, verdicts computed (not written by claims), errors, interrupts."""

import json

import pytest

from icml26.core.claims import (
    Claim,
    Measure,
    Result,
    RunContext,
    lazy,
    result_path,
    run_claim,
)
from icml26.core.errors import UserError


def _ok(ctx: RunContext) -> Result:
    return Result(
        rows=[{"system": "m", "score": 2.0}, {"system": "baseline", "score": 1.0}],
        headline=Measure("ratio", 2.0, "x", (1.5, 2.5)),
        target=1.2,
        notes=[f"scale={ctx.scale}"],
    )


def _boom(ctx):
    raise RuntimeError("the claim blew up")


def _interrupt(ctx):
    raise KeyboardInterrupt


def test_record_written_with_computed_verdict(tmp_path):
    rec = run_claim(Claim("ok", "P", "S", "F", run=_ok), scale="tiny", seed=3, out_root=tmp_path)
    on_disk = json.loads(result_path(tmp_path, "ok", "tiny").read_text())
    assert on_disk == rec
    assert rec["verdict"] == "reproduced"
    assert rec["seed"] == 3 and rec["scale"] == "tiny"
    assert rec["headline"]["spread"] == [1.5, 2.5]
    assert rec["environment"]["threads"] >= 1
    assert rec["environment"]["versions"]["python"]
    assert rec["notes"] == ["scale=tiny"]


def test_exception_becomes_error_record(tmp_path):
    rec = run_claim(Claim("bad", "P", "S", "F", run=_boom), scale="tiny", out_root=tmp_path)
    assert rec["verdict"] == "error"
    assert rec["error"]["message"] == "the claim blew up"
    assert "RuntimeError" in rec["error"]["traceback"]
    assert result_path(tmp_path, "bad", "tiny").is_file()


def test_interrupt_writes_nothing_and_keeps_earlier(tmp_path):
    run_claim(Claim("ok", "P", "S", "F", run=_ok), scale="tiny", out_root=tmp_path)
    before = result_path(tmp_path, "ok", "tiny").read_text()
    with pytest.raises(KeyboardInterrupt):
        run_claim(Claim("ok", "P", "S", "F", run=_interrupt), scale="tiny", out_root=tmp_path)
    assert result_path(tmp_path, "ok", "tiny").read_text() == before
    assert not list(tmp_path.rglob("*.tmp"))


def test_claim_returning_wrong_type_is_error(tmp_path):
    rec = run_claim(
        Claim("w", "P", "S", "F", run=lambda ctx: {"x": 1}), scale="tiny", out_root=tmp_path
    )
    assert rec["verdict"] == "error" and "not Result" in rec["error"]["message"]


def test_seeding_is_applied(tmp_path):
    import random

    import torch

    seen = []

    def draw(ctx):
        seen.append((random.random(), float(torch.rand(1))))
        return _ok(ctx)

    for _ in range(2):
        run_claim(Claim("d", "P", "S", "F", run=draw), scale="tiny", seed=7, out_root=tmp_path)
    assert seen[0] == seen[1]


def test_planned_claim_cannot_run(tmp_path):
    with pytest.raises(UserError, match="planned"):
        run_claim(Claim("p", "P", "S", "F"), out_root=tmp_path)


def test_bad_scale():
    with pytest.raises(UserError, match="tiny, small, full"):
        RunContext(scale="huge")


def test_lazy_imports_on_call_only():
    run = lazy("json:dumps")
    assert run([1]) == "[1]"
    with pytest.raises(ValueError, match="pkg.module:function"):
        lazy("no_colon")


def _spin(seconds: float) -> None:
    """Burn ``seconds`` of this process's CPU time."""
    import time

    t = time.process_time()
    while time.process_time() - t < seconds:
        pass


def _burns_cpu(ctx):
    """0.4 CPU-s in a child process, then 0.4 CPU-s here."""
    import subprocess
    import sys

    child = "import time\nt = time.process_time()\nwhile time.process_time() - t < 0.4: pass"
    subprocess.run([sys.executable, "-I", "-c", child], check=True)
    _spin(0.4)
    return _ok(ctx)


def test_cpu_time_counts_the_process_and_its_children(tmp_path):
    rec = run_claim(Claim("burn", "P", "S", "F", run=_burns_cpu), scale="tiny", out_root=tmp_path)
    assert rec["verdict"] == "reproduced"
    # both shares (0.8 CPU-s; either alone is 0.4), plus interpreter start-up; a loaded machine
    # stretches the wall time, not this
    assert 0.75 <= rec["cpu_time_s"] <= 3.0, rec["cpu_time_s"]


def test_default_threads_follow_the_free_cores(monkeypatch):
    """Without ICML26_THREADS the runner takes the usable cores minus the load (at least 1)."""
    import os

    from icml26.core import claims as C

    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: {0, 1, 2, 3}, raising=False)
    assert C.usable_cores() == 4
    assert C.free_cores(load=0.2) == 4
    assert C.free_cores(load=1.6) == 2
    assert C.free_cores(load=9.0) == 1
    monkeypatch.setattr(os, "getloadavg", lambda: (2.4, 0.0, 0.0))
    monkeypatch.delenv("ICML26_THREADS", raising=False)
    assert C.set_threads() == 2
    monkeypatch.setenv("ICML26_THREADS", "3")
    assert C.set_threads() == 3  # the override wins
    assert C.set_threads(1) == 1
