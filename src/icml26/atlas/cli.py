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
) -> None:
    """Fit a 1PL/2PL/3PL item bank by marginal ML (EM) and write it as JSON."""
    from icml26.atlas.calibrate import calibrate
    from icml26.atlas.data import load_responses

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
    )
    bank.save(out)
    fit = bank.fit
    typer.echo(
        f"{out}: {bank.n_items} items ({bank.model}), {fit.get('n_models')} models, "
        f"{len(bank.excluded['items'])} items and {len(bank.excluded['models'])} models dropped, "
        f"{int(bank.nonpositive_a.sum())} items flagged a<=0, converged={fit.get('converged')} "
        f"after {fit.get('iterations')} EM cycles"
    )


@app.command("test")
def test_cmd(
    bank_path: Annotated[
        Path, typer.Option("--bank", help="Bank JSON from `icml26 atlas calibrate`.")
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
    import numpy as np

    from icml26.atlas.bank import ItemBank
    from icml26.atlas.data import load_responses
    from icml26.atlas.parallel import run_tests
    from icml26.core.io import atomic_open, atomic_write_json

    bank = ItemBank.load(bank_path)
    R = load_responses(responses)
    cols = bank.index(R.items)  # unknown items: error listing the first five
    answers = np.full((len(R.models), bank.n_items), np.nan)
    answers[:, cols] = R.matrix
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
    bank_path: Annotated[Path, typer.Option("--bank", help="Bank JSON.")],
    responses: Annotated[
        Path, typer.Option("--responses", help="Answers to score (any subset of the bank's items).")
    ],
    method: Annotated[str, typer.Option(help="eap, map, mle or wle.")] = "wle",
) -> None:
    """Ability of each model from all its answers with fixed item parameters (no adaptivity)."""
    import numpy as np

    from icml26.atlas.bank import ItemBank
    from icml26.atlas.data import load_responses
    from icml26.atlas.scoring import estimate_theta

    bank = ItemBank.load(bank_path)
    R = load_responses(responses)
    full = np.full((len(R.models), bank.n_items), np.nan)
    full[:, bank.index(R.items)] = R.matrix
    theta, se, flag = estimate_theta(bank, full, method, return_flags=True)
    for name, t, s, f in zip(R.models, theta, se, flag, strict=True):
        typer.echo(f"{name}\ttheta {t:+.3f}\tSE {s:.3f}" + ("\t(at bound)" if f else ""))


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
    dtype: Annotated[str, typer.Option(help="torch dtype; auto: bf16 on CUDA and on CPUs with native bf16, else float32.")] = "auto",
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
    from icml26.core.io import atomic_open
    from icml26.core.lm import load_lm
    from icml26.core import evalsets
    from icml26.core.evalsets import load_named
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
