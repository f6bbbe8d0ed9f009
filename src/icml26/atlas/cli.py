"""``icml26 atlas``: calibrate an item bank from per-item results, test a model adaptively.

Only typer and the standard library are imported here; numpy and the method load inside commands.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated

import typer

app = typer.Typer(
    help="ATLAS: IRT item banks from model x item results, and adaptive tests "
    "that estimate a model's ability from a few items.",
    no_args_is_help=True,
)


@app.command("calibrate")
def calibrate_cmd(
    responses: Annotated[
        Path,
        typer.Argument(help="CSV/TSV/Parquet, wide (model x item) or long (model,item,correct)."),
    ],
    out: Annotated[Path, typer.Option("--out", "-o", help="Bank JSON to write.")] = Path(
        "bank.json"
    ),
    model: Annotated[str, typer.Option("--model", help="1PL, 2PL or 3PL.")] = "3PL",
    quadpts: Annotated[int, typer.Option(help="Quadrature nodes.")] = 61,
    tol: Annotated[float, typer.Option(help="Stop when no parameter moves more than this.")] = 1e-4,
    max_iter: Annotated[int, typer.Option(help="EM cycles at most.")] = 500,
    chunk: Annotated[
        int | None, typer.Option(help="Fit chunks of this many items and link them (mean/sigma).")
    ] = None,
    keep_constant_models: Annotated[
        bool, typer.Option(help="Keep all-right/all-wrong models (mirt does; ATLAS drops them).")
    ] = False,
    force: Annotated[
        bool, typer.Option("--force", help="Allow fewer examinees than the model needs.")
    ] = False,
    g_prior: Annotated[
        str,
        typer.Option(
            help="3PL: Beta prior on g as ALPHA,BETA; 'default' (Beta(5,17)) or 'none' (plain ML)."
        ),
    ] = "default",
) -> None:
    """Fit a 1PL/2PL/3PL item bank by marginal ML (EM) and write it as JSON (or mirt's CSV
    layout when OUT ends in .csv)."""
    from icml26.atlas.calibrate import calibrate
    from icml26.atlas.data import load_responses

    prior = _g_prior(g_prior)
    R = load_responses(responses)
    bank = calibrate(
        R,
        model=model.upper(),
        quadpts=quadpts,
        tol=tol,
        max_iter=max_iter,
        chunk=chunk,
        drop_constant_models=not keep_constant_models,
        force=force,
        g_prior=prior,
    )
    if out.suffix.lower() == ".csv":
        bank.to_mirt_csv(out)
    else:
        bank.save(out)
    fit = bank.fit
    typer.echo(
        f"{out}: {bank.n_items} items ({bank.model}), {fit.get('n_models')} models, "
        f"{len(bank.excluded['items'])} items and {len(bank.excluded['models'])} models dropped, "
        f"{int(bank.nonpositive_a.sum())} items flagged a<=0, converged={fit.get('converged')} "
        f"after {fit.get('iterations')} EM cycles"
    )
    for kind in ("items", "models"):
        if bank.excluded[kind]:
            typer.echo(f"dropped {kind}: " + _named(bank.excluded[kind]))
    if out.suffix.lower() == ".csv" and (bank.excluded["items"] or bank.excluded["models"]):
        typer.echo(
            "(the CSV layout keeps parameters only: the dropped items are not recorded in it)"
        )


def _named(entries: list[dict], limit: int = 20) -> str:
    """``q7 (constant: all correct), q9 (no responses), … and 4 more``."""
    shown = ", ".join(f"{e['id']} ({e['reason']})" for e in entries[:limit])
    return shown + (f", … and {len(entries) - limit} more" if len(entries) > limit else "")


def _g_prior(text: str):
    t = text.strip().lower()
    if t in ("default", "none"):
        return "default" if t == "default" else None
    try:
        al, be = (float(v) for v in t.split(","))
    except ValueError:
        raise typer.BadParameter(
            f"--g-prior: expected ALPHA,BETA, 'default' or 'none'; got {text!r}"
        ) from None
    return (al, be)


def _load_bank(path: Path):
    from icml26.atlas.bank import ItemBank

    return ItemBank.from_mirt_csv(path) if path.suffix.lower() == ".csv" else ItemBank.load(path)


def _aligned(bank, R):
    """R's answers on the bank's columns; echo the items the bank dropped at calibration."""
    full, dropped = bank.align(R.items, R.matrix)
    if dropped:
        shown = ", ".join(dropped[:10]) + (
            f", … and {len(dropped) - 10} more" if len(dropped) > 10 else ""
        )
        typer.echo(
            f"note: {len(dropped)} item(s) of {R.source} were dropped from the bank at "
            f"calibration and are not used: {shown}",
            err=True,
        )
    return full


@app.command("test")
def test_cmd(
    bank_path: Annotated[
        Path,
        typer.Option("--bank", help="Bank JSON from `icml26 atlas calibrate`, or a mirt CSV."),
    ],
    responses: Annotated[
        Path,
        typer.Option(
            "--responses",
            help="The tested models' answers (same formats); each row is one adaptive test.",
        ),
    ],
    se_stop: Annotated[float, typer.Option(help="Stop when SE <= this (after min-items).")] = 0.1,
    min_items: Annotated[int, typer.Option(help="Items at least.")] = 30,
    max_items: Annotated[int, typer.Option(help="Items at most.")] = 500,
    randomesque: Annotated[
        int, typer.Option(help="Draw among this many most informative items.")
    ] = 5,
    estimator: Annotated[str, typer.Option(help="eap, map, mle or wle.")] = "eap",
    keep_nonpositive_a: Annotated[
        bool, typer.Option(help="Also select items with a <= 0.")
    ] = False,
    seed: Annotated[int, typer.Option(help="Model i uses seed + i.")] = 123,
    start: Annotated[
        str,
        typer.Option(
            help="First item: random_b (the paper: random among |b| < 0.5) or max_info "
            "(most informative at theta 0)."
        ),
    ] = "random_b",
    trace: Annotated[Path | None, typer.Option(help="Write every step as JSON lines here.")] = None,
    out: Annotated[
        Path | None, typer.Option("--out", "-o", help="Write the results as JSON here.")
    ] = None,
    jobs: Annotated[
        str | None,
        typer.Option(help="N local processes, 'ray' or 'ray://HOST:PORT' (same results)."),
    ] = None,
) -> None:
    """Run an adaptive test per model, answering from its recorded responses; print theta, SE,
    items used and the reconstructed accuracy."""
    from icml26.atlas.data import load_responses
    from icml26.atlas.parallel import run_tests
    from icml26.core.io import atomic_open, atomic_write_json

    bank = _load_bank(bank_path)
    R = load_responses(responses)
    answers = _aligned(bank, R)  # unknown items: error listing the first five
    rows = run_tests(
        bank,
        answers,
        jobs=jobs,
        seed=seed,
        se_stop=se_stop,
        min_items=min_items,
        max_items=max_items,
        randomesque=randomesque,
        estimator=estimator,
        exclude_nonpositive_a=not keep_nonpositive_a,
        start=start,
    )
    results = []
    for name, res in zip(R.models, rows, strict=True):
        results.append(
            {"model": name, **{k: res[k] for k in ("theta", "se", "items", "acc_hat", "trace")}}
        )
        typer.echo(
            f"{name}\ttheta {res['theta']:+.3f}\tSE {res['se']:.3f}\titems {res['items']}\t"
            f"acc_hat {res['acc_hat']:.3f}"
        )
    if trace is not None:
        with atomic_open(trace, "w", encoding="utf-8") as f:
            for r in results:
                for k, step in enumerate(r["trace"]):
                    f.write(json.dumps({"model": r["model"], "step": k + 1, **step}) + "\n")
    if out is not None:
        atomic_write_json(out, [{k: v for k, v in r.items() if k != "trace"} for r in results])


@app.command("score")
def score_cmd(
    bank_path: Annotated[Path, typer.Option("--bank", help="Bank JSON, or a mirt CSV.")],
    responses: Annotated[
        Path, typer.Option("--responses", help="Answers to score (any subset of the bank's items).")
    ],
    method: Annotated[str, typer.Option(help="eap, map, mle or wle.")] = "wle",
) -> None:
    """Ability of each model from all its answers with fixed item parameters (no adaptivity)."""
    from icml26.atlas.data import load_responses
    from icml26.atlas.scoring import estimate_theta

    bank = _load_bank(bank_path)
    R = load_responses(responses)
    full = _aligned(bank, R)
    theta, se, flag = estimate_theta(bank, full, method, return_flags=True)
    for name, t, s, f in zip(R.models, theta, se, flag, strict=True):
        typer.echo(f"{name}\ttheta {t:+.3f}\tSE {s:.3f}" + ("\t(at bound)" if f else ""))


@app.command("from-lm-eval")
def from_lm_eval_cmd(
    paths: Annotated[
        list[Path],
        typer.Argument(help="samples_<task>_*.jsonl files or folders (lm-eval --log_samples)."),
    ],
    out: Annotated[
        Path, typer.Option("--out", "-o", help="Long table to write (.csv or .parquet).")
    ] = Path("responses.csv"),
    metric: Annotated[str, typer.Option(help="The 0/1 metric field: acc, acc_norm, …")] = "acc",
    filter_name: Annotated[
        str | None,
        typer.Option("--filter", help="Answer filter to keep when a file logs several."),
    ] = None,
    model: Annotated[
        str | None, typer.Option(help="Model id for every file (default: each file's folder).")
    ] = None,
) -> None:
    """Turn lm-eval per-sample logs into the model,item,correct table `calibrate` reads."""
    import numpy as np

    from icml26.atlas.readers import read_lm_eval_samples, write_long

    R = read_lm_eval_samples(paths, metric, model=model, filter=filter_name)
    write_long(out, R)
    typer.echo(
        f"{out}: {len(R.models)} model(s) x {len(R.items)} items, "
        f"{int((~np.isnan(R.matrix)).sum())} answers ({metric})"
    )


@app.command("convert")
def convert_cmd(
    src: Annotated[Path, typer.Argument(help="Bank JSON, mirt CSV, or a released ATLAS CSV.")],
    out: Annotated[Path, typer.Option("--out", "-o", help="Bank to write: .json or .csv (mirt).")],
    atlas: Annotated[
        bool,
        typer.Option(
            "--atlas", help="SRC is a released ATLAS item-parameter CSV (ids X<k> -> <k>, 3PL)."
        ),
    ] = False,
) -> None:
    """Convert an item bank between this package's JSON and mirt's coef() CSV layout."""
    from icml26.atlas.bank import ItemBank

    bank = ItemBank.from_atlas_csv(src) if atlas else _load_bank(src)
    if out.suffix.lower() == ".csv":
        bank.to_mirt_csv(out)
    elif out.suffix.lower() == ".json":
        bank.save(out)
    else:
        raise typer.BadParameter(f"--out {out}: expected a .json or .csv file")
    typer.echo(f"{out}: {bank.n_items} items ({bank.model})")


def _csv_list(value: str, cast, name: str) -> list:
    try:
        return [cast(v) for v in value.split(",") if v.strip()]
    except ValueError:
        raise typer.BadParameter(
            f"{name}: expected a comma-separated list, got {value!r}"
        ) from None


@app.command("responses")
def responses_cmd(
    tasks: Annotated[
        str,
        typer.Option(
            help="Comma-separated tasks: mmlu/<subject>, arc_easy, … (the evaluation sets "
            "make setup installs) or BIG-bench tasks (bigbench:NAME); "
            "`icml26 atlas responses --list` shows them."
        ),
    ] = "",
    out: Annotated[
        Path,
        typer.Option(
            "--out", "-o", help="Long table to write (.parquet or .csv): model,item,correct."
        ),
    ] = Path("responses.parquet"),
    model: Annotated[str | None, typer.Option(help="HF folder or .gguf (default SmolLM2).")] = None,
    name: Annotated[str, typer.Option(help="Model name written in the table.")] = "",
    device: Annotated[str, typer.Option(help="torch device.")] = "cpu",
    dtype: Annotated[
        str,
        typer.Option(
            help="torch dtype; auto: bf16 on CUDA and on CPUs with native bf16, else float32."
        ),
    ] = "auto",
    max_items: Annotated[int | None, typer.Option(help="Seeded subset per task.")] = None,
    formats: Annotated[str, typer.Option(help="logprob and/or letter.")] = "logprob",
    drops: Annotated[
        str, typer.Option(help="Layers dropped, e.g. 0,3,6 (examinee variants).")
    ] = "0",
    temps: Annotated[str, typer.Option(help="Sampling temperatures; 0 = argmax.")] = "0",
    seeds: Annotated[int, typer.Option(help="Sampling seeds per T > 0.")] = 1,
    batch_size: Annotated[int, typer.Option(help="Sequences per forward pass.")] = 8,
    list_tasks: Annotated[bool, typer.Option("--list", help="List the tasks and exit.")] = False,
) -> None:
    """Answer multiple-choice items (MMLU subjects, ARC, … or BIG-bench tasks) with a causal LM and write a response table."""
    from icml26.atlas.responses import (
        choice_logprob_table,
        examinee_grid,
        response_matrix,
        to_long,
    )
    from icml26.core import evalsets
    from icml26.core.evalsets import load_named
    from icml26.core.io import atomic_open
    from icml26.core.lm import load_lm
    from icml26.core.mcq import bigbench_local, bigbench_tasks

    if list_tasks:
        names = evalsets.tasks() if evalsets.available() else []
        if bigbench_local():
            names += [f"bigbench:{t}" for t in bigbench_tasks()]
        typer.echo("\n".join(names))
        return
    task_list = _csv_list(tasks, str, "--tasks")
    if not task_list:
        raise typer.BadParameter("give --tasks (or --list to see them)")
    if out.suffix not in (".parquet", ".csv"):
        raise typer.BadParameter(f"--out {out}: expected a .parquet or .csv file")
    items = [it for t in task_list for it in load_named(t, max_items=max_items)]
    fmts, drop_list = _csv_list(formats, str, "--formats"), _csv_list(drops, int, "--drops")
    grid = examinee_grid(fmts, drop_list, _csv_list(temps, float, "--temps"), seeds)
    lm, tok = load_lm(model, dtype=dtype, device=device)
    tables = {
        f"{f}|drop{d}": choice_logprob_table(lm, tok, items, f, d, batch_size)
        for f in fmts
        for d in drop_list
    }
    Y = response_matrix(tables, items, grid)
    prefix = (name or Path(model or "smollm2").stem) + "|"
    rows = to_long(grid, items, Y, prefix=prefix)
    import pyarrow as pa

    table = pa.Table.from_pylist(rows)
    with atomic_open(out, "wb") as f:
        if out.suffix == ".parquet":
            import pyarrow.parquet as pq

            pq.write_table(table, f)
        else:
            import pyarrow.csv as pcsv

            pcsv.write_csv(table, f)
    acc = {e.name: float(Y[i].mean()) for i, e in enumerate(grid)}
    typer.echo(
        f"{out}: {len(grid)} examinees x {len(items)} items; accuracy "
        + ", ".join(f"{k} {v:.3f}" for k, v in list(acc.items())[:8])
    )
