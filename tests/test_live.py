"""Live pages and interactive figures (issue 30), in a real Chromium that may reach nothing but
loopback addresses: every other request is aborted and reported.

A two-page test book (``tests/live_book.py``) is built once into a temporary folder with the
book's configuration and extensions, and served by the README's live command
(``scripts/live.py``): a page goes live, an edited cell runs five processes and redraws its
figure, an interrupt leaves no process of the run behind, Ctrl-C on the command leaves no
process at all; a timeline bar shows its tooltip, a figure switches variants, and plotly.js
loads only where a figure is. The last test does the same on the built book's start_join
chapter.
"""

from __future__ import annotations

import base64
import hashlib
import json
import os
import re
import signal
import subprocess
import sys
import threading
import time
import uuid
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from urllib.error import HTTPError
from urllib.parse import urlsplit
from urllib.request import urlopen

import psutil
import pytest
from bs4 import BeautifulSoup

import live_book
from conftest import build
from helpers import ROOT, is_running, processes_marked

CHROMIUM = "/usr/bin/chromium" if Path("/usr/bin/chromium").exists() else None
LIVE = [sys.executable, str(ROOT / "scripts" / "live.py"), "--port", "0"]
SCREENSHOTS = ROOT / "_build" / "screenshots"
GO_LIVE_SECONDS = 120  # a kernel's start and the page's imports, on a busy 2-core machine



def browser_only(test):
    """A test in Chromium. Marked ``book``: it needs a book built (the test book, or for the
    start_join test the real one), so the fast loop leaves it out."""
    skip = pytest.mark.skipif(CHROMIUM is None, reason="Chromium is not installed")
    return pytest.mark.book(skip(test))


# Python-side checks: no browser ----------------------------------------------------------

def test_page_imports_are_every_top_level_import_once():
    sys.path.insert(0, str(ROOT / "_ext"))
    try:
        from live_pages import page_imports
    finally:
        sys.path.pop(0)
    text = live_book.write_page_text(live_book.DEMO)
    imports = page_imports(text)
    assert imports.splitlines() == [
        "from workers.render import interactive_timeline, timeline",
        "from workers.runner import run",
        "import matplotlib.pyplot as plt",
    ]
    assert page_imports(live_book.PLAIN) is None  # not a notebook
    assert page_imports(live_book.write_page_text("# No runs\n\n```{code-cell} ipython3\n"
                                                  "1 + 1\n```\n")) is None


EVENTS = [
    {"rank": "main", "t": 100.0, "event": "start()"},
    {"rank": 0, "t": 100.1, "t_end": 100.6, "event": "all_reduce", "bytes": 4_194_304,
     "waited": 0.25},
    {"rank": 1, "t": 100.2, "t_end": 100.5, "event": "all_reduce", "queued": True, "lane": 1},
    {"rank": 1, "t": 100.5, "t_end": 100.6, "event": "backward", "lane": 0, "step": 3},
]


def test_timeline_figure_hover_colours_and_queued_work():
    from workers.render import timeline_figure

    figure = timeline_figure(EVENTS, "a title")
    by_name = {trace["name"]: trace for trace in figure.data}
    assert set(by_name) == {"start()", "all_reduce", "all_reduce (queued)", "backward"}
    colours = {by_name[name]["marker"]["color"] for name in ("start()", "all_reduce",
                                                             "backward")}
    assert len(colours) == 3  # a colour per operation
    queued = by_name["all_reduce (queued)"]
    assert queued["marker"]["pattern"]["shape"] and queued["marker"]["line"]["color"] == \
        by_name["all_reduce"]["marker"]["color"]  # hatched, in its operation's colour
    hover = by_name["all_reduce"]["hovertext"][0]
    for part in ("<b>all_reduce</b>", "rank 0", "start 0.100 s", "duration 500.00 ms",
                 "4.19 MB (4,194,304 bytes)", "waited 250.00 ms"):
        assert part in hover, hover
    assert "step: 3" in by_name["backward"]["hovertext"][0]
    assert by_name["backward"]["width"] == [0.24]  # its lane: half of the row
    assert figure.layout["yaxis"]["ticktext"][0].endswith(">main</span>")


