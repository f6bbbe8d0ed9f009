"""The report: index rows for every claim, sections with rows and embedded figures."""

import base64
from html.parser import HTMLParser

import pytest

from icml26 import claims_index
from icml26.core.claims import Claim, Measure, Result, run_claim
from icml26.core.plots import pyplot, save_figure
from icml26.core.report import build_report, collect, format_value, headline_text


class _Page(HTMLParser):
    def __init__(self):
        super().__init__()
        self.stack, self.index_rows, self.imgs, self.sections = [], [], [], []
        self._in_index = False
        self._row = None
        self.external, self.links, self.ids = [], [], []

    def handle_starttag(self, tag, attrs):
        a = dict(attrs)
        if tag == "table" and a.get("id") == "index":
            self._in_index = True
        if tag == "tr" and self._in_index:
            self._row = []
        if tag == "img":
            self.imgs.append(a.get("src", ""))
        if tag == "section":
            self.sections.append(a.get("id"))
        if (tag == "script" and a.get("src")) or tag == "link" or (
                tag == "img" and not a.get("src", "").startswith("data:")):
            self.external.append(tag)
        if tag == "a" and a.get("href", "").startswith("#"):
            self.links.append(a["href"][1:])
        if "id" in a:
            self.ids.append(a["id"])

    def handle_endtag(self, tag):
        if tag == "table":
            self._in_index = False
        if tag == "tr" and self._row is not None:
            self.index_rows.append(self._row)
            self._row = None

    def handle_data(self, data):
        if self._row is not None and data.strip():
            self._row.append(data.strip())


def _with_figure(ctx):
    plt = pyplot()
    fig, ax = plt.subplots()
    ax.plot([0, 1], [1, 0])
    path = save_figure(fig, ctx.out_dir / "curve.png")
    return Result(
        rows=[{"system": "a", "v": 1.5}],
        headline=Measure("h", 3.0, "x", (2.0, 4.0)),
        target=1.0,
        notes=["a note <b>escaped</b>"],
        figures=[path],
    )


def test_report_has_index_rows_sections_and_embedded_images(tmp_path):
    claims = list(claims_index.CLAIMS) + [
        Claim("later", "Paper", "S", "F", area="test"),  # planned: no run yet
        Claim("figclaim", "Paper", "S", "F", run=_with_figure, area="test"),
    ]
    run_claim(claims[-1], scale="tiny", out_root=tmp_path)
    run_claim(Claim("tie", "P", "S", "F", run=lambda c: 1 / 0), scale="tiny", out_root=tmp_path)
    md, page = build_report(claims, tmp_path)
    parser = _Page()
    parser.feed(page.read_text())
    assert len(parser.index_rows) == 1 + len(claims)  # header + one per claim
    by_name = {row[0]: row for row in parser.index_rows[1:]}
    assert "reproduced" in by_name["figclaim"]
    assert "error" in by_name["tie"]
    assert "planned" in by_name["later"]
    assert "not run" in by_name["smollm2-perplexity"]
    assert parser.sections == ["tie", "figclaim"]
    assert len(parser.imgs) == 2  # the summary figure, then figclaim's curve
    for img in parser.imgs:
        assert img.startswith("data:image/png;base64,")
        assert base64.b64decode(img.split(",", 1)[1])[:8] == b"\x89PNG\r\n\x1a\n"
    assert parser.external == []
    assert parser.links and set(parser.links) <= set(parser.ids)  # every anchor resolves
    assert "&lt;b&gt;escaped" in page.read_text()
    assert "ZeroDivisionError" in page.read_text()
    text = md.read_text()
    assert "| figclaim |" in text and "![curve](figclaim/tiny/curve.png)" in text
    assert "(summary.png)" in text and (tmp_path / "summary.png").is_file()


def test_collect_prefers_largest_scale_then_newest(tmp_path):
    ok = Claim("c", "P", "S", "F", run=_with_figure)
    run_claim(ok, scale="small", out_root=tmp_path)
    run_claim(ok, scale="tiny", out_root=tmp_path)  # newer, but smaller
    assert collect(tmp_path)["c"]["scale"] == "small"
    assert collect(tmp_path, scale="tiny")["c"]["scale"] == "tiny"


def test_collect_skips_broken_json(tmp_path):
    ok = Claim("c", "P", "S", "F", run=_with_figure)
    run_claim(ok, scale="tiny", out_root=tmp_path)
    (tmp_path / "c" / "small.json").write_text('{"name": "c", "verd')  # truncated by a crash
    found = collect(tmp_path)
    assert found["c"]["scale"] == "tiny"


