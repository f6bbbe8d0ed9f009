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