def test_chrome_trace_has_a_process_per_rank():
    from workers.render import chrome_trace

    trace = chrome_trace(EVENTS)["traceEvents"]
    names = {e["pid"]: e["args"]["name"] for e in trace if e["name"] == "process_name"}
    assert list(names.values()) == ["main", "rank 0", "rank 1"]
    spans = [e for e in trace if e["ph"] == "X"]
    assert [(names[e["pid"]], e["name"], e["ts"], e["dur"]) for e in spans] == [
        ("rank 0", "all_reduce", 100_000.0, 500_000.0),
        ("rank 1", "all_reduce", 200_000.0, 300_000.0),
        ("rank 1", "backward", 500_000.0, 100_000.0)]
    assert spans[0]["args"] == {"bytes": 4_194_304, "waited": 0.25}
    assert spans[1]["cat"] == "queued" and spans[1]["tid"] == 1
    assert [e["name"] for e in trace if e["ph"] == "i"] == ["start()"]


def test_interactive_html_carries_its_data_a_print_image_and_the_trace():
    from workers.render import interactive_timeline

    shown = interactive_timeline({"2 ranks": EVENTS, "</script> 1": EVENTS[:2]}, "t",
                                 name="demo", label="world size")._repr_html_()
    soup = BeautifulSoup(shown, "html.parser")
    spec = json.loads(soup.select_one("script.live-figure-data").string)
    assert [v["label"] for v in spec["variants"]] == ["2 ranks", "</script> 1"]
    assert "</script> 1" not in shown  # the label cannot end the data's script early
    assert soup.select_one("img.live-figure-static")["src"].startswith("data:image/png;base64,")
    link = soup.select_one("a.live-figure-trace")
    assert link["download"] == "demo-2-ranks.trace.json"
    trace = json.loads(base64.b64decode(link["href"].split(",", 1)[1]))
    assert len([e for e in trace["traceEvents"] if e["name"] == "process_name"]) == 3
    assert "ui.perfetto.dev" in soup.select_one(".live-figure-note").get_text()


def test_lines_figure_has_a_curve_per_series_and_draws_for_print():
    from workers.render import interactive, lines_figure

    figure = lines_figure({"2 ranks": ([1, 2, 4], [1.0, 1.5, 1.8]), "4 ranks": ([1, 2], [2, 3])},
                          "bandwidth", "MB", "GB/s", log_x=True)
    assert [trace["name"] for trace in figure.data] == ["2 ranks", "4 ranks"]
    assert figure.layout["xaxis"]["type"] == "log"
    shown = interactive({"gloo": figure}, "bandwidth", "backend")._repr_html_()
    assert 'class="live-figure-static"' in shown and "live-figure-trace" not in shown


def test_fetch_thebe_checks_the_integrity_of_what_it_downloads():
    sys.path.insert(0, str(ROOT / "scripts"))
    try:
        import fetch_thebe
    finally:
        sys.path.pop(0)
    data = b"not the release"
    assert not fetch_thebe.matches_integrity(data)
    good = "sha512-" + base64.b64encode(hashlib.sha512(data).digest()).decode()
    assert fetch_thebe.matches_integrity(data, good)


def test_the_live_command_refuses_a_missing_build(tmp_path):
    completed = subprocess.run([*LIVE, "--html", str(tmp_path)], capture_output=True,
                               text=True, timeout=60)
    assert completed.returncode == 2
    assert "no built book" in completed.stderr and len(completed.stderr.splitlines()) == 1


# In the browser ---------------------------------------------------------------------------

@pytest.fixture(scope="module")
def test_book(tmp_path_factory) -> Path:
    if CHROMIUM is None:
        pytest.skip("Chromium is not installed")
    folder = tmp_path_factory.mktemp("live_book")
    source = live_book.write(folder / "source")
    started = time.time()
    completed = build(source, folder / "out")
    assert completed.returncode == 0, (completed.stdout + completed.stderr)[-4000:]
    print(f"test book built in {time.time() - started:.0f} s")
    return folder / "out" / "_build" / "html"


