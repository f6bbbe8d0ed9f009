"""benchmarks/gpu_check.py: the CPU rehearsal CI runs (every method covered, within its budget,
with only the packages of the bare GPU machine), and the harness's own rules (usage errors, a
raising or overlong section recorded while the others run, checks that can fail)."""

import json
import subprocess
import sys
import time
import types
from pathlib import Path

import pytest
import torch

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "benchmarks" / "gpu_check.py"
sys.path.insert(0, str(SCRIPT.parent))
import gpu_check  # noqa: E402

#: packages the bare GPU machine does not have (issue 33): no section may need them
ABSENT = "gguf,optuna,rdkit,rdchiral,trl,ray,playwright"


def _run(*args, timeout=180):
    env = {"PATH": "/usr/bin:/bin", "HF_HUB_OFFLINE": "1", "PYTHONPATH": str(ROOT / "src"),
           "OMP_NUM_THREADS": "1", "HOME": str(Path.home())}
    return subprocess.run([sys.executable, str(SCRIPT), *map(str, args)], capture_output=True,
                          text=True, timeout=timeout, env=env, cwd=ROOT)


@pytest.fixture(scope="module")
def rehearsal(tmp_path_factory):
    out = tmp_path_factory.mktemp("gpu_check")
    t0 = time.monotonic()
    proc = _run("--device", "cpu", "--budget", "60", "--out", out, "--block-imports", ABSENT)
    wall = time.monotonic() - t0
    return proc, out, wall


def test_cpu_rehearsal_covers_every_method_within_budget(rehearsal):
    proc, out, wall = rehearsal
    assert proc.returncode == 0, proc.stderr[-3000:]
    rec = json.loads((out / "gpu_check.json").read_text())
    names = [s["name"] for s in rec["sections"]]
    assert names == list(gpu_check.SECTIONS)
    assert wall < 60 + 15, f"the rehearsal took {wall:.0f} s wall (budget 60 s + start-up)"
    for s in rec["sections"]:
        if s["status"] == "cpu-only":
            assert s["notes"] and "CPU-only by design: " in s["notes"][0]
            assert len(s["notes"][0]) > len("CPU-only by design: ") + 20, s["name"]
            continue
        assert s["status"] == "ok", (s["name"], s["status"], s["error"], s["notes"])
        assert s["checks"], f"{s['name']}: no correctness check"
        assert s["timings"], f"{s['name']}: no timing"
        assert all(c["passed"] for c in s["checks"])
        for t in s["timings"]:
            assert t["baseline_ms"] > 0 and t["method_ms"] > 0, (s["name"], t)
    # the methods whose GPU path is their point have real sections
    real = {s["name"] for s in rec["sections"] if s["status"] == "ok"}
    assert {"quartet2", "sso", "binarypc", "echo", "tie", "cat", "lems", "restore"} <= real


def test_rehearsal_markdown_has_a_table_per_method(rehearsal):
    _, out, _ = rehearsal
    md = (out / "GPU.md").read_text()
    assert "CPU rehearsal" in md
    for name in gpu_check.SECTIONS:
        assert f"\n## {name} — " in md


@pytest.mark.parametrize("args, message", [
    (["--device", "cuda"], "no CUDA GPU"),
    (["--device", "tpu"], "--device must be"),
    (["--device", "cpu", "--budget", "5"], "--budget must be at least"),
    (["--device", "cpu", "--only", "sso,nope"], "unknown method(s) 'nope'"),
])
def test_usage_errors_exit_2_with_one_line(tmp_path, args, message):
    if args[1] == "cuda" and torch.cuda.is_available():
        pytest.skip("a GPU is visible")
    proc = _run(*args, "--out", tmp_path / "o", timeout=60)
    assert proc.returncode == 2
    lines = [x for x in proc.stderr.splitlines() if x.strip()]
    assert len(lines) == 1 and message in lines[0], proc.stderr
    assert not (tmp_path / "o").exists()


def test_out_that_is_a_file_is_refused(tmp_path):
    f = tmp_path / "taken"
    f.write_text("x")
    proc = _run("--device", "cpu", "--out", f, "--only", "oserve", timeout=60)
    assert proc.returncode == 2 and "is not a folder" in proc.stderr


def _module(run=None, **attrs):
    m = types.ModuleType("fake_section")
    if run is not None:
        m.run = run
    for k, v in attrs.items():
        setattr(m, k, v)
    return m


