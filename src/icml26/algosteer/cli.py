"""``icml26 algosteer ...``: run a task x cue grid, label a program, summarise a run log."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

app = typer.Typer(
    help="Algorithm steering: how incidental prompt cues shift the algorithms code LLMs choose.",
    no_args_is_help=True,
)


@app.callback()
def _group() -> None:
    """Task x cue grids, sandboxed tests, AST family labels, family-shift statistics."""


def _split(text: str) -> tuple[str, ...]:
    return tuple(x.strip() for x in text.split(",") if x.strip())


@app.command()
def run(
    out: Annotated[Path, typer.Option("--out", "-o", help="Run log (JSONL); resumed if present.")],
    model: Annotated[str | None, typer.Option(help="HF folder, .gguf or 'smollm2'.")] = None,
    endpoint: Annotated[
        str | None, typer.Option(help="OpenAI-compatible endpoint, http://HOST:PORT/v1#MODEL.")
    ] = None,
    chat: Annotated[
        str | None, typer.Option(help="A core.chat spec (local, local:PATH, ...).")
    ] = None,
    tasks: Annotated[str, typer.Option(help="Comma-separated task names.")] = "fib,tree,dedup",
    cues: Annotated[str, typer.Option(help="Comma-separated cue ids.")] = (
        "none,none_resampled,performance,readability,memo_semantic,memo_surface,team_name,naming"
    ),
    samples: Annotated[int, typer.Option(help="Samples per (task, cue) cell.")] = 40,
    temperature: float = 0.8,
    max_new_tokens: int = 160,
    seed: int = 0,
    time_s: Annotated[float, typer.Option(help="Functional-test wall limit (s).")] = 5.0,
    mem_mb: Annotated[int, typer.Option(help="Address-space limit per program (MiB).")] = 512,
    batch_size: Annotated[int, typer.Option(help="HF backend batch size.")] = 16,
    n: Annotated[int, typer.Option(help="Endpoint: samples per request (n).")] = 16,
    device: str = "cpu",
    dtype: str = "auto",
    workers: Annotated[int, typer.Option(help="Sandbox processes.")] = 2,
    force: Annotated[bool, typer.Option(help="Overwrite a log of another configuration.")] = False,
) -> None:
    """Generate, test and label a task x cue x sample grid into a resumable JSONL log."""
    from icml26.algosteer.backends import ChatBackend, HFBackend, OpenAIBackend
    from icml26.algosteer.grid import GridConfig, run_grid
    from icml26.core.errors import UserError

    if sum(x is not None for x in (model, endpoint, chat)) > 1:
        raise UserError("give at most one of --model, --endpoint, --chat")
    if endpoint:
        base, _, name = endpoint.partition("#")
        backend, label = OpenAIBackend(base, name, n=n), endpoint
    elif chat:
        backend, label = ChatBackend.from_spec(chat, device=device), chat
    else:
        backend, label = HFBackend(model, device, dtype, batch_size), model or "smollm2"
    config = GridConfig(
        _split(tasks),
        _split(cues),
        samples,
        temperature,
        max_new_tokens,
        seed,
        time_s,
        mem_mb,
        model=label,
    )
    rows = run_grid(backend, config, out, force=force, workers=workers)
    n_pass = sum(r["outcome"] == "pass" for r in rows)
    typer.echo(f"{len(rows)} rows in {out}; {n_pass} pass the functional tests")


@app.command()
def classify(
    file: Annotated[Path, typer.Argument(help="A .py file or a model reply (markdown).")],
    task: Annotated[str, typer.Option(help="Task name (fib, tree, dedup).")] = "fib",
    test: Annotated[bool, typer.Option(help="Also run the task's tests in the sandbox.")] = False,
) -> None:
    """Print the algorithm family of a program (and, with --test, its test outcomes)."""
    from icml26.algosteer.classify import label_reply
    from icml26.algosteer.sandbox import run_tests
    from icml26.algosteer.tasks import get_task
    from icml26.core.errors import UserError

    if not file.is_file():
        raise UserError(f"{file} does not exist")
    t = get_task(task)
    code, family, evidence = label_reply(file.read_text(encoding="utf-8", errors="replace"), t)
    typer.echo(f"{family}\t{evidence}")
    if test:
        for kind in ("functional", "large"):
            out = run_tests(code, t, kind=kind)
            typer.echo(f"{kind}: {out.outcome} ({out.n_passed}/{out.n_cases}) {out.error or ''}")


@app.command()
def stats(
    log: Annotated[Path, typer.Argument(help="A run log written by `algosteer run`.")],
    out: Annotated[Path, typer.Option("--out", "-o", help="Folder for table.json + figures.")],
    min_n: Annotated[int, typer.Option(help="Gated programs a cell needs to be informative.")] = 10,
    seed: int = 0,
) -> None:
    """Shares, shifts (pp, bootstrap CI), TVD, Holm-corrected tests and figures of a run log."""
    from icml26.algosteer.claim import analyse
    from icml26.algosteer.figures import plot_all
    from icml26.algosteer.grid import GridConfig
    from icml26.algosteer.runlog import read_rows
    from icml26.core.io import atomic_write_json

    header, rows = read_rows(log)
    cfg = GridConfig(
        **{k: tuple(v) if isinstance(v, list) else v for k, v in header["config"].items()}
    )
    table, summary = analyse(rows, cfg, min_n, seed=seed)
    out.mkdir(parents=True, exist_ok=True)
    figs = plot_all(rows, table, cfg, out)
    atomic_write_json(out / "table.json", {"rows": table, "summary": summary})
    for r in table:
        typer.echo(
            f"{r['task']:6} {r['cue']:15} pass {r['pass_rate']:.2f} "
            f"gated {r['gated']:3}  {r['gated_shares']}"
        )
    for k, v in summary.items():
        typer.echo(f"{k}: {v}")
    typer.echo(f"wrote {out / 'table.json'} and {len(figs)} figures")


@app.command("export")
def export_cmd(
    log: Annotated[Path, typer.Argument(help="A run log written by `algosteer run`.")],
    out: Annotated[Path, typer.Option("--out", "-o", help="samples.jsonl to write.")],
) -> None:
    """Write a run log's programs as EvalPlus-style samples (task_id, solution, cue, sample)."""
    from icml26.algosteer.runlog import read_rows
    from icml26.algosteer.samples import export_samples

    _, rows = read_rows(log)
    export_samples(rows, out)
    typer.echo(f"wrote {len(rows)} samples to {out}")