@dataclass
class Live:
    base: str  # http://127.0.0.1:PORT
    address: str  # what the command printed for the reader to open: it carries the key
    marker: str  # NAME=VALUE in the environment of every process the command starts
    process: subprocess.Popen


@contextmanager
def live_command(html: Path):
    """``scripts/live.py`` serving ``html``, stopped with Ctrl-C (SIGINT) at the end."""
    marker = f"BOOK_LIVE_TEST={uuid.uuid4().hex}"
    env = {**os.environ, marker.split("=")[0]: marker.split("=")[1]}
    process = subprocess.Popen([*LIVE, "--html", str(html)], stdout=subprocess.PIPE,
                               stderr=subprocess.STDOUT, text=True, env=env)
    try:
        line = process.stdout.readline()
        match = re.search(r"((http://127\.0\.0\.1:\d+)/\S*#live-token=\S+)", line)
        assert match, line + process.stdout.read()
        # Keep reading what the command and the Jupyter server print: a pipe nobody reads
        # fills at 64 KiB, and the server would then block in its next log line.
        threading.Thread(target=process.stdout.read, daemon=True).start()
        yield Live(match.group(2), match.group(1), marker, process)
    finally:
        if process.poll() is None:
            process.send_signal(signal.SIGINT)
            process.wait(timeout=60)


@pytest.fixture(scope="module")
def live(test_book):
    with live_command(test_book) as started:
        yield started


@pytest.fixture(scope="module")
def chromium():
    from playwright.sync_api import sync_playwright

    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=CHROMIUM, args=["--no-sandbox"])
        yield browser
        browser.close()


def is_loopback(url: str) -> bool:
    parts = urlsplit(url)
    return parts.scheme in ("data", "blob", "file") or parts.hostname in ("127.0.0.1", "localhost",
                                                                   "::1")


def guarded_page(context):
    """A page whose requests to anything but loopback are aborted, and listed in
    ``page.outside``; ``page.requested`` lists every URL it asked for."""
    context.set_default_timeout(60_000)  # plotly.js is 4.8 MB to parse on a busy machine
    page = context.new_page()
    page.outside, page.requested, page.errors = [], [], []

    def guard(route):
        page.requested.append(route.request.url)
        if is_loopback(route.request.url):
            route.continue_()
        else:
            page.outside.append(route.request.url)
            route.abort()

    page.route("**/*", guard)
    page.on("pageerror", lambda error: page.errors.append(str(error)))
    return page


@pytest.fixture
def browser_page(chromium):
    context = chromium.new_context(viewport={"width": 1300, "height": 1000})
    yield guarded_page(context)
    context.close()


@pytest.fixture(scope="module")
def live_page(live, chromium):
    """The demo page, gone live once (one kernel) for the tests that run its cells."""
    context = chromium.new_context(viewport={"width": 1300, "height": 1000})
    page = guarded_page(context)
    started = time.time()
    go_live(page, live, "book/demo.html")
    print(f"live after {time.time() - started:.1f} s")
    yield page
    context.close()


def go_live(page, live: Live, path: str) -> None:
    """Open the address the command printed (the browser keeps its key), then ``path``,
    and turn it live."""
    page.goto(live.address)
    page.goto(f"{live.base}/{path}")
    page.locator(".live-start").click()
    page.wait_for_selector(".live-bar.live-on", timeout=GO_LIVE_SECONDS * 1000)


def cell_running(page, pattern: str) -> int:
    """The index of the live cell whose code matches ``pattern`` (found by what it runs, not
    by its position)."""
    index = page.evaluate(
        """pattern => Array.from(document.querySelectorAll('.live-cell .CodeMirror'))
             .findIndex(el => new RegExp(pattern).test(el.CodeMirror.getValue()))""", pattern)
    assert index >= 0, f"no live cell matches {pattern}"
    return index


def edit_cell(page, index: int, pattern: str, replacement: str) -> str:
    """Edit a cell's code as a reader would in its editor; returns the new code."""
    return page.evaluate(
        """([i, pattern, replacement]) => {
             const cm = document.querySelectorAll('.live-cell .CodeMirror')[i].CodeMirror;
             cm.setValue(cm.getValue().replace(new RegExp(pattern), replacement));
             return cm.getValue(); }""", [index, pattern, replacement])