def test_format_and_headline_text():
    assert format_value(3.14159) == "3.142"
    assert format_value(123456.0) == "1.235e+05"
    assert format_value(12) == "12"
    rec = {
        "headline": {"value": 2.0, "unit": "x", "spread": [1.5, 2.5], "higher_is_better": False},
        "target": 3.0,
    }
    assert headline_text(rec) == "2x [1.5, 2.5] (target < 3x)"
    # a run that stopped before its headline (JSON null, or NaN in memory) says so, not "x"
    for missing in (None, float("nan")):
        rec["headline"]["value"] = missing
        assert headline_text(rec) == "not measured (target < 3x)"


def _rec(name, value, spread, verdict, hib=True, target=1.0, paper=None):
    return {"name": name, "verdict": verdict, "scale": "tiny", "seed": 0, "wall_time_s": 1.0,
            "target": target, "paper_value": paper,
            "headline": {"name": "h", "value": value, "unit": "x", "spread": spread,
                         "higher_is_better": hib}}


def test_summary_figure_plots_measured_and_paper_values():
    from icml26.core.report import draw_summary

    claims = [Claim("a", "P", "S", "F", run=lambda c: None, paper_value=2.31),
              Claim("b", "P", "S", "F", run=lambda c: None),
              Claim("c", "P", "S", "F", run=lambda c: None, paper_value=0.5),
              Claim("d", "P", "S", "F")]  # planned: named, never drawn
    records = {"a": _rec("a", 0.99, [0.96, 1.03], "not reproduced"),
               "b": _rec("b", 3.0, None, "reproduced", paper=4.0),  # the run's own paper value
               "c": _rec("c", -1.0, None, "not reproduced")}          # cannot go on a log axis
    fig, plotted = draw_summary(claims, records)
    ax = fig.axes[0]
    dots = {(round(float(ln.get_xdata()[0]), 6), float(ln.get_ydata()[0]))
            for ln in ax.lines if ln.get_marker() == "o"}
    diamonds = {(float(ln.get_xdata()[0]), float(ln.get_ydata()[0]))
                for ln in ax.lines if ln.get_marker() == "D"}
    assert dots == {(0.99, 3.0), (3.0, 2.0)}          # row i at y = n - 1 - i
    assert diamonds == {(2.31, 3.0), (4.0, 2.0), (0.5, 1.0)}
    assert plotted["c"] == {"status": "value <= 0: see table", "paper": 0.5}
    assert plotted["d"] == {"status": "planned"}
    texts = [t.get_text() for t in ax.texts]
    assert texts == ["value <= 0: see table", "planned"]
    assert ax.get_xscale() == "log"
    # the error bar spans the spread
    (bars,) = [c for c in ax.collections if len(c.get_segments()) and
               abs(c.get_segments()[0][0][1] - 3.0) < 1e-9]
    (seg,) = bars.get_segments()
    assert seg[0][0] == pytest.approx(0.96) and seg[1][0] == pytest.approx(1.03)


def test_bad_inputs_in_the_results_folder(tmp_path):
    claims = [Claim("ok", "P", "S", "F", run=_with_figure), Claim("broken", "P", "S", "F",
                                                                  run=_with_figure)]
    md, page = build_report(claims, tmp_path)  # empty folder
    assert "No claim has run yet" in page.read_text() and not (tmp_path / "summary.png").exists()
    run_claim(claims[0], scale="tiny", out_root=tmp_path)
    (tmp_path / "broken").mkdir()
    (tmp_path / "broken" / "small.json").write_text('{"foreign": true}')
    (tmp_path / "ok" / "tiny" / "curve.png").unlink()  # a figure that no longer exists
    md, page = build_report(claims, tmp_path)
    text = page.read_text()
    assert "unreadable result" in text and "broken/small.json" in text
    assert "Figure missing: curve.png" in text
    parser = _Page()
    parser.feed(text)
    assert len(parser.imgs) == 1  # only the summary; no broken <img> for the missing figure
    assert set(parser.links) <= set(parser.ids)


