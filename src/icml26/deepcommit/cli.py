"""``icml26 deepcommit``: milestone DAGs from git history, and EvoClaw scoring.

Only typer and the standard library are imported here; the method loads inside commands.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated

import typer

app = typer.Typer(
    help="DeepCommit/EvoClaw: group a git range into a milestone DAG (EvoClaw-data layout) "
    "and score an agent's test outcomes with score_reliable.",
    no_args_is_help=True,
)


@app.command("build")
def build_cmd(
    repo: Annotated[Path, typer.Argument(help="A local git repository (not modified).")],
    rev_range: Annotated[
        str, typer.Option("--range", help="Revision range, e.g. v1..v2.")
    ] = "HEAD",
    out: Annotated[Path, typer.Option("--out", "-o", help="Dataset folder to write.")] = Path(
        "data"
    ),
    threshold: Annotated[float, typer.Option(help="Clustering distance cut in (0, 1].")] = 0.6,
    weights: Annotated[
        str, typer.Option(help="Signal weights, e.g. file=1,symbol=1,message=1,time=1,author=0.")
    ] = "",
    time_scale_h: Annotated[float, typer.Option(help="Time-adjacency scale in hours.")] = 12.0,
    verify_tests: Annotated[
        bool,
        typer.Option(
            "--verify/--no-verify",
            help="Replay milestones in a scratch worktree and classify "
            "tests with pytest (F2P/P2P/N2P, flaky filtered).",
        ),
    ] = False,
    runs: Annotated[int, typer.Option(help="Test repeats per state when verifying.")] = 3,
    test_dir: Annotated[list[str], typer.Option(help="Test folder(s), repeatable.")] = ["tests"],  # noqa: B006
    test_cmd: Annotated[
        str,
        typer.Option(
            help="Test command instead of pytest (shell words; {junit} = the JUnit XML path "
            "to write, {python} = this interpreter), e.g. "
            "'{python} -m pytest -q tests/core --junitxml={junit}'."
        ),
    ] = "",
    timeout: Annotated[float, typer.Option(help="Seconds per test run (timeout = fail).")] = 300,
    fresh: Annotated[
        bool, typer.Option("--fresh", help="Ignore a checkpoint under OUT/.build and start over.")
    ] = False,
    llm: Annotated[
        str,
        typer.Option(
            help="Optional LLM pass (split, merge, names, SRS) with this chat model: 'local' "
            "(SmolLM2-135M-Instruct), 'local:PATH', 'http://HOST:PORT/v1#MODEL'. Off by default."
        ),
    ] = "",
) -> None:
    """Preprocess the history, group commits into milestones, add edges, (verify,) write the
    layout. Every stage is checkpointed under OUT/.build: run it again to resume."""
    import shlex

    from icml26.core.chat import get_chat
    from icml26.core.errors import UserError
    from icml26.deepcommit.build import build_dataset
    from icml26.deepcommit.milestones import SIGNALS, GroupConfig

    w = {}
    for part in filter(None, weights.split(",")):
        key, _, val = part.partition("=")
        if key not in SIGNALS:
            raise UserError(f"--weights: unknown signal {key!r}; expected one of {SIGNALS}")
        try:
            w[key] = float(val)
        except ValueError:
            raise UserError(f"--weights: {key}={val!r} is not a number") from None
    cfg = GroupConfig(**w, threshold=threshold, time_scale_h=time_scale_h)
    # absolute: git runs in scratch worktrees (a relative `-o DATA` failed with "cannot change
    # to 'DATA/.build/repo.git'")
    repo, out = repo.resolve(), out.resolve()
    res = build_dataset(
        repo,
        rev_range,
        out,
        cfg,
        verify_tests=verify_tests,
        runs=runs,
        timeout_s=timeout,
        test_dirs=tuple(test_dir),
        test_cmd=shlex.split(test_cmd) or None,
        fresh=fresh,
        chat=get_chat(llm) if llm else None,
        chat_spec=llm,
        echo=typer.echo,
    )
    for mid, why in sorted(res["non_graded"].items()):
        typer.echo(f"{mid}: non-graded ({why})")
    if res["resumed"]:
        typer.echo(f"resumed from checkpoint: {', '.join(res['resumed'])}")
    graded = "" if res["graded"] is None else f", {res['graded']} graded"
    typer.echo(
        f"{res['kept']} commits kept, {res['dropped']} dropped; {res['milestones']} milestones"
        f"{graded}, {res['edges']} edges ({res['back_edges']} back-edges dropped) -> {out}"
    )


@app.command("run")
def run_cmd(
    data: Annotated[Path, typer.Argument(help="Dataset folder from `build --verify`.")],
    agent_cmd: Annotated[
        str | None,
        typer.Option(
            help="Shell command run once per milestone in the agent's workspace (cwd); "
            "{workdir}, {milestone}, {srs} (path of the task's SRS.md) are filled in and "
            "exported as $DC_WORKDIR, $DC_MILESTONE, $DC_SRS. Exit 0 = submit.",
        ),
    ] = None,
    agent_llm: Annotated[
        str | None,
        typer.Option(
            help="Instead of --agent-cmd: the built-in one-turn LLM agent (deepcommit.agent) on "
            "a core.chat spec: local:qwen2.5-coder-0.5b-instruct, local:PATH, or "
            "http://HOST/v1#MODEL.",
        ),
    ] = None,
    llm_tokens: Annotated[int, typer.Option(help="--agent-llm: new tokens per milestone.")] = 512,
    llm_temperature: Annotated[
        float, typer.Option(help="--agent-llm: sampling temperature (0 = greedy).")
    ] = 0.0,
    out: Annotated[Path, typer.Option("--out", "-o", help="Runs folder (resumable).")] = Path(
        "runs"
    ),
    mode: Annotated[str, typer.Option(help="continuous, isolated, or both.")] = "continuous",
    ignore_weak: Annotated[
        bool, typer.Option("--ignore-weak", help="Weak predecessors need only be finished.")
    ] = False,
    timeout: Annotated[float, typer.Option(help="Seconds per agent call.")] = 18_000,
    idle_rounds: Annotated[
        int, typer.Option(help="Stop after this many rounds without a new submission.")
    ] = 3,
    fresh: Annotated[bool, typer.Option("--fresh", help="Delete OUT and start over.")] = False,
    docker: Annotated[
        str | None,
        typer.Option(help="Run the agent command in this container image (workspace mounted at "
                     "/workspace, SRS at /task/SRS.md)."),
    ] = None,
    docker_bin: Annotated[str, typer.Option(help="docker-compatible CLI (docker, podman).")] = "docker",
) -> None:
    """Run a command agent through the milestone DAG (continuous and/or isolated) and score it
    with score_reliable. Interrupted? Run the same command again: it resumes."""
    from icml26.core.errors import UserError
    from icml26.deepcommit.runner import run_dataset

    if (agent_cmd is None) == (agent_llm is None):
        raise UserError("give exactly one of --agent-cmd and --agent-llm")
    if agent_llm is not None:
        if docker:
            raise UserError("--docker runs a command agent; it does not apply to --agent-llm")
        from icml26.core.chat import get_chat
        from icml26.deepcommit.agent import LLMAgent

        agent_cmd = LLMAgent(get_chat(agent_llm), max_new_tokens=llm_tokens,
                             temperature=llm_temperature, name=agent_llm,
                             log_dir=out.resolve() / "llm-agent")
    if docker:
        from icml26.deepcommit.docker import docker_command

        agent_cmd = docker_command(agent_cmd, docker, binary=docker_bin)

    modes = {"both": ("continuous", "isolated")}.get(mode, (mode,))
    if any(m not in ("continuous", "isolated") for m in modes):
        raise UserError(f"--mode: expected continuous, isolated or both; got {mode!r}")
    # absolute: the runner runs git in other folders (`icml26 deepcommit run DATA ... -o RUNS`
    # failed with "'RUNS/repo.git' does not appear to be a git repository")
    data, out = data.resolve(), out.resolve()
    summ = run_dataset(
        data,
        agent_cmd,
        out,
        modes,
        ignore_weak=ignore_weak,
        timeout_s=timeout,
        max_idle_rounds=idle_rounds,
        fresh=fresh,
        echo=typer.echo,
    )
    if "continuous_over_isolated" in summ and summ["continuous_over_isolated"] is not None:
        typer.echo(f"continuous / isolated = {summ['continuous_over_isolated']:.3f}")
    typer.echo(f"-> {out / 'summary.json'}")


@app.command("score")
def score_cmd(
    data: Annotated[Path, typer.Argument(help="Dataset folder with test_results/.")],
    runs: Annotated[
        Path,
        typer.Argument(
            help='JSON {milestone: {"passed": [...], "failed": [...], "collected": true}}.'
        ),
    ],
) -> None:
    """score_reliable (x100) and resolve rate of one trial's test outcomes."""
    from icml26.core.errors import UserError
    from icml26.deepcommit.export import load_dataset
    from icml26.deepcommit.score import MilestoneTests, RunOutcome, score_trial

    ds = load_dataset(data)
    try:
        raw = json.loads(runs.read_text())
    except (OSError, json.JSONDecodeError) as exc:
        raise UserError(f"{runs}: cannot read runs JSON ({exc})") from None
    graded = [m for m in ds.selected if m not in set(ds.non_graded)]
    specs = {}
    for m in graded:
        c = ds.classifications.get(m, {})
        specs[m] = MilestoneTests.of(
            c.get("FAIL_TO_PASS", ()),
            c.get("PASS_TO_PASS", ()),
            c.get("NONE_TO_PASS", ()),
            c.get("filtered", ()),
        )
    outcomes = {
        m: RunOutcome.of(r.get("passed", ()), r.get("failed", ()), bool(r.get("collected", True)))
        for m, r in raw.items()
    }
    res = score_trial(specs, outcomes, graded)
    typer.echo(
        json.dumps(
            {
                "score": round(res["score"], 2),
                "resolve_rate": round(res["resolve_rate"], 2),
                "graded": len(graded),
            },
            indent=1,
        )
    )


