"""``results/*/*.json`` -> ``results/report.md`` and a self-contained ``results/report.html``.

The HTML is one self-contained file: inline CSS, figures embedded as base64 PNG, no external
fonts, scripts or images, and a few lines of inline JavaScript whose only job is sorting the index
(the page reads the same with it off). It opens with the summary figure (each paper's reported
number beside the headline measured here), then the index of every registered claim (those without
results show "planned", "not run" or "unreadable result"), then one section per claim: the
headline with its spread and target, the measured rows, the notes, the figures, the error if the
claim failed. Wide tables scroll inside their own box, so the page fits a phone's width; a print
stylesheet keeps figures and tables whole.
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
    value = h.get("value")
    # a run stopped before its headline (e.g. a failed precondition) has no value
    measured = value is not None and not (isinstance(value, float) and math.isnan(value))
    text = f"{format_value(value)}{unit}" if measured else "not measured"
    if h.get("spread") and measured:
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


def power_rows(record: dict) -> list[tuple[str, str, str, str, str]]:
    """The record's power checks as ``(name, kind, systems, passed, reason)`` rows."""
    power = record.get("power") or {}
    out = []
    for c in power.get("checks") or []:
        passed = {True: "yes", False: "NO", None: "not measured"}[c.get("passed")]
        out.append((str(c.get("name", "")), str(c.get("kind", "")),
                    ", ".join(map(str, c.get("systems") or [])), passed,
                    str(c.get("reason", ""))))
    return out


def uninformative_reason(record: dict | None, limit: int = 160) -> str:
    """The one-line reason of an ``uninformative`` verdict, shortened to ``limit`` characters."""
    why = str((record or {}).get("uninformative") or "")
    return why if len(why) <= limit else why[: limit - 1].rstrip() + "…"


# -------------------------------------------------------------------------------- markdown


def _md_cell(x: Any) -> str:
    return format_value(x).replace("|", "\\|").replace("\n", " ")


