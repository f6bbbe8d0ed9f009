"""Readers for CTIBench's CTI-RCM and CTI-MCQ files, as published (tab-separated, header row).

CTIBench (Alam et al., NeurIPS 2024 Datasets & Benchmarks) is not packaged here: users who have
the files pass them to ``icml26 cyberpal eval --split cti-rcm|cti-mcq --data FILE``.

- ``cti-rcm.tsv`` / ``cti-rcm-2021.tsv``: columns ``URL``, ``Description``, ``Prompt``, ``GT``.
  ``GT`` is a CWE id ("CWE-79"; case and spacing vary); the CVE id is taken from the URL
  (NVD ``.../detail/CVE-YYYY-NNNN``) when present, for the train/eval overlap check.
- ``cti-mcq.tsv``: columns ``URL``, ``Question``, ``Option A`` ... ``Option D``, ``Prompt``,
  ``GT``; ``GT`` is the letter of the right option.

Extra columns are ignored; a missing column, an empty field or an unparsable ``GT`` is a
:class:`~icml26.core.errors.UserError` naming the file, line and value.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

from icml26.core.errors import UserError
from icml26.core.mcq import MCQItem

__all__ = ["RcmItem", "read_rcm", "read_cti_mcq", "RCM_COLUMNS", "MCQ_COLUMNS"]

RCM_COLUMNS = ("URL", "Description", "Prompt", "GT")
MCQ_COLUMNS = ("URL", "Question", "Option A", "Option B", "Option C", "Option D", "Prompt", "GT")
_GT_CWE = re.compile(r"\s*CWE[-_ ]?(\d+)\s*", re.IGNORECASE)
_CVE = re.compile(r"CVE-\d{4}-\d+", re.IGNORECASE)


@dataclass(frozen=True)
class RcmItem:
    """One CTI-RCM row: a CVE description and its root-cause CWE."""

    line: int
    url: str
    description: str
    prompt: str  # CTIBench's own prompt, verbatim
    gold: int
    cve_id: str | None


def _rows(path: str | Path, columns: tuple[str, ...]) -> list[tuple[int, dict]]:
    """(line, row) pairs of a CTIBench TSV, read by :func:`icml26.core.tables.read_table` (tab
    delimiter as published; BOM, ragged rows, duplicate columns and empty files are errors
    naming the file and row)."""
    from icml26.core.tables import read_table

    path = Path(path)
    if not path.is_file():
        raise UserError(f"{path}: no such CTIBench file")
    t = read_table(path, delimiter="\t", types=dict.fromkeys(columns, str), format="csv")
    missing = [c for c in columns if c not in t.columns]
    if missing:
        raise UserError(f"{path}: missing column(s) {', '.join(missing)} (tab-separated, "
                        f"as published); found {', '.join(t.columns) or 'none'}")
    return list(zip(t.lines, t.rows, strict=True))


def read_rcm(path: str | Path) -> list[RcmItem]:
    """CTI-RCM items in file order."""
    out = []
    for n, row in _rows(path, RCM_COLUMNS):
        desc, gt = (row["Description"] or "").strip(), row["GT"] or ""
        if not desc:
            raise UserError(f"{path}:{n}: empty Description")
        m = _GT_CWE.fullmatch(gt)
        if not m:
            raise UserError(f"{path}:{n}: GT {gt!r} is not a CWE id (expected e.g. CWE-79)")
        cve = _CVE.search(row["URL"] or "")
        out.append(RcmItem(n, (row["URL"] or "").strip(), desc, (row["Prompt"] or "").strip(),
                           int(m.group(1)), cve.group(0).upper() if cve else None))
    return out


def read_cti_mcq(path: str | Path) -> list[MCQItem]:
    """CTI-MCQ items (four options, ``answer`` = index of ``GT``) for :mod:`icml26.core.mcq`."""
    out = []
    for n, row in _rows(path, MCQ_COLUMNS):
        q = (row["Question"] or "").strip()
        opts = tuple((row[f"Option {x}"] or "").strip() for x in "ABCD")
        gt = (row["GT"] or "").strip().upper()
        if not q or not all(opts):
            raise UserError(f"{path}:{n}: empty Question or option")
        if gt not in ("A", "B", "C", "D"):
            raise UserError(f"{path}:{n}: GT {row['GT']!r} is not one of A, B, C, D")
        out.append(MCQItem(f"cti-mcq-{n}", "cti_mcq", q, opts, "ABCD".index(gt)))
    return out
