"""``icml26 chemcensor``: build a precedent DB, score proposals, build a validated set, evaluate Top-K.

CSV input: a ``rxn_smiles`` column, or ``reactants`` and ``product`` columns. Heavy imports
(RDKit) happen inside the commands.
"""

from __future__ import annotations

import csv
import enum
from pathlib import Path
from typing import Annotated

import typer

app = typer.Typer(
    help="ChemCensor: plausibility levels (-1..5) of reactants>>product proposals against a "
    "precedent database; validated-reaction sets; plausibility@K beside exact-match Top-K.",
    no_args_is_help=True,
)


class Mapper(enum.StrEnum):
    rxnmapper = "rxnmapper"
    given = "given"


MapperOpt = Annotated[
    Mapper,
    typer.Option(
        "--mapper", help="rxnmapper (isolated worker) or given (use the input's atom maps)."
    ),
]


def _read_rxns(path: Path) -> tuple[list[dict], list[str]]:
    """Rows and reaction SMILES of a reaction table (CSV/TSV/JSONL/Parquet, read by
    :func:`icml26.core.tables.read_table`: BOM, delimiter, empty files, duplicate columns)."""
    from icml26.core.errors import UserError
    from icml26.core.tables import read_table

    if not path.is_file():
        raise UserError(f"{path}: no such file")
    t = read_table(path, what="reactions")
    cols = t.columns
    if "rxn_smiles" in cols:
        t.parse("rxn_smiles", str)
        t.require(["rxn_smiles"])
        return t.rows, [r["rxn_smiles"] for r in t.rows]
    if "reactants" in cols and "product" in cols:
        t.require(["reactants", "product"])
        t.parse("reactants", str).parse("product", str)
        return t.rows, [f"{r['reactants']}>>{r['product']}" for r in t.rows]
    raise UserError(
        f"{path}: needs a 'rxn_smiles' column or 'reactants' and 'product' columns; columns seen: {cols}"
    )


def _read_predictions(path: Path, need: tuple[str, ...]) -> list[dict]:
    """Rows of a predictions or gold table for ``evaluate``; ``rank`` and ``level`` (when
    present) must be integers, with errors naming file, row and column."""
    from icml26.core.errors import UserError
    from icml26.core.tables import integer, read_table

    if not path.is_file():
        raise UserError(f"{path}: no such file")
    t = read_table(path, what="rows")
    missing = [c for c in need if c not in t.columns]
    if missing:
        raise UserError(f"{path}: missing column(s) {missing}; columns seen: {t.columns}")
    t.require(need)
    for c in ("target", "reactants"):
        t.parse(c, str)
    if "rank" in need:
        t.parse("rank", integer())
    if "level" in t.columns:
        t.parse("level", integer(-1, 5), nullable=True)
    return t.rows


def _by_rank(x: tuple) -> tuple:
    return x[0], x[1]


def _write_csv(path: Path, rows: list[dict]) -> None:
    from icml26.core.io import atomic_open

    fields = list(rows[0].keys()) if rows else ["rxn_smiles"]
    with atomic_open(path, "w", newline="", encoding="utf-8") as fh:
        w = csv.DictWriter(fh, fieldnames=fields)
        w.writeheader()
        w.writerows(rows)


@app.command("build-db")
def build_db(
    rxns: Annotated[
        Path, typer.Argument(help="CSV of reactions (rxn_smiles, or reactants+product).")
    ],
    out: Annotated[Path, typer.Option("-o", "--out", help="SQLite database to write.")],
    mapper: MapperOpt = Mapper.rxnmapper,
    max_level: Annotated[int, typer.Option(help="Widest centre stored (1..4).")] = 4,
) -> None:
    """Process reactions and store exact precedents and RC1..RC4 centres with FG signatures."""
    from icml26.chemcensor.db import ReactionDB

    _, smiles = _read_rxns(rxns)
    db = ReactionDB.build(smiles, out, mapper=str(mapper), max_level=max_level)
    typer.echo(
        f"{out}: {len(db)} reactions, {len(db.centres)} centres; skipped by stage: {dict(db.build_failures)}"
    )


