"""The built site as a reader meets it: every page in a real Chromium (Debian's package, driven
by Playwright) that may reach nothing outside this machine, internal links and anchors, search,
dark mode, the notebook downloads, and screenshots of the landing page and one chapter in light
and dark under _build/screenshots. (Live pages and interactive figures: tests/test_live.py.)"""

from __future__ import annotations

import functools
import http.server
import shutil
import threading
from pathlib import Path
from urllib.parse import unquote, urlsplit

import jupytext
import nbformat
import pytest
from bs4 import BeautifulSoup
from nbclient import NotebookClient

from helpers import ROOT, chapters

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
SCREENSHOTS = ROOT / "_build" / "screenshots"

pytestmark = pytest.mark.skipif(CHROMIUM is None,
                                reason="Chromium is not installed (.ci/run installs it)")


@pytest.fixture(scope="module")
def site(built_book):
    """The built HTML, served over HTTP on a free loopback port, as a reader's browser gets it."""
    html_dir = built_book.html
    handler = functools.partial(QuietHandler, directory=str(html_dir))
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield html_dir, f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()


class QuietHandler(http.server.SimpleHTTPRequestHandler):
    def log_message(self, *args) -> None:  # no request log in the test output
        pass


@pytest.fixture(scope="module")
def browser():
    from playwright.sync_api import sync_playwright

    with sync_playwright() as playwright:
        chromium = playwright.chromium.launch(
            executable_path=CHROMIUM, args=["--no-sandbox"]
        )
        yield chromium
        chromium.close()


def outside_aborted(page, found: list[str]) -> None:
    """Abort every request to anything but this machine, and report it: the site must work
    offline, with everything it needs served by itself."""
    def guard(route):
        parts = urlsplit(route.request.url)
        if parts.scheme in ("data", "blob") or parts.hostname in ("127.0.0.1", "localhost"):
            route.continue_()
        else:
            found.append(f"request outside the site: {route.request.url}")
            route.abort()

    page.route("**/*", guard)


def problems_on(browser, url: str, wait_for_images: bool = True) -> list[str]:
    """Console errors, requests outside the site, failed requests and broken images of one
    page, as readable lines."""
    page = browser.new_page()
    found = []
    outside_aborted(page, found)
    page.on(
        "console", lambda m: m.type == "error" and found.append(f"console: {m.text}")
    )
    page.on("pageerror", lambda error: found.append(f"script error: {error}"))
    page.on("requestfailed", lambda r: found.append(f"failed request: {r.url}"))
    page.on(
        "response",
        lambda r: r.status >= 400 and found.append(f"HTTP {r.status}: {r.url}"),
    )
    page.goto(url, wait_until="load", timeout=30_000)
    page.wait_for_load_state("networkidle")  # index.html redirects to the landing page
    broken = page.eval_on_selector_all(
        "img",
        "images => images.filter(i => !i.complete || i.naturalWidth === 0).map(i => i.src)",
    )
    found += [f"broken image: {src}" for src in broken]
    page.close()
    return found


def pages(html_dir: Path) -> list[Path]:
    return sorted(p for p in html_dir.rglob("*.html") if "_static" not in p.parts)


def test_every_page_loads_without_errors(site, browser):
    html_dir, base = site
    assert len(pages(html_dir)) >= 12
    problems = {}
    for path in pages(html_dir):
        found = problems_on(browser, f"{base}/{path.relative_to(html_dir)}")
        if found:
            problems[str(path.relative_to(html_dir))] = found
    assert problems == {}


def test_the_page_check_catches_a_console_error_and_a_broken_image(site, browser):
    """The check above can fail: a planted page with both faults is reported for both."""
    html_dir, base = site
    planted = html_dir / "planted-fault.html"
    planted.write_text("<html><body><img src='no-such-image.png'>"
                       "<script>console.error('planted')</script></body></html>")
    try:
        found = problems_on(browser, f"{base}/planted-fault.html")
    finally:
        planted.unlink()
    assert any("console: planted" in line for line in found), found
    assert any(
        "broken image" in line and "no-such-image.png" in line for line in found
    ), found


def test_rank_output_blocks_render(site, browser):
    _, base = site
    page = browser.new_page()
    page.goto(f"{base}/book/collectives.html")
    blocks = page.locator(".rank-output")
    assert blocks.count() >= 4
    box = blocks.first.bounding_box()
    assert box and box["height"] > 40 and box["width"] > 300
    assert page.locator(".rank-output .rank-line").count() > 10
    page.close()


