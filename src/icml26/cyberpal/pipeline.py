"""The resumable data build behind ``icml26 cyberpal build``, and user CVE records.

:func:`build` runs the stages of :mod:`.enrich` and writes each one as JSONL into ``work_dir``
(``1_tasks.jsonl`` ... ``5_final.jsonl`` plus ``rejected.jsonl`` and ``report.json``); a stage
whose file exists is read back instead of recomputed, so an interrupted build resumes (delete
the folder to start over). The final records go to ``out`` atomically.
"""

from __future__ import annotations

import csv
import json
from dataclasses import dataclass
from pathlib import Path

from icml26.core.errors import UserError
from icml26.core.io import atomic_write_json
from icml26.cyberpal import enrich
from icml26.cyberpal.catalog import CweCatalog, Pair, cve_cwe_pairs, load_attack, load_cwe
from icml26.cyberpal.formats import TASKS, Format, default_formats
from icml26.cyberpal.splits import SplitConfig, Splits, make_splits

__all__ = ["load_records", "build", "BuildConfig", "catalogue_splits"]


def load_records(path: str | Path, cwe: CweCatalog, ood_field: str | None = None) -> list[dict]:
    """User CVE records from CSV with columns ``cve_id``, ``description``, ``cwe`` (ids like
    "CWE-79" or "79", several separated by ';'), plus any others (e.g. ``vendor`` for
    ``ood_field``). Returns dicts with ``pair`` (:class:`Pair`) and ``group`` (the OOD field)."""
    path = Path(path)
    if not path.is_file():
        raise UserError(f"{path}: no such records file")
    with open(path, newline="", encoding="utf-8") as f:
        reader = csv.DictReader(f)
        cols = set(reader.fieldnames or ())
        need = {"cve_id", "description", "cwe"} | ({ood_field} if ood_field else set())
        if need - cols:
            raise UserError(f"{path}: missing column(s) {', '.join(sorted(need - cols))}; "
                            f"found {', '.join(sorted(cols)) or 'none'}")
        rows, unknown = [], []
        for n, row in enumerate(reader, 2):
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
            rows.append({"pair": Pair(row["cve_id"].strip(), row["description"].strip(),
                                      tuple(sorted(set(ids)))),
                         "group": row.get(ood_field) if ood_field else None})
    if unknown:
        raise UserError(f"{path}: {len(unknown)} unknown CWE id(s) in CWE {cwe.version}, "
                        f"first five: {', '.join(unknown[:5])}")
    return rows


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

    def __post_init__(self) -> None:
        bad = [t for t in self.tasks if t not in TASKS]
        if bad or not self.tasks:
            raise UserError(f"unknown task(s) {bad or '(none)'}; use {', '.join(TASKS)}")
        if self.writer not in ("template", "lm"):
            raise UserError(f"writer must be 'template' or 'lm'; got {self.writer!r}")


def _stage(work: Path, name: str, fn):
    path = work / name
    if path.is_file():
        return enrich.read_jsonl(path) if path.suffix == ".jsonl" else json.loads(path.read_text())
    out = fn()
    enrich.write_jsonl(path, out)
    return out


def build(out: str | Path, config: BuildConfig = BuildConfig(), *,
          formats: dict[str, Format] | None = None, records: str | Path | None = None,
          chat=None, work_dir: str | Path | None = None, progress=None) -> dict:
    """Build SFT chat JSONL; returns the report (counts per stage, rejections per check)."""
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
    atomic_write_json(work / "report.json", summary)
    return summary
