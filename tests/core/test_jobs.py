"""core.jobs: in-process, local-process and Ray backends give the same records; retries, Ctrl-C."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from icml26.core.claims import Claim, Resources, code_version, load_record, run_claim
from icml26.core.errors import UserError
from icml26.core.jobs import (
    InProcess,
    Job,
    LocalProcesses,
    RayBackend,
    comparable,
    parse_jobs,
)

DEMO = "icml26.core.demo:run"


def _jobs(root: Path, **opts) -> list[Job]:
    options = tuple(sorted({"units": "3", "samples": "20000", **opts}.items()))
    return [Job("demo-a", "tiny", 0, options=options, out_root=str(root), threads=1,
                run_target=DEMO),
            Job("demo-b", "tiny", 1, options=options, out_root=str(root), threads=1,
                run_target=DEMO)]


def _run(backend, root: Path, **opts) -> dict[str, dict]:
    records = {}
    backend.run(_jobs(root, **opts), lambda job, rec: records.__setitem__(job.name, rec))
    return records


def _no_temp_files(root: Path) -> None:
    leftovers = [p for p in root.rglob("*") if ".tmp" in p.name or p.name.startswith(".")]
    assert not leftovers, leftovers


def test_parse_jobs():
    assert isinstance(parse_jobs(None), InProcess) and isinstance(parse_jobs(""), InProcess)
    assert isinstance(parse_jobs("2"), LocalProcesses) and parse_jobs("2").n == 2
    assert isinstance(parse_jobs("ray"), RayBackend)
    assert parse_jobs("ray://head:10001").address == "ray://head:10001"
    for bad in ("0", "-1", "lots", "ray://", "http://x"):
        with pytest.raises(UserError, match="--jobs"):
            parse_jobs(bad)


def test_resources_defaults_and_validation():
    c = Claim("x", "p", "s", "f", run=None, resources={"full": Resources(4, 1, 80)})
    assert c.resources_for("tiny") == Resources(1) and c.resources_for("full").gpus == 1
    assert str(Resources(4, 1, 80)) == "4 CPU, 1 GPU, 80 GB"
    with pytest.raises(ValueError):
        Resources(cpus=0)


def test_local_processes_match_in_process(tmp_path):
    seq = _run(InProcess(), tmp_path / "seq")
    par = _run(LocalProcesses(2), tmp_path / "par")
    assert set(seq) == set(par) == {"demo-a", "demo-b"}
    for name in seq:
        assert comparable(seq[name]) == comparable(par[name])
        assert par[name]["units"] == 3 and "units" not in seq[name]  # fanned out vs whole
        assert seq[name]["verdict"] == "reproduced"
        on_disk = load_record(tmp_path / "par" / name / "tiny.json")
        assert comparable(on_disk) == comparable(par[name])
        for fig in par[name]["figures"]:
            assert (tmp_path / "par" / fig).read_text() == (tmp_path / "seq" / fig).read_text()
    _no_temp_files(tmp_path)


def test_killed_worker_is_retried(tmp_path):
    marker = tmp_path / "crash.marker"
    recs = _run(LocalProcesses(2, max_retries=2), tmp_path / "r", crash_marker=str(marker))
    assert marker.exists()  # one worker really died
    ref = _run(InProcess(), tmp_path / "ref", crash_marker=str(marker))
    for name in recs:
        assert comparable(recs[name])["headline"] == comparable(ref[name])["headline"]
    _no_temp_files(tmp_path / "r")


def test_claim_that_raises_is_an_error_not_a_retry(tmp_path):
    rec = run_claim(Claim("bad", "p", "s", "f", run=lambda ctx: 1 / 0), scale="tiny",
                    out_root=tmp_path, map_units=lambda c, u: [])
    assert rec["verdict"] == "error" and rec["error"]["type"] == "ZeroDivisionError"
    assert rec["code_version"] == code_version()


def test_ctrl_c_keeps_finished_records(tmp_path):
    # One worker per unit, so the fast claim never queues behind the slow one (on a loaded
    # machine a spawned worker's imports alone can take a minute), and the slow units sleep far
    # longer than any such delay: the slow claim can only end by being cancelled.
    script = textwrap.dedent(f"""
        import signal, sys
        # what a terminal gives a CLI; test runners (xdist workers) may pass SIGINT ignored or
        # defaulted to their children
        signal.signal(signal.SIGINT, signal.default_int_handler)
        from icml26.core.jobs import Job, LocalProcesses
        fast = Job("fast", "tiny", options=(("samples", "1000"), ("units", "1")),
                   out_root={str(tmp_path)!r}, threads=1, run_target={DEMO!r})
        slow = Job("slow", "tiny", options=(("sleep", "600"), ("units", "2")),
                   out_root={str(tmp_path)!r}, threads=1, run_target={DEMO!r})
        def done(job, rec):
            print("done", job.name, flush=True)
        try:
            LocalProcesses(3).run([fast, slow], done)
        except KeyboardInterrupt:
            print("interrupted", flush=True)
            sys.exit(130)
    """)
    proc = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, text=True,
                            env={**os.environ, "PYTHONUNBUFFERED": "1"})
    assert proc.stdout.readline().strip() == "done fast"
    time.sleep(1.0)
    proc.send_signal(signal.SIGINT)
    out, _ = proc.communicate(timeout=60)
    assert proc.returncode == 130 and "interrupted" in out, (proc.returncode, out)
    assert load_record(tmp_path / "fast" / "tiny.json")["verdict"] == "reproduced"
    assert not (tmp_path / "slow" / "tiny.json").exists()
    _no_temp_files(tmp_path)


def test_resume_keeps_same_version_records(tmp_path):
    from icml26 import claims_index
    from icml26.cli import _resumable

    claims = [claims_index.get("sso"), claims_index.get("atlas"), claims_index.get("tie")]
    base = {"scale": "tiny", "seed": 0, "code_version": code_version(), "verdict": "reproduced"}
    for name, extra in (("sso", {}), ("atlas", {"code_version": "0.0+other"}),
                        ("tie", {"verdict": "error"})):
        (tmp_path / name).mkdir()
        (tmp_path / name / "tiny.json").write_text(json.dumps({**base, **extra}))
    run, kept = _resumable(claims, tmp_path, "tiny", 0)
    assert kept == ["sso"] and [c.name for c in run] == ["atlas", "tie"]
    run, kept = _resumable(claims, tmp_path, "tiny", 1)
    assert kept == []


def test_unreachable_ray_address_fails_fast():
    pytest.importorskip("ray")
    import ray

    if ray.is_initialized():
        pytest.skip("a Ray session is already running in this worker")
    t0 = time.perf_counter()
    with pytest.raises(UserError, match="ray://127.0.0.1:9"):
        RayBackend("ray://127.0.0.1:9", connect_timeout=5).run(_jobs(Path("/nonexistent")),
                                                             lambda j, r: None)
    assert time.perf_counter() - t0 < 30


def test_ray_backend_matches_in_process(tmp_path, monkeypatch):
    ray = pytest.importorskip("ray")
    ray.init(num_cpus=2, include_dashboard=False, logging_level="ERROR",
             runtime_env={"env_vars": {"HF_HUB_OFFLINE": "1"}})
    try:
        seq = _run(InProcess(), tmp_path / "seq")
        got = _run(RayBackend(), tmp_path / "ray")
        for name in seq:
            assert comparable(seq[name]) == comparable(got[name])
            assert comparable(load_record(tmp_path / "ray" / name / "tiny.json")) == \
                comparable(seq[name])
            for fig in got[name]["figures"]:
                assert (tmp_path / "ray" / fig).read_text() == (tmp_path / "seq" / fig).read_text()
        _no_temp_files(tmp_path / "ray")
        # a GPU request on a CPU-only cluster is refused before anything runs
        gpu_job = [Job("demo-gpu", "full", options=(("units", "1"),), out_root=str(tmp_path / "g"),
                       run_target=DEMO)]
        with pytest.raises(UserError, match="demo-gpu.*1 GPU"):
            RayBackend().run(gpu_job, lambda j, r: None)
        assert not (tmp_path / "g").exists()
        monkeypatch.setattr("icml26.core.jobs.code_version", lambda: "9.9+driver")
        with pytest.raises(UserError, match="9.9\\+driver"):
            RayBackend().run(_jobs(tmp_path / "v"), lambda j, r: None)
    finally:
        ray.shutdown()
