"""The EvoClaw-data layout: write a built milestone DAG, read it (or released data) back.

One folder per repository::

    metadata.json                  repo, range, source/test dirs and patterns, drops
    milestones.csv                 id,title,n_commits,commits,start_sha,end_sha,first_time,last_time
    dependencies.csv               source,target,strength   (Strong | Weak)
    selected_milestone_ids.txt     one id a line
    non-graded_milestone_ids.txt   one id a line
    srs/<m>/SRS.md                 task description
    test_results/<m>/<m>_classification.json   {"FAIL_TO_PASS": [...], "PASS_TO_PASS": [...],
                                                "NONE_TO_PASS": [...]} (when verified)

All writes are atomic. :func:`load_dataset` validates ids and acyclicity.
"""

from __future__ import annotations

import csv
import io
import json
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

from icml26.core.errors import UserError
from icml26.core.io import atomic_write_json, atomic_write_text
from icml26.core.tables import read_table
from icml26.deepcommit.dag import Dag, find_cycle
from icml26.deepcommit.history import History

__all__ = ["Dataset", "write_dataset", "load_dataset", "milestone_id"]


def milestone_id(k: int) -> str:
    return f"M{k + 1:03d}"


@dataclass
class Dataset:
    root: Path
    metadata: dict
    milestones: list[dict]
    edges: dict[tuple[str, str], str]
    selected: list[str]
    non_graded: list[str]
    srs: dict[str, str] = field(default_factory=dict)
    classifications: dict[str, dict] = field(default_factory=dict)


def _srs(mid: str, commits, title: str | None = None, text: str | None = None) -> str:
    files = Counter(f for c in commits for f in c.files if not f.startswith("tests/"))
    lines = [f"# {mid}: {title or commits[0].subject}", ""]
    if text:
        lines += ["## Goal", "", text, ""]
    lines += ["## Requested changes", ""]
    lines += [f"- {c.subject}" for c in commits]
    lines += ["", "## Source files likely involved", ""] + [
        f"- `{f}`" for f, _ in files.most_common()
    ]
    return "\n".join(lines) + "\n"


def write_dataset(
    out: Path | str,
    history: History,
    labels,
    dag: Dag,
    classifications: dict[str, dict] | None = None,
    test_dirs: tuple[str, ...] = ("tests",),
    states: dict | None = None,
    non_graded_reasons: dict[str, str] | None = None,
    titles: dict[int, str] | None = None,
    srs_text: dict[int, str] | None = None,
    extra_metadata: dict | None = None,
) -> Path:
    """Write the layout for ``history`` grouped by ``labels`` (one per kept commit).

    ``states`` (from a verified build): replay order and start/end shas per milestone id, kept
    in ``metadata.json`` under ``"states"`` (the shas live in ``repo.git`` beside it, tagged
    ``milestone-<m>-start/-end``); ``non_graded_reasons``: id -> why; ``titles`` / ``srs_text``:
    milestone -> LLM-written title / goal text (the LLM pass)."""
    out = Path(out)
    groups: dict[int, list] = {}
    for c, m in zip(history.commits, labels, strict=True):
        groups.setdefault(int(m), []).append(c)
    ids = {m: milestone_id(m) for m in groups}
    buf = io.StringIO()
    w = csv.writer(buf, lineterminator="\n")
    w.writerow(
        ["id", "title", "n_commits", "commits", "start_sha", "end_sha", "first_time", "last_time"]
    )
    for m, cs in sorted(groups.items()):
        w.writerow(
            [
                ids[m],
                (titles or {}).get(m, cs[0].subject),
                len(cs),
                " ".join(c.sha for c in cs),
                cs[0].parents[0] if cs[0].parents else "",
                cs[-1].sha,
                cs[0].time,
                cs[-1].time,
            ]
        )
        atomic_write_text(
            out / "srs" / ids[m] / "SRS.md",
            _srs(ids[m], cs, (titles or {}).get(m), (srs_text or {}).get(m)),
        )
    atomic_write_text(out / "milestones.csv", buf.getvalue())
    buf = io.StringIO()
    w = csv.writer(buf, lineterminator="\n")
    w.writerow(["source", "target", "strength"])
    for (a, b), s in sorted(dag.edges.items()):
        w.writerow([ids[a], ids[b], s])
    atomic_write_text(out / "dependencies.csv", buf.getvalue())
    classifications = classifications or {}
    non_graded = [
        ids[m]
        for m in sorted(groups)
        if ids[m] not in classifications
        or not (
            classifications[ids[m]].get("FAIL_TO_PASS")
            or classifications[ids[m]].get("NONE_TO_PASS")
        )
    ]
    for mid, cls in classifications.items():
        atomic_write_json(out / "test_results" / mid / f"{mid}_classification.json", cls)
    atomic_write_text(
        out / "selected_milestone_ids.txt", "".join(f"{ids[m]}\n" for m in sorted(groups))
    )
    atomic_write_text(out / "non-graded_milestone_ids.txt", "".join(f"{m}\n" for m in non_graded))
    atomic_write_json(
        out / "metadata.json",
        {
            "repo": str(history.repo),
            "range": history.rev_range,
            "test_dirs": list(test_dirs),
            "test_patterns": ["test_*.py", "*_test.py"],
            "source_dirs": ["."],
            "dropped": [{"sha": d.sha, "reason": d.reason} for d in history.dropped],
            "back_edges": [
                {"source": ids[a], "target": ids[b], "reason": r} for a, b, r in dag.back_edges
            ],
            "non_graded_reasons": non_graded_reasons or {},
            **({"states": states} if states else {}),
            **(extra_metadata or {}),
        },
    )
    return out