@app.command()
def score(
    samples: Annotated[
        Path,
        typer.Argument(help="samples.jsonl (task_id + solution|completion), or promptfoo "
                       "`eval --output` JSON (.json)."),
    ],
    out: Annotated[Path, typer.Option("--out", "-o", help="Run log (JSONL); resumed if present.")],
    model: Annotated[str, typer.Option(help="Label for the model that wrote the samples.")] = "",
    temperature: Annotated[float, typer.Option(help="Label: the samples' temperature.")] = 0.8,
    time_s: Annotated[float, typer.Option(help="Functional-test wall limit (s).")] = 5.0,
    mem_mb: Annotated[int, typer.Option(help="Address-space limit per program (MiB).")] = 512,
    workers: Annotated[int, typer.Option(help="Sandbox processes.")] = 2,
    force: Annotated[bool, typer.Option(help="Overwrite a log of another configuration.")] = False,
) -> None:
    """Gate (sandboxed tests) and label your own generations into a run log for `stats`."""
    from icml26.algosteer.samples import read_promptfoo, read_samples, score_samples

    s = read_promptfoo(samples) if samples.suffix == ".json" else read_samples(samples)
    rows = score_samples(
        s, out, model=model, temperature=temperature, time_s=time_s, mem_mb=mem_mb,
        workers=workers, force=force,
    )
    n_pass = sum(r["outcome"] == "pass" for r in rows)
    typer.echo(f"{len(rows)} rows in {out}; {n_pass} pass the functional tests")


@app.command()
def promptfoo(
    out: Annotated[Path, typer.Option("--out", "-o", help="promptfooconfig.yaml to write.")],
    tasks: Annotated[str, typer.Option(help="Comma-separated task names.")] = "fib,tree,dedup",
    cues: Annotated[str, typer.Option(help="Comma-separated cue ids.")] = (
        "none,none_resampled,performance,readability,memo_semantic,memo_surface,team_name,naming"
    ),
    samples: Annotated[int, typer.Option(help="Repeats per (task, cue) cell.")] = 20,
    provider: Annotated[
        list[str] | None, typer.Option(help="promptfoo provider id (repeatable).")
    ] = None,
    temperature: float = 0.8,
    max_tokens: int = 160,
) -> None:
    """Write the task x cue grid as a promptfoo config; score its results with `score`."""
    from icml26.algosteer.samples import promptfoo_config

    promptfoo_config(
        _split(tasks), _split(cues), samples, out,
        providers=tuple(provider or ("openai:chat:MODEL",)),
        temperature=temperature, max_tokens=max_tokens,
    )
    typer.echo(f"wrote {out}: promptfoo eval -c {out} --output results.json, then "
               f"icml26 algosteer score results.json -o runs.jsonl")