def run_cell(page, index: int):
    cell = page.locator(".live-cell").nth(index)
    fold = cell.locator("details:not([open]) > summary")
    if fold.count():  # a folded input (hide-input): unfold it, as a reader would
        fold.first.click()
    cell.locator(".thebe-run-button").click()
    return cell.locator("[data-live-output]")


def run_processes(marker: str) -> list[psutil.Process]:
    """The processes of the runs a kernel started: each supervisor and its descendants."""
    found = []
    for process in processes_marked(marker):
        try:
            if "workers.supervise" in " ".join(process.cmdline()):
                found += [process, *process.children(recursive=True)]
        except psutil.NoSuchProcess:
            pass
    return found


def wait_until(condition, timeout: float, what: str):
    deadline = time.time() + timeout
    while time.time() < deadline:
        value = condition()
        if value:
            return value
        time.sleep(0.2)
    raise AssertionError(f"not within {timeout:g} s: {what}")


PROCESSES = r'("--processes",\s*")3"'


@browser_only
def test_an_edited_cell_runs_five_processes_and_redraws_its_figure(live_page):
    page = live_page
    index = cell_running(page, r'run\("workers\.start_join", "join"')
    assert '"--processes", "5"' in edit_cell(page, index, PROCESSES, '$15"')
    output = run_cell(page, index)
    output.locator(".rank-output-head:has-text('--processes 5')").wait_for(timeout=60_000)
    sources = set(output.locator(".rank-line").evaluate_all(
        "lines => lines.map(l => l.dataset.source)"))
    assert {f"rank {r}" for r in range(5)} <= sources, sources
    # the figure's cell, run again, draws the five children
    figure = run_cell(page, cell_running(page, r"interactive_timeline\("))
    figure.locator(".live-figure-drawn").wait_for(timeout=60_000)
    wait_until(lambda: figure.locator(".ytick").count() == 6, 30, "six rows: main and 5 ranks")
    SCREENSHOTS.mkdir(parents=True, exist_ok=True)
    page.screenshot(path=str(SCREENSHOTS / "live-demo.png"), full_page=True)
    assert page.outside == [] and page.errors == []


@browser_only
def test_interrupt_stops_every_process_of_the_running_cell(live, live_page):
    marker = live.marker
    page = live_page
    index = cell_running(page, r'run\("workers\.start_join", "join"')
    edit_cell(page, index, r'"--step", "[\d.]+"', '"--step", "30"')
    output = run_cell(page, index)
    started = wait_until(lambda: len(run_processes(marker)) >= 4 and run_processes(marker), 60,
                         "the run's supervisor, its main process and two children")
    page.locator(".live-interrupt").click()
    output.locator(":text('KeyboardInterrupt')").first.wait_for(timeout=30_000)
    wait_until(lambda: not any(is_running(p.pid) for p in started), 15,
               "every process of the interrupted run gone")
    assert page.outside == []


@pytest.fixture(scope="module")
def figure_page(live, chromium):
    """The demo page, read (not live), for the tests of its interactive figure."""
    context = chromium.new_context(viewport={"width": 1300, "height": 1000})
    page = guarded_page(context)
    page.goto(f"{live.base}/book/demo.html")
    yield page
    context.close()


@browser_only
def test_a_timeline_bar_shows_its_tooltip(figure_page):
    page = figure_page
    figure = page.locator(".live-figure-drawn").first
    figure.scroll_into_view_if_needed()
    bars = figure.locator(".bars path")
    assert bars.count() >= 4  # the parent's joins and the three children's work
    bars.last.hover(force=True)
    text = wait_until(lambda: figure.locator(".hoverlayer").text_content(), 10, "a tooltip")
    assert re.search(r"child working.*rank \d.*start \d+\.\d+ s.*duration", text), text
    assert page.outside == [] and page.errors == []