@app.command("score")
def score(
    preds: Annotated[
        Path, typer.Argument(help="CSV of proposals (rxn_smiles, or reactants+product).")
    ],
    db: Annotated[Path, typer.Option("--db", help="Database from build-db.")],
    out: Annotated[
        Path,
        typer.Option(
            "-o", "--out", help="CSV to write (input columns + level, stage, reason, confidence)."
        ),
    ],
    mapper: MapperOpt = Mapper.rxnmapper,
    jobs: Annotated[int, typer.Option("--jobs", "-j", help="Worker processes.")] = 1,
    checkpoint: Annotated[
        Path | None, typer.Option(help="JSONL checkpoint (default OUT.ckpt.jsonl); rerun resumes.")
    ] = None,
    max_center_type: Annotated[int, typer.Option(help="Widest centre checked (1..4).")] = 4,
    rdchiral: Annotated[
        bool,
        typer.Option(
            "--rdchiral",
            help="Add columns rdchiral (1: the extracted rdchiral template regenerates the "
            "reactants, 0: not, empty: unprocessable) and rdchiral_stage. Needs rdchiral.",
        ),
    ] = False,
) -> None:
    """Score every proposal; invalid ones get level -1 with their stage."""
    from icml26.chemcensor.scorer import ChemCensor

    rows, smiles = _read_rxns(preds)
    censor = ChemCensor(db, max_center_type=max_center_type, mapper=str(mapper))
    trips = None
    if rdchiral:
        from icml26.chemcensor.roundtrip import require_rdchiral, roundtrip_many

        require_rdchiral()  # a missing package fails before any scoring
    ck = checkpoint or out.with_name(out.name + ".ckpt.jsonl")
    levels = censor.score_many(smiles, n_jobs=jobs, checkpoint=ck)
    if rdchiral:
        trips = roundtrip_many(censor, smiles)
    for i, (r, lv) in enumerate(zip(rows, levels, strict=True)):
        r.update(
            level=lv.value,
            stage=lv.stage,
            reason=lv.reason,
            confidence="" if lv.confidence is None else lv.confidence,
        )
        if trips is not None:
            t = trips[i]
            r.update(rdchiral="" if t.ok is None else int(t.ok), rdchiral_stage=t.stage)
    _write_csv(out, rows)
    ck.unlink(missing_ok=True)
    hist: dict[int, int] = {}
    for lv in levels:
        hist[lv.value] = hist.get(lv.value, 0) + 1
    typer.echo(f"{out}: {len(levels)} scored; levels {dict(sorted(hist.items()))}")


@app.command("dataset")
def dataset(
    records: Annotated[Path, typer.Argument(help="CSV of reactions to validate.")],
    out: Annotated[Path, typer.Option("-o", "--out", help="JSONL of kept records.")],
    min_level: Annotated[int, typer.Option(help="Keep records at or above this level.")] = 1,
    folds: Annotated[
        int, typer.Option(help="Scaffold folds; each is scored against the others.")
    ] = 5,
    mapper: MapperOpt = Mapper.rxnmapper,
) -> None:
    """A validated (CREED-style) set: records scored against the other scaffold folds."""
    import json

    from icml26.chemcensor.evaluate import build_dataset
    from icml26.core.io import atomic_write_text

    _, smiles = _read_rxns(records)
    kept = build_dataset(smiles, min_level=min_level, folds=folds, mapper=str(mapper))
    atomic_write_text(out, "".join(json.dumps(r) + "\n" for r in kept))
    typer.echo(f"{out}: kept {len(kept)} of {len(smiles)} records at level >= {min_level}")


@app.command("eval")
def evaluate(
    preds: Annotated[
        Path, typer.Argument(help="CSV: target, reactants, rank (1 = best); optional level column.")
    ],
    gold: Annotated[Path, typer.Option("--gold", help="CSV: target, reactants.")],
    db: Annotated[
        Path | None, typer.Option("--db", help="Database (needed when preds has no level column).")
    ] = None,
    ks: Annotated[str, typer.Option(help="Comma-separated K values.")] = "1,5,10",
    min_level: Annotated[int, typer.Option(help="Plausible at or above this level.")] = 1,
    mapper: MapperOpt = Mapper.rxnmapper,
) -> None:
    """exact@K and plausibility@K over targets."""
    from icml26.chemcensor.evaluate import evaluate_topk
    from icml26.chemcensor.scorer import ChemCensor
    from icml26.core.errors import UserError

    prow = _read_predictions(preds, ("target", "reactants", "rank"))
    grow = _read_predictions(gold, ("target", "reactants"))
    try:
        k_list = [int(k) for k in ks.split(",")]
    except ValueError:
        raise UserError(f"--ks must be integers separated by commas; got {ks!r}") from None
    ranked: dict[str, list[tuple[int, str, str | None]]] = {}
    for r in prow:
        ranked.setdefault(r["target"], []).append((r["rank"], r["reactants"], r.get("level")))
    pred_map = {t: [x[1] for x in sorted(v, key=_by_rank)] for t, v in ranked.items()}
    levels = None
    if all(r.get("level") is not None for r in prow):
        levels = {t: [x[2] for x in sorted(v, key=_by_rank)] for t, v in ranked.items()}
    elif db is None:
        raise UserError("preds has no 'level' column: give --db to score the proposals")
    censor = None if levels is not None else ChemCensor(db, mapper=str(mapper))
    res = evaluate_topk(
        pred_map,
        {r["target"]: r["reactants"] for r in grow},
        ks=k_list,
        censor=censor,
        min_level=min_level,
        levels=levels,
    )
    for k in k_list:
        typer.echo(
            f"K={k}: exact@K {res[f'exact@{k}']:.3f}  plausibility@K {res[f'plausibility@{k}']:.3f}"
        )


@app.command("setup-mapper")
def setup_mapper(
    site: Annotated[
        Path | None, typer.Option(help="Install folder (default: the cache location).")
    ] = None,
) -> None:
    """Install RXNMapper and its transformers-4 stack into an isolated folder (pip --target, no deps)."""
    from icml26.chemcensor.mapper import install_rxnmapper

    typer.echo(f"RXNMapper installed under {install_rxnmapper(site)}")
