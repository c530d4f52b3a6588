"""Every chapter as a notebook to download, and a link to the worker module it runs.

At the start of a build each chapter's MyST source (``book/<name>.md``) is converted with
jupytext into ``_build/notebooks/<name>.ipynb``: the same cells, no outputs. Under each chapter's
title the page then offers that notebook and the source of ``workers/<name>.py``, through
Sphinx's ``download`` role, which copies both files into the built site (and fails the build
if one is missing).
"""

from __future__ import annotations

import os
from pathlib import Path


def chapters(app) -> list[Path]:
    """The book's MyST notebooks that have a worker module of the same name."""
    book = Path(app.srcdir) / "book"
    workers = Path(app.srcdir) / "workers"
    if not book.is_dir():  # a build of a single page: no chapters to offer
        return []
    return sorted(
        path
        for path in book.glob("*.md")
        if path.read_text().startswith("---\njupytext:")
        and (workers / path.name).with_suffix(".py").exists()
    )


def notebooks_folder(app) -> Path:
    return Path(app.outdir).parent / "notebooks"  # _build/notebooks, beside _build/html


def write_notebooks(app) -> None:
    import jupytext

    sources = chapters(app)
    if not sources:
        return
    folder = notebooks_folder(app)
    folder.mkdir(parents=True, exist_ok=True)
    for source in sources:
        notebook = jupytext.read(source)
        jupytext.write(notebook, folder / f"{source.stem}.ipynb")


def add_download_links(app, docname: str, source: list[str]) -> None:
    name = docname.removeprefix("book/")
    if not any(path.stem == name for path in chapters(app)) or docname == name:
        return
    notebook = os.path.relpath(notebooks_folder(app) / f"{name}.ipynb", Path(app.srcdir) / "book")
    links = (
        "\n:::{admonition} Run this chapter yourself\n:class: tip chapter-downloads\n"
        f"{{download}}`Download it as a notebook <{notebook}>` and run it from the "
        "book's source (the first page, under Running it yourself, offers it; then the "
        "README's set-up command), or read the code it runs: "
        f"{{download}}`workers/{name}.py <../workers/{name}.py>`.\n:::\n"
    )
    text = source[0]
    title_end = text.index("\n", text.index("\n# ") + 1)  # the line after the "# Title"
    source[0] = text[: title_end + 1] + links + text[title_end + 1 :]


def setup(app):
    app.connect("builder-inited", write_notebooks)
    app.connect("source-read", add_download_links)
    return {"parallel_read_safe": True, "parallel_write_safe": True}