@browser_only
def test_switching_a_variant_changes_the_figure_and_its_trace(figure_page):
    page = figure_page
    figure = page.locator(".live-figure-drawn").first

    def rows():
        return figure.locator(".ytick text").all_text_contents()

    def trace_processes():
        href = figure.locator("a.live-figure-trace").get_attribute("href")
        trace = json.loads(base64.b64decode(href.split(",", 1)[1]))
        return [e["args"]["name"] for e in trace["traceEvents"] if e["name"] == "process_name"]

    assert rows() == ["main", "rank 0", "rank 1", "rank 2"]
    assert trace_processes() == ["main", "rank 0", "rank 1", "rank 2"]
    figure.locator(".live-figure-tabs button", has_text="children").click()
    wait_until(lambda: rows() == ["rank 0", "rank 1", "rank 2"], 10, "the parent's row gone")
    assert trace_processes() == ["rank 0", "rank 1", "rank 2"]
    assert figure.get_attribute("data-variant") == "children"


@browser_only
def test_plotly_loads_only_where_a_figure_is_and_nothing_from_outside(live, browser_page):
    base = live.base
    page = browser_page
    for name, has_figure in (("demo", True), ("plain", False)):
        page.requested.clear()
        page.goto(f"{base}/book/{name}.html", wait_until="networkidle")
        plotly = [url for url in page.requested if "plotly" in url]
        assert bool(plotly) == has_figure, (name, plotly)
        assert page.locator(".live-bar").count() == has_figure  # no code, no live bar
    assert page.outside == [] and page.errors == []


@browser_only
def test_a_page_not_served_by_the_live_command_says_how_to_start_it(test_book, browser_page):
    page = browser_page
    page.goto((test_book / "book" / "demo.html").as_uri())
    page.locator(".live-start").click()
    note = page.locator(".live-not-served")
    note.wait_for(state="visible", timeout=10_000)
    assert "scripts/live.py" in note.inner_text()


@browser_only
def test_the_key_travels_only_in_the_printed_address(live, browser_page):
    """The book's server tells where the Jupyter server is, never its token: a page opened
    without the printed address says what to open, and the Jupyter server refuses it."""
    token = live.address.split("#live-token=")[1]
    with urlopen(f"{live.base}/_live/server.json") as response:
        served = response.read().decode()
    assert token not in served and json.loads(served)["path"] == "book"
    jupyter = json.loads(served)["url"]
    with pytest.raises(HTTPError) as refused:
        urlopen(f"{jupyter}api/sessions")
    assert refused.value.code == 403
    page = browser_page
    page.goto(f"{live.base}/book/demo.html")
    page.locator(".live-start").click()
    status = page.locator(".live-status")
    wait_until(lambda: "printed" in status.inner_text(), 30, "the page asks for the address")
    assert page.locator(".thebe-cell").count() == 0


@browser_only
def test_ctrl_c_on_the_live_command_leaves_no_process(live, live_page):
    """Last of the tests that use the module's live command: it stops it while a cell runs."""
    marker, process = live.marker, live.process
    page = live_page
    index = cell_running(page, r'run\("workers\.start_join", "join"')
    edit_cell(page, index, r'"--step", "[\d.]+"', '"--step", "30"')
    run_cell(page, index)
    wait_until(lambda: len(run_processes(marker)) >= 4, 60, "a run under way")
    assert len(processes_marked(marker)) >= 6  # and the server, its kernel, ...
    process.send_signal(signal.SIGINT)
    assert process.wait(timeout=60) == 0
    wait_until(lambda: not processes_marked(marker), 10, "no process of the live command left")


@browser_only
def test_the_start_join_chapter_runs_live_with_five_processes(built_book, browser_page):
    """The chapter keeps a visible cell that runs ``run("workers.start_join", "join",
    "--processes", "3", ...)``; the reader makes it 5."""
    page = browser_page
    with live_command(built_book.html) as started:
        go_live(page, started, "book/start_join.html")
        index = cell_running(page, r'run\("workers\.start_join", "join", "--processes", "3"')
        edit_cell(page, index, PROCESSES, '$15"')
        output = run_cell(page, index)
        output.locator(".rank-output-head:has-text('--processes 5')").wait_for(timeout=60_000)
        sources = set(output.locator(".rank-line").evaluate_all(
            "lines => lines.map(l => l.dataset.source)"))
        assert {f"rank {r}" for r in range(5)} <= sources, sources
    assert page.outside == [] and page.errors == []
