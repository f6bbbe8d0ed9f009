"""The resumable data build behind ``icml26 cyberpal build``, and user CVE records.

:func:`build` runs the stages of :mod:`.enrich` and writes each one as JSONL into ``work_dir``
(``1_tasks.jsonl`` ... ``5_final.jsonl`` plus ``rejected.jsonl`` and ``report.json``); a stage
whose file exists is read back instead of recomputed, so an interrupted build resumes (delete
the folder to start over). The final records go to ``out`` atomically.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from pathlib import Path

from icml26.core.errors import UserError
from icml26.core.io import atomic_write_json
from icml26.core.tables import read_table
from icml26.cyberpal import enrich
from icml26.cyberpal.catalog import CweCatalog, Pair, cve_cwe_pairs, load_attack, load_cwe
from icml26.cyberpal.formats import TASKS, Format, default_formats
from icml26.cyberpal.splits import SplitConfig, Splits, make_splits

__all__ = ["load_records", "build", "BuildConfig", "catalogue_splits", "record_splits"]

_CVE_RE = re.compile(r"CVE-\d{4}-\d+")


def load_records(path: str | Path, cwe: CweCatalog, ood_field: str | None = None) -> list[dict]:
    """User CVE records from CSV (or TSV, JSONL, Parquet) with columns ``cve_id``, ``description``, ``cwe`` (ids like
    "CWE-79" or "79", several separated by ';'), plus any others (e.g. ``vendor`` for
    ``ood_field``). Returns dicts with ``pair`` (:class:`Pair`) and ``group`` (the OOD field)."""
    path = Path(path)
    if not path.is_file():
        raise UserError(f"{path}: no such records file")
    need = ["cve_id", "description", "cwe"] + ([ood_field] if ood_field else [])
    # CSV/TSV/JSONL/Parquet: BOM, delimiter, duplicate columns, ragged rows, empty files
    t = read_table(path, required=need, types=dict.fromkeys(need, str), what="records")
    rows, unknown, by_id = [], [], {}
    for row, n, k in zip(t.rows, t.lines, t.row_numbers, strict=True):
        n = n if n is not None else f"row {k}"  # Parquet has no lines
        ids = []
        for part in (row["cwe"] or "").replace(",", ";").split(";"):
            part = part.strip().upper().removeprefix("CWE-")
            if not part:
                continue
            if not part.isdigit() or int(part) not in cwe:
                unknown.append(f"{row['cwe']!r} (line {n})")
                continue
            ids.append(int(part))
        if not row["cve_id"] or not row["description"] or not ids:
            if not ids and not unknown:
                raise UserError(f"{path}:{n}: empty cve_id, description or cwe")
            continue
        cve_id = row["cve_id"].strip()
        if not _CVE_RE.fullmatch(cve_id):
            raise UserError(f"{path}:{n}: cve_id {cve_id!r} is not a CVE id (CVE-YYYY-NNNN)")
        group = (row.get(ood_field) or "").strip() if ood_field else None
        if cve_id in by_id:  # a CVE on several rows: one record with all its CWEs
            prev = by_id[cve_id]
            if ood_field and prev["group"] != group:
                raise UserError(f"{path}:{n}: {cve_id} has {ood_field}={group!r} here and "
                                f"{prev['group']!r} on an earlier row")
            prev["pair"] = Pair(cve_id, prev["pair"].description,
                                tuple(sorted(set(prev["pair"].cwes) | set(ids))))
            continue
        if ood_field and not group:
            raise UserError(f"{path}:{n}: empty {ood_field!r} (the --ood-field column)")
        by_id[cve_id] = {"pair": Pair(cve_id, row["description"].strip(),
                                      tuple(sorted(set(ids)))), "group": group}
        rows.append(by_id[cve_id])
    if unknown:
        raise UserError(f"{path}: {len(unknown)} unknown CWE id(s) in CWE {cwe.version}, "
                        f"first five: {', '.join(unknown[:5])}")
    return rows


def record_splits(path: str | Path, ood_field: str, *, ood_values: list[str] | None = None,
                  ood_share: float = 0.2, n_id_test: float = 0.2, seed: int = 0,
                  cwe: CweCatalog | None = None) -> tuple[Splits, dict]:
    """Train / ID test / OOD test of a user records CSV, OOD by the column ``ood_field`` (see
    :func:`~.splits.split_records`); deterministic, so ``build`` and ``eval`` agree."""
    from icml26.cyberpal.splits import split_records

    rows = load_records(path, cwe or load_cwe(), ood_field)
    return split_records(rows, ood_field, ood_values=ood_values, ood_share=ood_share,
                         n_id_test=n_id_test, seed=seed)


def catalogue_splits(config: SplitConfig = SplitConfig()) -> Splits:
    """The observed-example splits used by ``build`` (training source) and ``eval``."""
    return make_splits(cve_cwe_pairs(load_cwe()), config)


@dataclass(frozen=True)
class BuildConfig:
    tasks: tuple[str, ...] = ("cve2cwe", "cwe_qa", "attack_qa")
    writer: str = "template"  # template | lm
    plain: bool = False  # also emit the terse-answer twin of each kept record
    top_k: int = 5
    near_dup: float = 0.95
    n_cwes: int = 50
    #: user records only: split OOD by this column (train on the rest's train split)
    ood_field: str | None = None
    ood_values: tuple[str, ...] | None = None
    ood_share: float = 0.2
    n_id_test: float = 0.2
    #: with a judge: format proposals per task, and examples each pair is judged on
    n_proposals: int = 3
    n_judge_examples: int = 3

    def __post_init__(self) -> None:
        bad = [t for t in self.tasks if t not in TASKS]
        if bad or not self.tasks:
            raise UserError(f"unknown task(s) {bad or '(none)'}; use {', '.join(TASKS)}")
        if self.writer not in ("template", "lm"):
            raise UserError(f"writer must be 'template' or 'lm'; got {self.writer!r}")


def _judged_formats(work: Path, formats: dict[str, Format], config: BuildConfig, tasks, judge,
                    cwe, attack) -> tuple[dict[str, Format], dict]:
    from icml26.cyberpal.formats import load_format
    from icml26.cyberpal.propose import choose_format, format_yaml

    done = work / "format_choice.json"
    if done.is_file():  # resume: the judged formats of the interrupted build
        info = json.loads(done.read_text())
        return {**formats, **{t: load_format(work / "formats" / f"{t}.yaml")
                              for t in info}}, info
    out, info = dict(formats), {}
    for task in config.tasks:
        c = choose_format(formats[task], tasks, judge, cwe, attack,
                          n_proposals=config.n_proposals, n_examples=config.n_judge_examples)
        out[task] = c.chosen
        info[task] = c.to_dict()
        (work / "formats").mkdir(exist_ok=True)
        (work / "formats" / f"{task}.yaml").write_text(format_yaml(c.chosen), encoding="utf-8")
    atomic_write_json(done, info)
    return out, info


def _stage(work: Path, name: str, fn):
    path = work / name
    if path.is_file():
        return enrich.read_jsonl(path) if path.suffix == ".jsonl" else json.loads(path.read_text())
    out = fn()
    enrich.write_jsonl(path, out)
    return out


def build(out: str | Path, config: BuildConfig = BuildConfig(), *,
          formats: dict[str, Format] | None = None, records: str | Path | None = None,
          chat=None, judge=None, work_dir: str | Path | None = None, progress=None) -> dict:
    """Build SFT chat JSONL; returns the report (counts per stage, rejections per check).

    With ``judge`` (a chat model), each task's format is first challenged by the judge's own
    proposals and pairwise judgements (:mod:`.propose`); the winners are written to
    ``work_dir/formats/`` and used for the build (reused on resume)."""
    formats = formats or default_formats()
    missing = [t for t in config.tasks if t not in formats]
    if missing:
        raise UserError(f"no format for task(s) {', '.join(missing)} in the formats folder")
    if config.writer == "lm" and chat is None:
        raise UserError("writer 'lm' needs a chat model (--chat local | URL#MODEL)")
    cwe, attack = load_cwe(), load_attack()
    splits = catalogue_splits(SplitConfig(n_cwes=config.n_cwes))
    eval_pairs = list(splits.id_test) + list(splits.ood_test)
    work = Path(work_dir) if work_dir else Path(str(out) + ".work")
    work.mkdir(parents=True, exist_ok=True)
    split_info = None
    if config.ood_field and not records:
        raise UserError("--ood-field needs --records (the catalogue's examples are vendor-"
                        "neutral; they are split OOD by CVE year)")
    if records and config.ood_field:
        rs, split_info = record_splits(
            records, config.ood_field, ood_values=list(config.ood_values or []) or None,
            ood_share=config.ood_share, n_id_test=config.n_id_test, cwe=cwe)
        source = list(rs.train)
        eval_pairs += list(rs.id_test) + list(rs.ood_test)
        atomic_write_json(work / "splits.json", {
            **split_info, **{k: [p.cve_id for p in getattr(rs, k)]
                             for k in ("train", "id_test", "ood_test")}})
    else:
        source = ([r["pair"] for r in load_records(records, cwe)] if records
                  else list(splits.train))

    def tasks():
        t = []
        if "cve2cwe" in config.tasks:
            t += enrich.cve2cwe_tasks(source)
        if "cwe_qa" in config.tasks:
            t += enrich.cwe_qa_tasks(cwe, sorted({c for p in source for c in p.cwes}))
        if "attack_qa" in config.tasks:
            t += enrich.attack_qa_tasks(attack)
        return [{"messages": [{"role": "user", "content": x["user"]},
                              {"role": "assistant", "content": ""}], "meta": x} for x in t]

    staged = _stage(work, "1_tasks.jsonl", tasks)
    plain_tasks = [{**r["meta"], "user": r["messages"][0]["content"]} for r in staged]

    def grounded():
        retr = enrich.CweRetriever(cwe) if "cve2cwe" in config.tasks else None
        g = enrich.ground(plain_tasks, cwe, attack, retr, k=config.top_k)
        return [{"messages": [{"role": "user", "content": x["user"]},
                              {"role": "assistant", "content": ""}], "meta": x} for x in g]

    g = [{**r["meta"], "user": r["messages"][0]["content"]}
         for r in _stage(work, "2_grounded.jsonl", grounded)]
    choice = None
    if judge is not None:
        formats, choice = _judged_formats(work, formats, config, g, judge, cwe, attack)
    written = _stage(work, "3_written.jsonl", lambda: (
        enrich.write_template(g, formats) if config.writer == "template"
        else enrich.write_lm(g, formats, chat, progress=progress)))
    kept, rejected, report = enrich.verify_records(written, formats, cwe, attack)
    enrich.write_jsonl(work / "rejected.jsonl", rejected)
    final, decon = enrich.decontaminate(
        enrich.dedup(kept), [p.cve_id for p in eval_pairs],
        [enrich.cve2cwe_prompt(p.description) for p in eval_pairs], threshold=config.near_dup)
    if config.plain:
        final = final + [enrich.plain_record(r) for r in final]
    n = enrich.write_jsonl(out, final)
    summary = {"tasks": len(staged), "written": len(written), "verify": report.to_dict(),
               "decontamination": decon, "final": n, "writer": config.writer,
               "formats": {t: f.name for t, f in formats.items()}}
    if split_info is not None:
        summary["splits"] = split_info
    if choice is not None:
        summary["format_choice"] = choice
    atomic_write_json(work / "report.json", summary)
    return summary
