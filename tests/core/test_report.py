"""The report: index rows for every claim, sections with rows and embedded figures."""

import base64
from html.parser import HTMLParser

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
        self.external = []

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
        if tag in ("script", "link") or (tag == "img" and not a.get("src", "").startswith("data:")):
            self.external.append(tag)

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
    (img,) = parser.imgs
    assert img.startswith("data:image/png;base64,")
    assert base64.b64decode(img.split(",", 1)[1])[:8] == b"\x89PNG\r\n\x1a\n"
    assert parser.external == []
    assert "&lt;b&gt;escaped" in page.read_text()
    assert "ZeroDivisionError" in page.read_text()
    text = md.read_text()
    assert "| figclaim |" in text and "![curve](figclaim/tiny/curve.png)" in text


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
