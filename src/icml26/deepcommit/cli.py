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
) -> None:
    """Preprocess the history, group commits into milestones, add edges, write the layout."""
    from icml26.core.errors import UserError
    from icml26.deepcommit.dag import build_dag
    from icml26.deepcommit.export import write_dataset
    from icml26.deepcommit.history import load_history
    from icml26.deepcommit.milestones import SIGNALS, GroupConfig, group

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
    hist = load_history(repo, rev_range)
    if not hist.commits:
        raise UserError(f"{repo}: no commits left in {rev_range!r} after preprocessing")
    labels = group(hist.commits, cfg)
    dag = build_dag(hist, labels)
    classes = None
    if verify_tests:
        from icml26.deepcommit.export import milestone_id
        from icml26.deepcommit.verify import verify

        v = verify(hist, labels, dag, runs=runs, test_dirs=tuple(test_dir))
        classes = {milestone_id(m): c for m, c in v.classification.items() if m not in v.non_graded}
        for m, why in v.non_graded.items():
            typer.echo(f"{milestone_id(m)}: non-graded ({why})")
    write_dataset(out, hist, labels, dag, classifications=classes, test_dirs=tuple(test_dir))
    typer.echo(
        f"{len(hist.commits)} commits kept, {len(hist.dropped)} dropped; "
        f"{int(labels.max()) + 1} milestones, {len(dag.edges)} edges "
        f"({len(dag.back_edges)} back-edges dropped) -> {out}"
    )


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
