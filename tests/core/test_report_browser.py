"""The report in a real browser: headless Chromium through Playwright, at desktop and phone width.

Uses the system Chromium (Debian's `chromium`, installed by .ci/run; `make test-browser` for a
person), never `playwright install`. Skipped only when no Chromium binary is found.
"""

from __future__ import annotations

import pytest

from icml26 import claims_index
from icml26.core.claims import Claim, Measure, Result, run_claim
from icml26.core.plots import pyplot, save_figure
from icml26.core.report import CHROMIUM_FLAGS, build_report, find_chromium, print_pdf

CHROMIUM = find_chromium()
pytestmark = pytest.mark.skipif(CHROMIUM is None, reason="no Chromium binary on this machine")


def _claim(value, target, name):
    def run(ctx):
        plt = pyplot()
        fig, ax = plt.subplots(figsize=(9, 3))
        ax.plot(range(10), [v * value for v in range(10)])
        path = save_figure(fig, ctx.out_dir / f"{name}_curve.png")
        rows = [{"system": f"a very long system name number {i} " * 3, "value": i * value,
                 "extra column": "x" * 40, "more": i, "and more": i / 3} for i in range(4)]
        return Result(rows=rows, headline=Measure("h", value, "x", (value * 0.9, value * 1.1)),
                      target=target, notes=["differs from the paper: tiny model"],
                      figures=[path])

    return run


@pytest.fixture(scope="module")
def report(tmp_path_factory):
    root = tmp_path_factory.mktemp("browser-report")
    real = {c.name: c for c in claims_index.CLAIMS}
    runs = {"tie": (0.99, 1.15), "atlas": (0.15, 1.0), "sso": (0.4, 1.0), "lems": (0.8, 0.9)}
    for name, (value, target) in runs.items():
        c = real[name]
        run_claim(Claim(c.name, c.paper, c.statement, c.paper_figure, run=_claim(value, target, name),
                        area=c.area, paper_value=c.paper_value), scale="tiny", out_root=root)
    run_claim(Claim("uds", "P", "S", "F", run=lambda ctx: 1 / 0), scale="tiny", out_root=root)
    md, page = build_report(claims_index.CLAIMS, root)
    return page


def _browse(page_path, tmp_path, width, js=True):
    from playwright.sync_api import sync_playwright

    events = {"console": [], "requests": [], "errors": []}
    with sync_playwright() as p:
        ctx = p.chromium.launch_persistent_context(
            str(tmp_path / f"profile-{width}-{js}"), executable_path=CHROMIUM, headless=True,
            args=list(CHROMIUM_FLAGS[1:]), viewport={"width": width, "height": 900},
            java_script_enabled=js)
        page = ctx.new_page()
        page.on("console", lambda m: events["console"].append((m.type, m.text)))
        page.on("pageerror", lambda e: events["errors"].append(str(e)))
        page.on("request", lambda r: events["requests"].append(r.url))
        page.goto(page_path.resolve().as_uri())
        page.wait_for_load_state("load")
        yield page, events
        ctx.close()


def test_report_in_chromium_desktop_and_phone(report, tmp_path):
    n_claims = len(claims_index.CLAIMS)
    for width in (1280, 390):
        gen = _browse(report, tmp_path, width)
        page, events = next(gen)
        widths = page.eval_on_selector_all("img", "imgs => imgs.map(i => i.naturalWidth)")
        assert len(widths) == 1 + 4 and all(w > 0 for w in widths)  # summary + 4 claim figures
        rows = page.locator("#index tbody tr")
        assert rows.count() == n_claims
        overflow = page.evaluate(
            "() => document.documentElement.scrollWidth - document.documentElement.clientWidth")
        assert overflow <= 0, f"horizontal scroll of {overflow}px at width {width}"
        shot = tmp_path / f"report-{width}.png"
        page.screenshot(path=str(shot), full_page=True)
        print(f"screenshot: {shot}")
        if width == 1280:
            def verdicts(page=page):
                return page.eval_on_selector_all(
                    "#index tbody tr td:nth-child(6)", "tds => tds.map(t => t.textContent.trim())")

            before = verdicts()
            page.locator("#index thead th:nth-child(6) button").click()
            after = verdicts()
            rank = ["reproduced", "inconclusive", "not reproduced", "error",
                    "unreadable result", "not run", "planned"]
            assert after != before and after == sorted(after, key=rank.index)
            page.locator("#index thead th:nth-child(6) button").click()
            assert verdicts() == sorted(after, key=rank.index, reverse=True)
        assert not events["errors"]
        assert not [m for m in events["console"] if m[0] == "error"]
        assert all(u.startswith(("file://", "data:")) for u in events["requests"]), \
            events["requests"]
        next(gen, None)


def test_report_reads_the_same_without_javascript(report, tmp_path):
    gen = _browse(report, tmp_path, 1280, js=False)
    page, _ = next(gen)
    assert page.locator("#index tbody tr").count() == len(claims_index.CLAIMS)
    assert page.locator("#index thead button").count() == 0  # plain headers, nothing broken
    assert page.locator("section").count() == 5
    next(gen, None)


def test_report_prints_to_pdf(report, tmp_path):
    pdf = print_pdf(report, tmp_path / "report.pdf")
    data = pdf.read_bytes()
    assert data[:5] == b"%PDF-" and len(data) > 20_000
    assert not list(tmp_path.glob(".*.tmp"))