def test_a_raising_section_is_an_error_with_its_message():
    def run(ctx):
        ctx.check("first", True)
        raise RuntimeError("boom at step 3")

    r = gpu_check.run_section("x", _module(run), "cpu", "tiny", 5.0)
    assert r.status == "error" and "boom at step 3" in r.error
    assert [c.name for c in r.checks] == ["first"]  # rows before the failure are kept


def test_an_overlong_section_is_stopped_and_keeps_its_rows():
    def run(ctx):
        ctx.value("before", 1)
        time.sleep(30)

    t0 = time.monotonic()
    r = gpu_check.run_section("x", _module(run), "cpu", "tiny", 0.5)
    assert time.monotonic() - t0 < 5
    assert r.status == "timeout" and r.values == [("before", "1")]


def test_a_failed_check_fails_the_section_and_cpu_only_is_not_run():
    r = gpu_check.run_section("x", _module(lambda ctx: ctx.check("c", False)), "cpu", "tiny", 5)
    assert r.status == "failed"
    r = gpu_check.run_section("y", _module(CPU_ONLY="the fits are scipy on CPU"), "cpu", "tiny", 5)
    assert r.status == "cpu-only" and "scipy" in r.notes[0]


def test_close_and_equal_can_fail():
    res = gpu_check.SectionResult("x")
    ctx = gpu_check.Ctx(res, "cpu", "tiny", time.monotonic() + 10)
    ref = torch.linspace(-1, 1, 101, dtype=torch.float64)
    assert ctx.close("within", ref.float(), ref, atol=1e-7)
    bumped = ref.clone()
    bumped[50] += 1e-4
    assert not ctx.close("beyond", bumped, ref, atol=1e-5)
    assert res.checks[-1].err == pytest.approx(1e-4, rel=1e-6)
    assert not ctx.close("nan", torch.full((3,), float("nan")), torch.zeros(3), atol=1.0)
    assert not ctx.close("shape", torch.zeros(3), torch.zeros(4), atol=1.0)
    codes = torch.arange(16, dtype=torch.uint8)
    assert ctx.equal("same", codes, codes.clone())
    flipped = codes.clone()
    flipped[3] ^= 1
    assert not ctx.equal("one bit", flipped, codes)
    assert res.checks[-1].err == 1
    assert not ctx.equal("dtype", codes.to(torch.int16), codes)
    nan = torch.tensor([1.0, float("nan")])
    assert ctx.equal("NaN where both are NaN", nan, nan.clone())
    assert not ctx.equal("NaN on one side", nan, torch.tensor([1.0, 2.0]))


def test_compare_records_the_ratio_of_medians():
    res = gpu_check.SectionResult("x")
    ctx = gpu_check.Ctx(res, "cpu", "tiny", time.monotonic() + 10)
    row = ctx.compare("sleep", "short", lambda: time.sleep(0.002), lambda: time.sleep(0.008),
                      warmup=1, iters=3)
    assert row.baseline_ms >= 2 and row.method_ms >= 8
    assert 1.5 < row.ratio < 8


def test_markdown_reports_failures_and_errors():
    ok = gpu_check.SectionResult("a", status="failed", checks=[gpu_check.Check("codes", False,
                                                                                3.0, 0.0)])
    bad = gpu_check.SectionResult("b", status="error", error="ValueError: nope")
    args = types.SimpleNamespace(scale="tiny", budget=60.0, argv=["--device", "cpu"])
    md = gpu_check.to_markdown(gpu_check._record([ok, bad], args, {
        "date": "d", "python": "3", "torch": "t", "cpu": "c", "device": "cpu"}, 1.0))
    assert "| codes | **no** |" in md and "Error: ValueError: nope" in md


def test_markdown_cells_escape_pipes():
    r = gpu_check.SectionResult("a", status="ok", checks=[gpu_check.Check("|x| <= 1", True)],
                                values=[("a|b", "c\nd")])
    args = types.SimpleNamespace(scale="tiny", budget=60.0, argv=[])
    md = gpu_check.to_markdown(gpu_check._record([r], args, {
        "date": "d", "python": "3", "torch": "t", "cpu": "c", "device": "cpu"}, 1.0))
    assert "| \\|x\\| <= 1 | yes |" in md and "| a\\|b | c d |" in md