def render_markdown(claims: list[Claim], records: dict[str, dict], out_root: Path,
                    summary: bool = False) -> str:
    lines = [
        "# icml26 — reproduction report",
        "",
        f"Generated {datetime.now(UTC).isoformat(timespec='seconds')}.",
        "",
    ]
    banner = scale_banner(records)
    if banner:
        lines += [f"> **Pipeline check.** {banner}", ""]
    if records:
        counts = verdict_counts(claims, records)
        lines += [f"Verdicts ({len(claims)} claims): "
                  + ", ".join(f"{k} {v}" for k, v in counts.items()) + ".", ""]
    if summary:
        lines += ["![Reported vs measured, per paper](summary.png)", ""]
    lines += [
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
                    _status(c, r) + (f" ({uninformative_reason(r)})"
                                     if r and r.get("verdict") == "uninformative" else ""),
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
        if r.get("uninformative"):
            lines += ["", f"*Uninformative:* {r['uninformative']}"]
        checks = power_rows(r)
        if checks:
            lines += ["", "| power check | kind | systems | passed | reason |", "|---|---|---|---|---|"]
            lines += ["| " + " | ".join(_md_cell(x) for x in row) + " |" for row in checks]
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


# -------------------------------------------------------------------------------- summary figure

_VERDICT_COLOURS = {
    "reproduced": "#1b7f3b",
    "not reproduced": "#b3261e",
    "inconclusive": "#b07d00",
    "uninformative": "#5b5bd6",
    "error": "#6b0f0a",
}


def paper_value(claim: Claim, record: dict | None) -> float | None:
    """The paper's number for the headline: the run's own ``paper_value``, else the claim's."""
    value = (record or {}).get("paper_value")
    if value is None:
        value = getattr(claim, "paper_value", None)
    return None if value is None else float(value)


def summary_figure(claims: list[Claim], records: dict[str, dict], path: Path) -> dict:
    """Draw :func:`draw_summary` into ``path`` (PNG); return what was plotted, per claim."""
    from icml26.core.plots import save_figure

    fig, plotted = draw_summary(claims, records)
    save_figure(fig, path)
    return plotted


def draw_summary(claims: list[Claim], records: dict[str, dict]):
    """Per claim, the measured headline (spread as error bar, verdict as colour) beside the
    paper's number, on a log axis; claims without a result are named in the margin, never drawn
    as a value. Returns ``(figure, plotted)``; row ``i`` of the figure is at ``y = n - 1 - i``."""
    from icml26.core.plots import pyplot

    plt = pyplot()
    n = len(claims)
    fig, ax = plt.subplots(figsize=(9.5, 0.42 * n + 1.6))
    plotted: dict[str, dict] = {}
    values = []
    for i, c in enumerate(claims):
        y = n - 1 - i
        r = records.get(c.name)
        h = (r or {}).get("headline") or {}
        v = h.get("value")
        pv = paper_value(c, r)
        if r is None or v is None or not math.isfinite(v) or v <= 0:
            why = ("planned" if c.planned else "not run") if r is None else (
                "error" if r.get("verdict") == "error" or v is None else "value <= 0: see table")
            plotted[c.name] = {"status": why}
            ax.annotate(why, (0.01, y), xycoords=("axes fraction", "data"), va="center",
                        fontsize=8, color="#777")
        else:
            lo, hi = h.get("spread") or (v, v)
            lo, hi = min(lo, v), max(hi, v)
            colour = _VERDICT_COLOURS.get(r["verdict"], "#333")
            ax.errorbar([v], [y], xerr=[[v - max(lo, v * 1e-3)], [hi - v]], fmt="o",
                        color=colour, ecolor=colour, capsize=3, ms=6,
                        label=r["verdict"])
            plotted[c.name] = {"measured": v, "low": lo, "high": hi, "verdict": r["verdict"],
                               "paper": pv, "target": r.get("target")}
            values += [max(lo, v * 1e-3), hi]
            t = r.get("target")
            if t is not None and t > 0:
                ax.plot([t], [y], marker="|", ms=12, color="#999", label="target")
                values.append(t)
        if pv is not None and pv > 0:
            ax.plot([pv], [y], marker="D", mfc="none", mec="black", ms=6, ls="none",
                    label="paper")
            values.append(pv)
            plotted.setdefault(c.name, {})["paper"] = pv
    def tick(c: Claim) -> str:  # the headline's direction, from the record's Measure
        h = (records.get(c.name) or {}).get("headline") or {}
        if h.get("value") is None or "higher_is_better" not in h:
            return c.name
        return f"{c.name} {'↑' if h['higher_is_better'] else '↓'}"

    ax.set_yticks(range(n), [tick(c) for c in reversed(claims)], fontsize=9)
    ax.set_xscale("log")
    if values:
        ax.set_xlim(min(values) / 1.6, max(values) * 1.6)
    ax.axvline(1.0, color="#ccc", lw=0.8, zorder=0)
    ax.set_xlabel("headline ratio (log scale): measured here (dot, spread as bar) vs paper (◇);"
                  "\n↑ higher is better, ↓ lower is better")
    ax.set_ylim(-0.7, n - 0.3)
    handles, labels = ax.get_legend_handles_labels()
    uniq = dict(zip(labels, handles, strict=True))
    if uniq:
        # outside the axes, so that no point (the health check's included) is hidden under it
        ax.legend(uniq.values(), uniq.keys(), fontsize=8, loc="upper left",
                  bbox_to_anchor=(1.01, 1.0), borderaxespad=0.0, frameon=False)
    tiny = any((r or {}).get("scale") == "tiny" for r in records.values())
    ax.set_title("Each paper's headline: reported vs measured in miniature"
                 + ("\n(tiny results: a pipeline check, not a reproduction)" if tiny else ""),
                 fontsize=11, color="#8a5a00" if tiny else "black")
    fig.tight_layout()
    return fig, plotted


# -------------------------------------------------------------------------------- HTML

_CSS = """
*{box-sizing:border-box}
body{font-family:system-ui,-apple-system,Segoe UI,Roboto,sans-serif;max-width:1200px;margin:1.5em auto;
padding:0 1em;color:#1a1a1a;line-height:1.45;overflow-wrap:break-word}
h1{font-size:1.6em}h2{font-size:1.25em;margin-top:2em;border-bottom:1px solid #ddd}
.scroll{overflow-x:auto;max-width:100%}
table{border-collapse:collapse;margin:0.6em 0;font-size:0.9em;min-width:100%}
caption{text-align:left;font-weight:600;padding:0.3em 0;caption-side:top}
th,td{border:1px solid #ccc;padding:0.35em 0.55em;text-align:left;vertical-align:top}
thead th{background:#f2f2f2;white-space:nowrap}
th[scope=row]{font-weight:600;background:#fafafa}
th button{all:inherit;cursor:pointer;text-decoration:underline dotted}
th[aria-sort=ascending] button::after{content:" ▲"}th[aria-sort=descending] button::after{content:" ▼"}
td.num{text-align:right;font-variant-numeric:tabular-nums;white-space:nowrap}
.v{font-weight:600;white-space:nowrap}
.v-reproduced{color:#0a6b2e}.v-not-reproduced{color:#a11}.v-inconclusive{color:#8a5a00}
.v-uninformative{color:#4343b8}.why{display:block;font-weight:400;font-size:0.85em;color:#444;
white-space:normal}
.v-error,.v-unreadable-result{color:#fff;background:#a11;padding:0 0.25em}
.v-planned,.v-not-run{color:#666}
figure{margin:1em 0}figcaption{font-size:0.88em;color:#444}
img{max-width:100%;height:auto;border:1px solid #ddd}
pre{background:#f6f6f6;padding:0.6em;overflow-x:auto;font-size:0.85em;white-space:pre-wrap}
.small{color:#555;font-size:0.9em}
.banner{border:2px solid #8a5a00;background:#fff8e6;padding:0.5em 0.8em;margin:0.8em 0}
nav.toc{font-size:0.9em}
@media (max-width:600px){body{padding:0 0.5em}table{font-size:0.8em}
#index tr>:nth-child(3){display:none}}
@media print{body{max-width:none;margin:0}th button{text-decoration:none}
figure,table,tr{break-inside:avoid}a{color:inherit;text-decoration:none}
details>*{display:block}nav.toc{display:none}.scroll{overflow:visible}}
"""

# A few lines of sorting; the page reads the same without them.
_JS = """
(function(){
var order={"reproduced":0,"inconclusive":1,"uninformative":2,"not reproduced":3,"error":4,
"unreadable result":5,"not run":6,"planned":7};
document.querySelectorAll("table.sortable").forEach(function(table){
 var heads=table.querySelectorAll("thead th");
 heads.forEach(function(th,col){
  var b=document.createElement("button");b.type="button";b.textContent=th.textContent;
  th.textContent="";th.appendChild(b);
  b.addEventListener("click",function(){
   var asc=th.getAttribute("aria-sort")!=="ascending";
   heads.forEach(function(h){h.removeAttribute("aria-sort");});
   th.setAttribute("aria-sort",asc?"ascending":"descending");
   var body=table.tBodies[0],rows=Array.prototype.slice.call(body.rows);
   function key(r){var c=r.cells[col],k=c.getAttribute("data-key");
    if(k===null){k=c.textContent.trim();if(k in order)return order[k];}
    var n=parseFloat(k);return isNaN(n)?k.toLowerCase():n;}
   rows.sort(function(a,b){var x=key(a),y=key(b);
    var r=(typeof x===typeof y)?(x<y?-1:x>y?1:0):(typeof x==="number"?-1:1);return asc?r:-r;});
   rows.forEach(function(r){body.appendChild(r);});
  });
 });
});
})();
"""

_VERDICT_RANK = {"reproduced": 0, "inconclusive": 1, "uninformative": 2, "not reproduced": 3,
                 "error": 4, "unreadable result": 5, "not run": 6, "planned": 7}


def _esc(x: Any) -> str:
    return html.escape(format_value(x))


def _verdict_span(status: str) -> str:
    cls = "v-" + status.replace(" ", "-")
    return f'<span class="v {cls}">{html.escape(status)}</span>'


def _img(path: Path, alt: str, caption: str) -> str:
    try:
        data = base64.b64encode(path.read_bytes()).decode("ascii")
    except OSError:
        return f'<p class="small">Figure missing: {html.escape(path.name)} is no longer in the ' \
               "results folder (re-run the claim to draw it again).</p>"
    return (f'<figure><img alt="{html.escape(alt)}" src="data:image/png;base64,{data}">'
            f"<figcaption>{html.escape(caption)}</figcaption></figure>")


def _figure_alt(claim: Claim, fig: str) -> str:
    stem = Path(fig).stem.replace("_", " ")
    return f"{claim.name}: figure '{stem}' from the {claim.name} reproduction"


def _section(c: Claim, r: dict, out_root: Path) -> list[str]:
    anchor = html.escape(c.name)
    out = [f'<section id="{anchor}"><h2>{html.escape(c.name)} — {html.escape(c.paper)}</h2>']
    pv = paper_value(c, r)
    pv_text = f" (as a number: {format_value(pv)})" if pv is not None else ""
    out.append(
        f"<p><b>Claim.</b> {html.escape(c.statement)}<br><b>Paper.</b> "
        f"{html.escape(c.paper_figure)}{html.escape(pv_text)}<br><b>Measured</b> "
        f"({html.escape(r['scale'])}, seed {r['seed']}, {r['wall_time_s']:.1f} s): "
        f"{html.escape(headline_text(r))} {_verdict_span(r['verdict'])}</p>"
    )
    if r.get("uninformative"):
        out.append(f"<p><b>Uninformative measurement</b> (the setup could not show the effect, "
                   f"so the headline is not evidence either way): "
                   f"{html.escape(str(r['uninformative']))}</p>")
    checks = power_rows(r)
    if checks:
        out.append(f'<div class="scroll"><table class="power"><caption>{html.escape(c.name)}: '
                   "power checks (can this setup detect the effect?)</caption><thead><tr>"
                   + "".join(f'<th scope="col">{h}</th>' for h in
                             ("check", "kind", "systems", "passed", "reason"))
                   + "</tr></thead><tbody>")
        for row in checks:
            out.append("<tr>" + "".join(f"<td>{html.escape(x)}</td>" for x in row) + "</tr>")
        out.append("</tbody></table></div>")
    if r.get("error"):
        err = r["error"]
        out.append(f"<p><b>Error.</b> {html.escape(str(err.get('type')))}: "
                   f"{html.escape(str(err.get('message')))}</p>")
        if err.get("traceback"):
            out.append(f"<details><summary>traceback</summary><pre>"
                       f"{html.escape(err['traceback'])}</pre></details>")
    rows = r.get("rows") or []
    if rows:
        cols = _rows_columns(rows)
        out.append(f'<div class="scroll"><table class="rows"><caption>{html.escape(c.name)}: '
                   "measured table</caption><thead><tr>"
                   + "".join(f'<th scope="col">{html.escape(k)}</th>' for k in cols)
                   + "</tr></thead><tbody>")
        for row in rows:
            cells = []
            for k in cols:
                v = row.get(k)
                num = isinstance(v, (int, float)) and not isinstance(v, bool)
                cls = ' class="num"' if num else ""
                cells.append(f"<td{cls}>{_esc(v)}</td>")
            out.append("<tr>" + "".join(cells) + "</tr>")
        out.append("</tbody></table></div>")
    if r.get("notes"):
        out.append("<p><b>Notes</b> (what was run, and how it differs from the paper):</p><ul>"
                   + "".join(f"<li>{html.escape(n)}</li>" for n in r["notes"]) + "</ul>")
    for fig in r.get("figures") or []:
        path = Path(fig) if os.path.isabs(fig) else out_root / fig
        out.append(_img(path, _figure_alt(c, fig), Path(fig).name))
    env = r.get("environment") or {}
    versions = ", ".join(f"{k} {v}" for k, v in (env.get("versions") or {}).items() if v)
    out.append(
        f'<p class="small">{html.escape(versions)}; {env.get("threads")} threads; '
        f"device {html.escape(str(env.get('device')))}; commit "
        f"{html.escape(str(env.get('git_commit') or '—'))[:12]}. "
        '<a href="#index">back to the index</a></p></section>'
    )
    return out


def verdict_counts(claims: list[Claim], records: dict[str, dict],
                   bad: dict[str, str] | None = None) -> dict[str, int]:
    """``{status: number of claims}`` in :data:`_VERDICT_RANK` order, statuses with none left out."""
    bad = bad or {}
    counts: dict[str, int] = {}
    for c in claims:
        r = records.get(c.name)
        status = "unreadable result" if r is None and c.name in bad else _status(c, r)
        counts[status] = counts.get(status, 0) + 1
    return dict(sorted(counts.items(), key=lambda kv: _VERDICT_RANK.get(kv[0], 9)))


def scale_banner(records: dict[str, dict]) -> str | None:
    """A warning when any shown record ran at ``tiny``: the CI size checks that a claim runs end to
    end and computes its verdict, on settings too small to say whether the paper's claim holds."""
    tiny = sorted(n for n, r in records.items() if r.get("scale") == "tiny")
    if not tiny:
        return None
    which = ("Every result on this page is" if len(tiny) == len(records) else
             f"{len(tiny)} of the {len(records)} results on this page are")
    return (f"{which} at scale tiny: a pipeline check, not a reproduction. Tiny settings only "
            "show that a claim runs end to end and computes its verdict and power checks; those "
            "verdicts say nothing about the paper. The documented verdicts are those at "
            "--scale small (the README's table).")


def render_html(claims: list[Claim], records: dict[str, dict], out_root: Path,
                summary: Path | None = None, bad: dict[str, str] | None = None) -> str:
    bad = bad or {}
    out = [
        "<!DOCTYPE html>",
        '<html lang="en"><head><meta charset="utf-8">',
        '<meta name="viewport" content="width=device-width, initial-scale=1">',
        f"<title>icml26 — reproduction report</title><style>{_CSS}</style></head><body>",
        "<header><h1>icml26 — reproduction report</h1>",
        f'<p class="small">Generated {datetime.now(UTC).isoformat(timespec="seconds")}. '
        "Each claim is a miniature reproduction of a paper's headline result against the paper's "
        "own baselines; verdicts are computed from the measured headline, its spread and the "
        "target, never written in.</p></header><main>",
    ]
    banner = scale_banner(records)
    if banner:
        out.append(f'<p class="banner" id="scale-banner" role="note"><b>Pipeline check.</b> '
                   f"{html.escape(banner)}</p>")
    if records or bad:
        counts = verdict_counts(claims, records, bad)
        out.append('<p id="verdict-counts"><b>Verdicts</b> (' + str(len(claims)) + " claims): "
                   + ", ".join(f"{_verdict_span(k)} {v}" for k, v in counts.items()) + "</p>")
    if not records and not bad:
        out.append('<p id="empty"><b>No claim has run yet.</b> Run one with '
                   "<code>icml26 reproduce tie --scale tiny</code> (or <code>make reproduce "
                   "SCALE=tiny</code> for all), then open this page again.</p>")
    if summary is not None and summary.is_file() and records:
        out.append(_img(summary, "Summary: for each paper, the headline ratio measured here "
                        "(dot with spread, coloured by verdict) beside the paper's reported "
                        "number (hollow diamond), log scale; methods without a result are "
                        "named, not drawn.", "Reported vs measured, per paper."))
    out.append(
        '<div class="scroll"><table id="index" class="sortable"><caption>Index: one row per '
        "method (click a column header to sort)</caption><thead><tr>"
        + "".join(f'<th scope="col">{h}</th>' for h in (
            "method", "area", "claim", "paper reports", "measured here", "verdict", "scale",
            "time"))
        + "</tr></thead><tbody>"
    )
    for c in claims:
        r = records.get(c.name)
        status = "unreadable result" if r is None and c.name in bad else _status(c, r)
        name = (f'<a href="#{html.escape(c.name)}">{html.escape(c.name)}</a>'
                if r or c.name in bad else html.escape(c.name))
        wall = r["wall_time_s"] if r else None
        why = uninformative_reason(r) if status == "uninformative" else ""
        why_html = f'<span class="why">{html.escape(why)}</span>' if why else ""
        out.append(
            f'<tr><th scope="row">{name}</th><td>{html.escape(c.area)}</td>'
            f"<td>{html.escape(c.statement)}</td><td>{html.escape(c.paper_figure)}</td>"
            f"<td>{html.escape(headline_text(r)) if r else '—'}</td>"
            f'<td data-key="{_VERDICT_RANK.get(status, 9)}">{_verdict_span(status)}{why_html}</td>'
            f"<td>{html.escape(r['scale']) if r else '—'}</td>"
            f'<td class="num" data-key="{wall if wall is not None else 1e18}">'
            f"{f'{wall:.1f} s' if wall is not None else '—'}</td></tr>"
        )
    out.append("</tbody></table></div>")
    for c in claims:
        r = records.get(c.name)
        if r is not None:
            out += _section(c, r, out_root)
        elif c.name in bad:
            out.append(f'<section id="{html.escape(c.name)}"><h2>{html.escape(c.name)}</h2>'
                       f"<p>{_verdict_span('unreadable result')} {html.escape(bad[c.name])} "
                       "could not be read (malformed or not an icml26 record); re-run the claim."
                       "</p></section>")
    out.append(f"</main><script>{_JS}</script></body></html>")
    return "\n".join(out) + "\n"


def unreadable(out_root: str | os.PathLike, names: list[str]) -> dict[str, str]:
    """``{claim name: file}`` for claims whose folder holds only unreadable/foreign JSON."""
    good = collect(out_root)
    bad: dict[str, str] = {}
    for name in names:
        if name in good:
            continue
        for path in sorted(Path(out_root).glob(f"{name}/*.json")):
            bad[name] = str(path.relative_to(out_root))
            break
    return bad


CHROMIUM_NAMES = ("chromium", "chromium-browser", "google-chrome", "google-chrome-stable")
CHROMIUM_FLAGS = ("--headless", "--no-sandbox", "--disable-gpu", "--no-first-run",
                  "--disable-background-networking", "--disable-component-update",
                  "--disable-sync")


def find_chromium() -> str | None:
    """A Chromium/Chrome binary: ``$ICML26_CHROMIUM`` or the first of the usual names on PATH."""
    import shutil

    env = os.environ.get("ICML26_CHROMIUM")
    if env:
        return env if Path(env).is_file() else None
    return next((p for p in map(shutil.which, CHROMIUM_NAMES) if p), None)


def print_pdf(page: Path, pdf: Path, timeout: float = 120.0) -> Path:
    """Print ``page`` to ``pdf`` with headless Chromium (a fresh profile, no network)."""
    import subprocess
    import tempfile

    from icml26.core.errors import UserError

    binary = find_chromium()
    if binary is None:
        raise UserError("printing to PDF needs Chromium: install Debian's `chromium` "
                        "(apt-get install chromium) or set $ICML26_CHROMIUM to a Chrome binary")
    with tempfile.TemporaryDirectory(prefix="icml26-chromium-") as profile:
        tmp_pdf = pdf.with_name(f".{pdf.name}.tmp")
        cmd = [binary, *CHROMIUM_FLAGS, f"--user-data-dir={profile}", "--no-pdf-header-footer",
               f"--print-to-pdf={tmp_pdf}", page.resolve().as_uri()]
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
        if proc.returncode != 0 or not tmp_pdf.is_file() or tmp_pdf.stat().st_size == 0:
            tmp_pdf.unlink(missing_ok=True)
            raise UserError(f"{binary} could not print {page} (exit {proc.returncode}): "
                            f"{proc.stderr.strip()[-300:]}")
        os.replace(tmp_pdf, pdf)
    return pdf


def build_report(
    claims: list[Claim], out_root: str | os.PathLike = "results", scale: str | None = None
) -> tuple[Path, Path]:
    """Write ``report.md``, ``report.html`` and ``summary.png`` under ``out_root``."""
    out_root = Path(out_root)
    out_root.mkdir(parents=True, exist_ok=True)
    records = collect(out_root, scale)
    bad = unreadable(out_root, [c.name for c in claims])
    summary = None
    if records:
        summary = out_root / "summary.png"
        summary_figure(claims, records, summary)
    md = atomic_write_text(out_root / "report.md",
                           render_markdown(claims, records, out_root, summary is not None))
    page = atomic_write_text(out_root / "report.html",
                             render_html(claims, records, out_root, summary, bad))
    return md, page
