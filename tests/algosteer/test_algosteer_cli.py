"""CLI: classify a file (with sandboxed tests), stats of a log, clear errors for bad input."""

from test_algosteer_grid import SeededStub  # noqa: E402  (same test folder)
from typer.testing import CliRunner

from icml26.algosteer.cli import app
from icml26.algosteer.grid import GridConfig, run_grid
from icml26.algosteer.tasks import TASKS

runner = CliRunner()


def test_classify_reply_file(tmp_path):
    f = tmp_path / "reply.md"
    f.write_text("Here:\n```python\n" + TASKS["tree"].references["morris"][0] + "```\n")
    res = runner.invoke(app, ["classify", str(f), "--task", "tree", "--test"])
    assert res.exit_code == 0, res.output
    assert res.output.startswith("morris\t")
    assert "functional: pass (6/6)" in res.output and "large: pass (2/2)" in res.output


def test_classify_unknown_task_is_a_user_error(tmp_path):
    f = tmp_path / "x.py"
    f.write_text("def fib(n):\n    return n\n")
    res = runner.invoke(app, ["classify", str(f), "--task", "fibonaci"])
    assert res.exit_code != 0 and "did you mean fib" in str(res.exception)


def test_stats_of_a_log(tmp_path):
    cfg = GridConfig(tasks=("fib",), cues=("none", "none_resampled", "performance"), samples=4)
    run_grid(SeededStub(), cfg, tmp_path / "runs.jsonl")
    res = runner.invoke(
        app, ["stats", str(tmp_path / "runs.jsonl"), "-o", str(tmp_path / "o"), "--min-n", "2"]
    )
    assert res.exit_code == 0, res.output
    assert (tmp_path / "o" / "table.json").is_file() and (tmp_path / "o" / "shares.png").is_file()
    assert "semantic/control gated" in res.output


def test_run_through_a_core_chat_stub(tmp_path):
    log = tmp_path / "runs.jsonl"
    args = [
        "run",
        "-o",
        str(log),
        "--chat",
        "stub:echo",
        "--tasks",
        "fib",
        "--cues",
        "none,naming",
        "--samples",
        "2",
    ]
    res = runner.invoke(app, args)
    assert res.exit_code == 0, res.output
    assert "4 rows" in res.output and "0 pass" in res.output  # an echoed prompt is no program
    res = runner.invoke(app, [*args[:-1], "3"])  # another config on the same log
    assert res.exit_code != 0 and "another configuration" in str(res.exception)


def test_export_score_and_promptfoo_commands(tmp_path):
    import json

    import yaml

    cfg = GridConfig(tasks=("fib",), cues=("none", "performance"), samples=2)
    rows = run_grid(SeededStub(), cfg, tmp_path / "runs.jsonl")
    res = runner.invoke(app, ["export", str(tmp_path / "runs.jsonl"), "-o", str(tmp_path / "s.jsonl")])
    assert res.exit_code == 0 and "wrote 4 samples" in res.output, res.output
    res = runner.invoke(app, ["score", str(tmp_path / "s.jsonl"), "-o", str(tmp_path / "b.jsonl"),
                              "--model", "mine"])
    assert res.exit_code == 0, res.output
    assert f"4 rows in {tmp_path / 'b.jsonl'}; {sum(r['outcome'] == 'pass' for r in rows)} pass" in res.output
    res = runner.invoke(app, ["promptfoo", "-o", str(tmp_path / "pf.yaml"), "--tasks", "fib,tree",
                              "--cues", "none,naming", "--samples", "3",
                              "--provider", "openai:chat:qwen"])
    assert res.exit_code == 0, res.output
    doc = yaml.safe_load((tmp_path / "pf.yaml").read_text())
    assert [p["id"] for p in doc["providers"]] == ["openai:chat:qwen"]
    assert [t["description"] for t in doc["tests"]] == ["fib/none", "fib/naming", "tree/none", "tree/naming"]
    bad = tmp_path / "bad.jsonl"
    bad.write_text(json.dumps({"task_id": "algosteer/fib", "solution": "x"}) + "\n{oops\n")
    res = runner.invoke(app, ["score", str(bad), "-o", str(tmp_path / "c.jsonl")])
    assert res.exit_code != 0 and "bad.jsonl:2: not JSON" in str(res.exception)
