"""Live pages and interactive figures: what the build adds to a page, and the assets it copies.

* Every notebook page whose code calls ``run(...)`` gets a bar under its title ("Run this page
  live"). ``_live/live.js`` turns the page's visible code cells into editors that run against
  the Jupyter server that ``scripts/live.py`` starts on the reader's machine (the page learns
  its address from ``_live/server.json``, which only that command serves, and its token from
  the address that command prints), with an interrupt button. Before the first cell runs,
  the kernel runs the page's imports (every top-level ``import`` of every code cell, hidden
  ones included), so any run cell can be run first. Outside that command the bar says in
  one line how to start it.
* Thebe, fetched by ``scripts/fetch_thebe.py`` into ``_vendor/thebe``, is copied into the
  site as ``_thebe/`` and loaded from there on the first click: nothing from outside the site.
* A page with an interactive figure (``workers.render.interactive_timeline`` and friends)
  loads plotly.js, copied from the plotly package into ``_plotly/``, and ``_live/figures.js``;
  other pages load neither.

None of this goes through ``_static``, whose every script Jupyter Book 1 adds to every page.
sphinx-thebe's own scripts (which would fetch Thebe from a CDN and start a Binder) are dropped.
"""

from __future__ import annotations

import ast
import html
import importlib.util
import re
import shutil
from pathlib import Path

ASSETS = Path(__file__).resolve().parent / "live"
RUN_CALL = re.compile(r"(?<![\w.])run\(")
CODE_CELL = re.compile(r"^```\{code-cell\}[^\n]*\n(.*?)^```[ \t]*$", re.MULTILINE | re.DOTALL)
NOT_SERVED = ("Live cells need the live command: in your clone, after the README's set-up, run "
              "<code>.venv/bin/python scripts/live.py</code> and open the address it prints.")


def page_imports(text: str) -> str | None:
    """The page's top-level imports, in order and once each, if its code calls ``run(...)``;
    None for a page that is not a notebook or runs nothing."""
    if not text.startswith("---\njupytext:"):
        return None
    cells = [_cell_code(block) for block in CODE_CELL.findall(text)]
    if not any(RUN_CALL.search(source) for source in cells):
        return None
    imports: list[str] = []
    for source in cells:
        try:
            tree = ast.parse(source)
        except SyntaxError:  # IPython magics: not plain Python
            continue
        for node in tree.body:
            if isinstance(node, (ast.Import, ast.ImportFrom)):
                statement = ast.get_source_segment(source, node)
                if statement not in imports:
                    imports.append(statement)
    return "\n".join(imports)


def _cell_code(block: str) -> str:
    """A MyST code cell's code: without its ``:key: value`` options or ``---`` YAML block.
    (A regular expression: reading every page with jupytext would cost the build more.)"""
    lines = block.splitlines()
    if lines and lines[0].strip() == "---":
        end = next((i for i, line in enumerate(lines[1:], 1) if line.strip() == "---"), 0)
        lines = lines[end + 1:]
    while lines and lines[0].startswith(":"):
        lines = lines[1:]
    return "\n".join(lines).strip("\n")


def add_live_bar(app, docname: str, source: list[str]) -> None:
    text = source[0]
    imports = page_imports(text)
    if imports is None:
        return
    bar = (
        "\n```{raw} html\n"
        f'<div class="live-bar" data-preamble="{html.escape(imports)}">'
        '<button type="button" class="live-start">Run this page live</button>'
        '<button type="button" class="live-interrupt" disabled '
        'title="stop the running cell, and every process it started">Interrupt</button>'
        '<span class="live-status">Edit the code cells and run them on your own machine.'
        f'</span><span class="live-not-served" hidden>{NOT_SERVED}</span></div>\n```\n\n'
    )
    at = text.find("\n## ")  # before the first section: under the title and its boxes
    if at < 0:
        at = text.index("\n", text.index("\n# ") + 1)
    source[0] = text[: at + 1] + bar + text[at + 1 :]


def add_page_scripts(app, pagename, templatename, context, doctree) -> None:
    # (Sphinx's add_js_file would put these under _static/, where they are not.)
    from sphinx.builders.html._assets import _CascadingStyleSheet, _JavaScript

    scripts = [
        script for script in context.get("script_files", [])
        if "sphinx-thebe" not in str(getattr(script, "filename", script) or "")
        and "THEBE_JS_URL" not in str(getattr(script, "attributes", {}).get("body", ""))
    ]
    styles = list(context.get("css_files", []))
    body = context.get("body", "")
    # on every page, as the live command's address may open any of them (it takes the key)
    scripts.append(_JavaScript("_live/live.js", priority=800, defer="defer"))
    if 'class="live-bar"' in body:
        styles.append(_CascadingStyleSheet("_live/live.css", priority=800))
    if 'class="live-figure"' in body or 'class="live-model"' in body:
        styles.append(_CascadingStyleSheet("_live/figures.css", priority=800))
        scripts.append(_JavaScript("_plotly/plotly.min.js", priority=800))
        scripts.append(_JavaScript("_live/figures.js", priority=800, defer="defer"))
    context["script_files"], context["css_files"] = scripts, styles


def plotly_js() -> Path | None:
    spec = importlib.util.find_spec("plotly")
    if spec is None or not spec.submodule_search_locations:
        return None
    path = Path(spec.submodule_search_locations[0]) / "package_data" / "plotly.min.js"
    return path if path.is_file() else None


def copy_assets(app) -> None:
    """Before the pages are written, so that their links to these files carry checksums."""
    if app.builder.format != "html":
        return
    out = Path(app.outdir)
    shutil.copytree(ASSETS, out / "_live", dirs_exist_ok=True)
    thebe = Path(app.srcdir) / "_vendor" / "thebe"
    if not thebe.is_dir():  # a single page's build: its source folder is book/
        thebe = Path(__file__).resolve().parent.parent / "_vendor" / "thebe"
    if (thebe / "index.js").is_file():
        _copy_changed(thebe, out / "_thebe")
    plotly = plotly_js()
    if plotly is not None:
        (out / "_plotly").mkdir(exist_ok=True)
        _copy_changed(plotly, out / "_plotly" / "plotly.min.js")


def _copy_changed(source: Path, target: Path) -> None:
    """Copy a file or a folder, skipping files already there with the same size."""
    files = [source] if source.is_file() else [p for p in source.rglob("*") if p.is_file()]
    for file in files:
        to = target if source.is_file() else target / file.relative_to(source)
        if not to.is_file() or to.stat().st_size != file.stat().st_size:
            to.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(file, to)


def setup(app):
    app.connect("source-read", add_live_bar, priority=600)  # after the download box
    app.connect("html-page-context", add_page_scripts, priority=800)
    app.connect("builder-inited", copy_assets)
    return {"parallel_read_safe": True, "parallel_write_safe": True}