def _lines(p: Path) -> list[str]:
    return [x.strip() for x in p.read_text().splitlines() if x.strip()] if p.exists() else []


def load_dataset(root: Path | str) -> Dataset:
    """Read a folder in the layout above (ours or EvoClaw's released data)."""
    root = Path(root)
    for name in ("milestones.csv", "dependencies.csv"):
        if not (root / name).is_file():
            raise UserError(f"{root}: no {name}; not an EvoClaw-data repository folder")
    meta = (
        json.loads((root / "metadata.json").read_text())
        if (root / "metadata.json").exists()
        else {}
    )
    ms = read_table(root / "milestones.csv", what="milestones")
    rows = ms.rows
    key = "id" if "id" in ms.columns else ms.columns[0]
    ids = [r[key] for r in rows]
    seen: dict[str, int] = {}
    for k, m in enumerate(ids):
        if not m:
            raise ms.error(k, "empty milestone id", key)
        if m in seen:
            raise ms.error(k, f"milestone id {m!r} again (first on row {ms.row_numbers[seen[m]]})",
                           key)
        seen[m] = k
    known = set(ids)
    edges: dict[tuple[str, str], str] = {}
    dep_path = root / "dependencies.csv"
    no_deps = not dep_path.read_bytes().lstrip(b"\xef\xbb\xbf").strip()  # a 0-byte file: no edges
    deps = None if no_deps else read_table(dep_path, required=("source", "target"), allow_empty=True)
    for k, r in enumerate(deps.rows if deps else []):
        i = deps.lines[k] or deps.row_numbers[k] + 1
        a, b = r["source"], r["target"]
        s = r.get("strength") or "Strong"
        bad = [x for x in (a, b) if x not in known]
        if bad:
            raise UserError(f"{dep_path} line {i}: unknown milestone id(s) {bad}")
        if s not in ("Strong", "Weak"):
            raise UserError(f"{dep_path} line {i}: strength must be Strong or Weak; got {s!r}")
        edges[(a, b)] = s
    cycle = find_cycle(ids, edges)
    if cycle:
        raise UserError(f"{root / 'dependencies.csv'}: dependency cycle {' -> '.join(cycle)}")
    srs = {
        m: (root / "srs" / m / "SRS.md").read_text()
        for m in ids
        if (root / "srs" / m / "SRS.md").exists()
    }
    cls = {
        m: json.loads(p.read_text())
        for m in ids
        if (p := root / "test_results" / m / f"{m}_classification.json").exists()
    }
    return Dataset(
        root,
        meta,
        rows,
        edges,
        _lines(root / "selected_milestone_ids.txt") or ids,
        _lines(root / "non-graded_milestone_ids.txt"),
        srs,
        cls,
    )