def test_search_finds_all_reduce_in_the_collectives_chapter(site, browser):
    _, base = site
    page = browser.new_page()
    page.goto(f"{base}/search.html?q=all_reduce")
    page.wait_for_selector("ul.search li a", timeout=30_000)
    hrefs = page.eval_on_selector_all(
        "ul.search li a", "links => links.map(a => a.href)"
    )
    page.close()
    assert any("collectives.html" in href for href in hrefs), hrefs


def test_the_cost_model_recomputes_each_collective_from_typed_parameters(site, browser):
    """The cost-model page's explorer: a link typed in (5 µs, 25 GB/s, 64 ranks) gives every
    collective the time the worker's terms give, and the fit's button brings the page's
    own values back."""
    from workers.cost_model import terms

    _, base = site
    page = browser.new_page()
    errors = []
    page.on("pageerror", lambda error: errors.append(str(error)))
    page.goto(f"{base}/book/cost_model.html", wait_until="load")
    box = page.locator(".live-model.live-figure-drawn")
    box.wait_for(timeout=30_000)
    fitted = [box.locator(f"input[name={n}]").input_value() for n in ("alpha", "beta")]
    for name, value in (("alpha", "5"), ("beta", "25"), ("ranks", "64"),
                        ("size", "8000000")):
        box.locator(f"input[name={name}]").fill(value)
    page.wait_for_function("document.querySelector('.live-model').dataset.ranks === '64'")
    traces = page.evaluate("""() => document.querySelector('.live-model .live-model-plot')
        .data.filter(t => t.mode === 'lines').map(t => [t.name, t.x, t.y])""")
    assert [name for name, _, _ in traces] == ["all_reduce", "reduce_scatter", "all_gather",
                                               "broadcast"]
    for name, xs, ys in traces:
        steps, share = terms(name, 64)
        at = xs.index(8_000_000)
        assert ys[at] == pytest.approx((steps * 5e-6 + share * 8e6 / 25e9) * 1e6), name
    readout = box.locator(".live-model-readout").text_content()
    assert "all_reduce 1,260 µs (630 of latency, 630 of bytes" in readout, readout
    box.locator("button[data-preset]").click()
    assert [box.locator(f"input[name={n}]").input_value()
            for n in ("alpha", "beta")] == fitted
    assert errors == []
    page.close()


def theme(page) -> str:
    return page.evaluate("document.documentElement.dataset.theme")


def test_dark_mode_toggle_switches_the_theme(site, browser):
    _, base = site
    page = browser.new_page(color_scheme="light")
    page.goto(f"{base}/book/intro.html")
    assert theme(page) == "light"
    seen = []
    for _ in range(3):  # the button cycles light, dark, auto
        page.locator(".theme-switch-button").first.click()
        seen.append(theme(page))
    page.close()
    assert "dark" in seen


@pytest.mark.parametrize("name", ["intro", "collectives"])
@pytest.mark.parametrize("scheme", ["light", "dark"])
def test_screenshots(site, browser, name, scheme):
    _, base = site
    SCREENSHOTS.mkdir(parents=True, exist_ok=True)
    page = browser.new_page(
        viewport={"width": 1300, "height": 1000}, color_scheme=scheme
    )
    page.goto(f"{base}/book/{name}.html")
    page.evaluate(f"document.documentElement.dataset.theme = '{scheme}'")
    path = SCREENSHOTS / f"{name}-{scheme}.png"
    page.screenshot(path=str(path), full_page=False)
    background = page.evaluate("getComputedStyle(document.body).backgroundColor")
    page.close()
    assert path.stat().st_size > 10_000
    # the dark theme really is dark, the light one light
    red = int(background.split("(")[1].split(",")[0])
    assert (red < 100) if scheme == "dark" else (red > 200), background


def test_no_broken_internal_links_or_anchors(site):
    html_dir, _ = site
    ids: dict[Path, set[str]] = {}

    def anchors(path: Path) -> set[str]:
        if path not in ids:
            soup = BeautifulSoup(path.read_text(), "html.parser")
            ids[path] = {t["id"] for t in soup.select("[id]")} | {
                t["name"] for t in soup.select("a[name]")
            }
        return ids[path]

    broken = []
    for path in pages(html_dir):
        soup = BeautifulSoup(path.read_text(), "html.parser")
        for link in soup.select("a[href]"):
            href = link["href"]
            parts = urlsplit(href)
            if parts.scheme or href.startswith(("mailto:", "javascript:")):
                continue
            target = (
                path
                if not parts.path
                else (path.parent / unquote(parts.path)).resolve()
            )
            if target.is_dir():
                target = target / "index.html"
            if not target.exists():
                broken.append(f"{path.name}: {href} (no such file)")
            elif (
                parts.fragment
                and target.suffix == ".html"
                and parts.fragment not in anchors(target)
            ):
                broken.append(f"{path.name}: {href} (no such anchor)")
    assert broken == []


