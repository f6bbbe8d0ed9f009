"""``results/*/*.json`` -> ``results/report.md`` and a self-contained ``results/report.html``.

The HTML has no external assets and no JavaScript: inline CSS, figures embedded as base64 PNG.
It opens with an index table of every registered claim (those without results show "planned" or
"not run"), then one section per claim that has a result: the measured rows, the headline with
its spread and target, the notes, the figures, and the error if the claim failed.
"""

from __future__ import annotations

import base64
import html
import json
import math
import os
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from icml26.core.claims import Claim
from icml26.core.io import atomic_write_text

__all__ = ["collect", "build_report", "format_value", "headline_text"]

_SCALE_ORDER = {"tiny": 0, "small": 1, "full": 2}


def collect(out_root: str | os.PathLike, scale: str | None = None) -> dict[str, dict]:
    """One readable record per claim name: the largest scale run, the newest among equals
    (or only records of ``scale``, when given).

    Unreadable JSON (e.g. from an older crash of a non-atomic writer) is skipped, not fatal.
    """
    found: dict[str, dict] = {}
    root = Path(out_root)
    for path in sorted(root.glob("*/*.json")):
        if scale is not None and path.stem != scale:
            continue
        try:
            record = json.loads(path.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            continue
        if not isinstance(record, dict) or "name" not in record or "verdict" not in record:
            continue
        name = record["name"]
        key = (_SCALE_ORDER.get(record.get("scale"), -1), record.get("finished_at") or "")
        if name not in found or key > found[name]["_key"]:
            found[name] = {**record, "_key": key, "_path": str(path)}
    return found


def format_value(x: Any) -> str:
    """Numbers to 4 significant digits (integers as they are); other values as text."""
    if isinstance(x, bool) or x is None:
        return "" if x is None else str(x)
    if isinstance(x, int):
        return f"{x:,}" if abs(x) >= 10_000 else str(x)
    if isinstance(x, float):
        if math.isnan(x):
            return "nan"
        if x != 0 and (abs(x) >= 1e5 or abs(x) < 1e-3):
            return f"{x:.3e}"
        return f"{x:.4g}"
    return str(x)


def headline_text(record: dict) -> str:
    """ "81.2x [74.0, 88.9] (target > 5)" from a record's headline, spread and target."""
    h = record.get("headline")
    if not h:
        return "—"
    unit = h.get("unit") or ""
    text = f"{format_value(h['value'])}{unit}"
    if h.get("spread"):
        lo, hi = h["spread"]
        text += f" [{format_value(lo)}, {format_value(hi)}]"
    op = ">" if h.get("higher_is_better", True) else "<"
    return f"{text} (target {op} {format_value(record.get('target'))}{unit})"


def _status(claim: Claim, record: dict | None) -> str:
    if record is not None:
        return record["verdict"]
    return "planned" if claim.planned else "not run"


def _rows_columns(rows: list[dict]) -> list[str]:
    cols: list[str] = []
    for row in rows:
        for k in row:
            if k not in cols:
                cols.append(k)
    return cols


# -------------------------------------------------------------------------------- markdown


def _md_cell(x: Any) -> str:
    return format_value(x).replace("|", "\\|").replace("\n", " ")


def render_markdown(claims: list[Claim], records: dict[str, dict], out_root: Path) -> str:
    lines = [
        "# icml26 — reproduction report",
        "",
        f"Generated {datetime.now(UTC).isoformat(timespec='seconds')}.",
        "",
        "| method | area | claim | paper | measured here | verdict | scale | time |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for c in claims:
        r = records.get(c.name)
        lines.append(
            "| "
            + " | ".join(
                _md_cell(v)
                for v in (
                    c.name,
                    c.area,
                    c.statement,
                    c.paper_figure,
                    headline_text(r) if r else "—",
                    _status(c, r),
                    r["scale"] if r else "—",
                    f"{r['wall_time_s']:.1f} s" if r else "—",
                )
            )
            + " |"
        )
    for c in claims:
        r = records.get(c.name)
        if r is None:
            continue
        lines += ["", f"## {c.name} — {c.paper}", "", f"*Claim:* {c.statement}", ""]
        lines.append(
            f"*Paper:* {c.paper_figure}. *Measured ({r['scale']}, seed {r['seed']}):* "
            f"{headline_text(r)} — **{r['verdict']}**."
        )
        if r.get("error"):
            lines += ["", f"Error: `{r['error'].get('type')}: {r['error'].get('message')}`"]
        rows = r.get("rows") or []
        if rows:
            cols = _rows_columns(rows)
            lines += ["", "| " + " | ".join(cols) + " |", "|" + "---|" * len(cols)]
            lines += ["| " + " | ".join(_md_cell(row.get(k)) for k in cols) + " |" for row in rows]
        if r.get("notes"):
            lines += [""] + [f"- {n}" for n in r["notes"]]
        for fig in r.get("figures") or []:
            lines += ["", f"![{Path(fig).stem}]({fig})"]
    return "\n".join(lines) + "\n"


# -------------------------------------------------------------------------------- HTML

_CSS = """
body{font-family:system-ui,-apple-system,Segoe UI,Roboto,sans-serif;max-width:1200px;margin:2em auto;
padding:0 1em;color:#1a1a1a;line-height:1.45}
table{border-collapse:collapse;margin:1em 0;font-size:0.92em;width:100%}
th,td{border:1px solid #ccc;padding:0.35em 0.55em;text-align:left;vertical-align:top}
th{background:#f2f2f2}
td.num{text-align:right;font-variant-numeric:tabular-nums}
.v{font-weight:600;white-space:nowrap}
.v-reproduced{color:#0a6b2e}.v-not-reproduced{color:#a11}.v-inconclusive{color:#9a6a00}
.v-error{color:#fff;background:#a11}.v-planned,.v-not-run{color:#777}
img{max-width:100%;border:1px solid #ddd;margin:0.5em 0}
pre{background:#f6f6f6;padding:0.6em;overflow-x:auto;font-size:0.85em}
.small{color:#555;font-size:0.9em}
"""


def _esc(x: Any) -> str:
    return html.escape(format_value(x))


def _verdict_span(status: str) -> str:
    cls = "v-" + status.replace(" ", "-")
    return f'<span class="v {cls}">{html.escape(status)}</span>'


def _img(path: Path, alt: str) -> str:
    try:
        data = base64.b64encode(path.read_bytes()).decode("ascii")
    except OSError:
        return f'<p class="small">figure missing: {html.escape(str(path))}</p>'
    return f'<img alt="{html.escape(alt)}" src="data:image/png;base64,{data}">'


def render_html(claims: list[Claim], records: dict[str, dict], out_root: Path) -> str:
    out = [
        "<!DOCTYPE html>",
        '<html lang="en"><head><meta charset="utf-8">',
        '<meta name="viewport" content="width=device-width, initial-scale=1">',
        f"<title>icml26 — reproduction report</title><style>{_CSS}</style></head><body>",
        "<h1>icml26 — reproduction report</h1>",
        f'<p class="small">Generated {datetime.now(UTC).isoformat(timespec="seconds")}. '
        "Each claim is a miniature reproduction of a paper's headline result against the paper's "
        "own baselines; verdicts are computed from the measured headline, its spread and the "
        "target.</p>",
        '<table id="index"><thead><tr><th>method</th><th>area</th><th>claim</th>'
        "<th>paper reports</th><th>measured here</th><th>verdict</th><th>scale</th>"
        "<th>time</th></tr></thead><tbody>",
    ]
    for c in claims:
        r = records.get(c.name)
        name = (
            f'<a href="#{html.escape(c.name)}">{html.escape(c.name)}</a>'
            if r
            else html.escape(c.name)
        )
        wall = f"{r['wall_time_s']:.1f} s" if r else "—"
        out.append(
            f"<tr><td>{name}</td><td>{html.escape(c.area)}</td><td>{html.escape(c.statement)}</td>"
            f"<td>{html.escape(c.paper_figure)}</td>"
            f"<td>{html.escape(headline_text(r)) if r else '—'}</td>"
            f"<td>{_verdict_span(_status(c, r))}</td>"
            f"<td>{html.escape(r['scale']) if r else '—'}</td>"
            f'<td class="num">{wall}</td></tr>'
        )
    out.append("</tbody></table>")
    for c in claims:
        r = records.get(c.name)
        if r is None:
            continue
        out.append(
            f'<section id="{html.escape(c.name)}"><h2>{html.escape(c.name)} — '
            f"{html.escape(c.paper)}</h2>"
        )
        out.append(
            f"<p><b>Claim.</b> {html.escape(c.statement)}<br><b>Paper.</b> "
            f"{html.escape(c.paper_figure)}<br><b>Measured</b> ({html.escape(r['scale'])}, "
            f"seed {r['seed']}, {r['wall_time_s']:.1f} s): {html.escape(headline_text(r))} "
            f"{_verdict_span(r['verdict'])}</p>"
        )
        if r.get("error"):
            err = r["error"]
            out.append(
                f"<p><b>Error.</b> {html.escape(str(err.get('type')))}: "
                f"{html.escape(str(err.get('message')))}</p>"
            )
            if err.get("traceback"):
                out.append(
                    f"<details><summary>traceback</summary><pre>"
                    f"{html.escape(err['traceback'])}</pre></details>"
                )
        rows = r.get("rows") or []
        if rows:
            cols = _rows_columns(rows)
            out.append(
                '<table class="rows"><thead><tr>'
                + "".join(f"<th>{html.escape(k)}</th>" for k in cols)
                + "</tr></thead><tbody>"
            )
            for row in rows:
                cells = []
                for k in cols:
                    v = row.get(k)
                    cls = (
                        ' class="num"'
                        if isinstance(v, (int, float)) and not isinstance(v, bool)
                        else ""
                    )
                    cells.append(f"<td{cls}>{_esc(v)}</td>")
                out.append("<tr>" + "".join(cells) + "</tr>")
            out.append("</tbody></table>")
        if r.get("notes"):
            out.append("<ul>" + "".join(f"<li>{html.escape(n)}</li>" for n in r["notes"]) + "</ul>")
        for fig in r.get("figures") or []:
            path = Path(fig) if os.path.isabs(fig) else out_root / fig
            out.append(_img(path, Path(fig).stem))
        env = r.get("environment") or {}
        versions = ", ".join(f"{k} {v}" for k, v in (env.get("versions") or {}).items() if v)
        out.append(
            f'<p class="small">{html.escape(versions)}; {env.get("threads")} threads; '
            f"device {html.escape(str(env.get('device')))}; commit "
            f"{html.escape(str(env.get('git_commit') or '—'))[:12]}</p></section>"
        )
    out.append("</body></html>")
    return "\n".join(out) + "\n"


def build_report(
    claims: list[Claim], out_root: str | os.PathLike = "results", scale: str | None = None
) -> tuple[Path, Path]:
    """Write ``report.md`` and ``report.html`` under ``out_root``; return both paths."""
    out_root = Path(out_root)
    records = collect(out_root, scale)
    md = atomic_write_text(out_root / "report.md", render_markdown(claims, records, out_root))
    page = atomic_write_text(out_root / "report.html", render_html(claims, records, out_root))
    return md, page