def test_uninformative_verdict_shows_its_reason_and_power_table(tmp_path):
    from icml26.core import power
    from icml26.core.power import PowerSpec

    def null_run(ctx):
        return Result(
            rows=[{"system": "steered", "acc": 0.4}, {"system": "base", "acc": 0.4},
                  {"system": "majority", "acc": 0.45}],
            headline=Measure("gain", 0.0, " pp", (0.0, 0.0)),
            target=0.0,
            power=[power.control("steered", 0.4, "base", 0.4),
                   power.floor({"steered": 0.4, "base": 0.4}, "majority", 0.45),
                   power.degeneracy(["steered", "base"], 0, 300, what="answers")],
        )

    spec = PowerSpec(control="c", floor="majority", degeneracy="answers changed")
    claim = Claim("nullsteer", "Paper", "Steering helps", "+3 pp", run=null_run, power=spec)
    rec = run_claim(claim, scale="tiny", out_root=tmp_path)
    assert rec["verdict"] == "uninformative"
    md, page = build_report([claim], tmp_path)
    text = page.read_text()
    p = _Page()
    p.feed(text)
    row = p.index_rows[1]
    assert "uninformative" in row
    assert any(cell.startswith("control: steered") and cell.endswith("…") for cell in row)
    assert "0 of 300 answers differ" in text  # the full reason in the section
    assert 'class="power"' in text and "not separate" in text and "NO" in text
    mdtext = md.read_text()
    assert "| power check | kind |" in mdtext and "uninformative (control:" in mdtext


def test_cli_list_and_show_print_the_uninformative_reason(tmp_path):
    from typer.testing import CliRunner

    from icml26.cli import app

    claim = claims_index.get("smollm2-perplexity")
    rec = {"name": claim.name, "verdict": "uninformative", "scale": "tiny", "seed": 0,
           "wall_time_s": 1.0, "finished_at": "2026-12-01T00:00:00+00:00",
           "headline": {"name": "h", "value": 2.0, "unit": "x", "spread": None,
                        "higher_is_better": True}, "target": 5.0, "rows": [], "notes": [],
           "uninformative": "floor: every system is below the unigram floor",
           "power": {"checks": [{"name": "floor", "kind": "floor", "systems": ["m"],
                                 "passed": False, "reason": "below the unigram floor"}]}}
    (tmp_path / claim.name).mkdir()
    import json

    (tmp_path / claim.name / "tiny.json").write_text(json.dumps(rec))
    r = CliRunner().invoke(app, ["list", "--out", str(tmp_path)])
    assert r.exit_code == 0 and "uninformative" in r.output and "floor: every" in r.output
    r = CliRunner().invoke(app, ["show", claim.name, "--out", str(tmp_path)])
    assert r.exit_code == 0, r.output
    assert "uninformative: floor: every system" in r.output
    assert "power floor: NO" in r.output and "control:" in r.output


def test_tiny_results_carry_a_pipeline_check_banner_and_verdict_counts(tmp_path):
    ok = Claim("c", "P", "S", "F", run=_with_figure)
    lower = Claim("d", "P", "S", "F", run=lambda ctx: Result(
        rows=[], headline=Measure("h", 0.5, "x", (0.4, 0.6), higher_is_better=False), target=0.9))
    claims = [ok, lower, Claim("e", "P", "S", "F", run=lambda ctx: None)]
    run_claim(ok, scale="small", out_root=tmp_path)
    md, page = build_report(claims, tmp_path)
    html_text, md_text = page.read_text(), md.read_text()
    assert 'id="scale-banner"' not in html_text and "Pipeline check" not in md_text
    assert "Verdicts (3 claims): reproduced 1, not run 2." in md_text

    run_claim(lower, scale="tiny", out_root=tmp_path)
    md, page = build_report(claims, tmp_path)
    html_text, md_text = page.read_text(), md.read_text()
    assert 'id="scale-banner"' in html_text
    assert "1 of the 2 results on this page are at scale tiny" in html_text
    assert "> **Pipeline check.**" in md_text
    assert "Verdicts (3 claims): reproduced 2, not run 1." in md_text
    assert html_text.count('<span class="v v-reproduced">reproduced</span> 2') == 1

    from icml26.core.report import collect, draw_summary
    fig, _ = draw_summary(claims, collect(tmp_path))
    ax = fig.axes[0]
    ticks = [t.get_text() for t in ax.get_yticklabels()]
    assert ticks == ["e", "d ↓", "c ↑"]  # bottom to top; no direction for a claim not run
    assert "pipeline check" in ax.get_title()
    legend = ax.get_legend()
    assert legend is not None and legend.get_bbox_to_anchor().x0 > ax.get_window_extent().x1 - 1