@app.command("export")
def export_cmd(
    data: Annotated[Path, typer.Argument(help="Dataset folder from `build --verify`.")],
    swebench: Annotated[
        bool, typer.Option("--swebench", help="SWE-bench task instances (JSONL), one per graded "
                           "milestone.")
    ] = False,
    out: Annotated[Path, typer.Option("--out", "-o", help="Instances JSONL to write.")] = Path(
        "instances.jsonl"
    ),
    runs: Annotated[
        Path | None, typer.Option(help="Runs folder of `deepcommit run` (isolated mode): also "
                                  "write its patches as SWE-bench predictions.")
    ] = None,
    predictions: Annotated[
        Path, typer.Option(help="Predictions JSONL to write (with --runs).")
    ] = Path("predictions.jsonl"),
    model: Annotated[str, typer.Option(help="model_name_or_path of the predictions.")] = "agent",
    repo: Annotated[
        str | None, typer.Option(help="Repository name for instance ids (default: the source "
                                 "folder's name).")
    ] = None,
) -> None:
    """Export a verified milestone dataset in another benchmark's format (--swebench)."""
    from icml26.core.errors import UserError
    from icml26.deepcommit import swebench as sb

    if not swebench:
        raise UserError("say which format: --swebench")
    inst = sb.instances(data, repo=repo)
    sb.write_jsonl(inst, out)
    typer.echo(f"wrote {len(inst)} SWE-bench instances to {out}")
    if runs is not None:
        preds = sb.predictions(data, runs, model=model, repo=repo)
        sb.write_jsonl(preds, predictions)
        typer.echo(f"wrote {len(preds)} predictions to {predictions}")