def test_every_chapter_offers_its_notebook_and_worker(site):
    html_dir, _ = site
    assert len(chapters()) >= 9
    for name in chapters():
        soup = BeautifulSoup((html_dir / "book" / f"{name}.html").read_text(), "html.parser")
        links = [a["href"] for a in soup.select(".chapter-downloads a")]
        assert any(href.endswith(f"{name}.ipynb") for href in links), name
        assert any(href.endswith(f"workers/{name}.py") or href.endswith(f"{name}.py")
                   for href in links), name
        for href in links:
            assert (html_dir / "book" / unquote(href)).resolve().is_file(), href


def test_a_downloaded_notebook_is_the_chapter_and_runs_from_another_folder(site, tmp_path):
    """The download holds the chapter's cells, without outputs, and its code finds the book's
    modules from any folder. (Its runs are the chapter's own, executed once by the build.)"""
    html_dir, _ = site
    downloaded = nbformat.read(next(html_dir.glob("_downloads/*/start_join.ipynb")), as_version=4)
    source = jupytext.read(ROOT / "book" / "start_join.md")
    code = [cell.source for cell in downloaded.cells if cell.cell_type == "code"]
    assert code == [cell.source for cell in source.cells if cell.cell_type == "code"]
    assert not any(cell.get("outputs") for cell in downloaded.cells if cell.cell_type == "code")
    imports = "\n".join(line for line in code[0].splitlines()
                        if line.startswith(("import ", "from ")))
    notebook = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(
        imports + "\nprint(run.__module__, timeline.__module__)")])
    client = NotebookClient(notebook, timeout=120, kernel_name="python3",
                            resources={"metadata": {"path": str(tmp_path)}})
    client.execute()  # raises CellExecutionError if an import fails
    assert "workers.runner workers.render" in notebook.cells[0].outputs[0]["text"]


def test_plotly_only_where_a_figure_is_and_a_live_bar_on_every_chapter(site):
    """plotly.js (4.8 MB) loads only on pages that draw an interactive figure; every chapter
    can go live, with Thebe served by the site itself (scripts/live.py, _ext/live_pages.py)."""
    html_dir, _ = site
    assert (html_dir / "_thebe" / "index.js").is_file(), "run scripts/fetch_thebe.py"
    assert (html_dir / "_plotly" / "plotly.min.js").is_file()
    for path in pages(html_dir):
        soup = BeautifulSoup(path.read_text(), "html.parser")
        scripts = [tag.get("src", "") for tag in soup.select("script")]
        assert any("_plotly/plotly.min.js" in src for src in scripts) == bool(
            soup.select(".live-figure, .live-model")), path.name
        assert not any("thebe" in src and "_thebe" not in src for src in scripts), path.name
    for name in chapters():
        soup = BeautifulSoup((html_dir / "book" / f"{name}.html").read_text(), "html.parser")
        assert soup.select(".live-bar button.live-start"), name


def test_the_site_root_serves_a_favicon(site):
    """The root index.html redirects, and a browser asks for /favicon.ico there."""
    from urllib.request import urlopen

    _, base = site
    with urlopen(f"{base}/favicon.ico") as response:
        assert response.status == 200 and response.read(4) == b"\x00\x00\x01\x00"  # ICO


TALLEST = 16_000  # px in a 1300-px-wide window, folds closed
TALLEST_OF = {"failures": 14_000}  # the third reading's bar for the others: 16,000 px


def test_no_chapter_is_too_tall(site, browser):
    """A chapter a reader can get through: the lessons, with the logs, the plumbing and the
    long outputs folded."""
    _, base = site
    page = browser.new_page(viewport={"width": 1300, "height": 1000})
    too_tall = {}
    for name in chapters():
        page.goto(f"{base}/book/{name}.html", wait_until="load")
        height = page.evaluate("document.documentElement.scrollHeight")
        if height > TALLEST_OF.get(name, TALLEST):
            too_tall[name] = height
    page.close()
    assert too_tall == {}
