"""A two-page book for the live-page and interactive-figure tests, built into a temporary
folder with the book's own configuration and extensions (the chapters are not touched).

``demo``: a run cell, an interactive timeline with two variants (every process, or the
children only) whose code is folded, and a static matplotlib timeline whose code is removed.
``plain``: a page with no code and no figure, where neither Thebe's bar nor plotly.js loads.
"""

from __future__ import annotations

import shutil
from pathlib import Path

from helpers import ROOT

HEADER = (ROOT / "book" / "start_join.md").read_text().split("---\n")[1]


def cell(source: str, tags: str = "") -> str:
    return "```{code-cell} ipython3\n" + (f":tags: [{tags}]\n\n" if tags else "") + \
        source.strip() + "\n```\n\n"


DEMO = (
    "# Live demo\n\nA page of the test book.\n\n## Run it\n\n"
    + cell('from workers.render import interactive_timeline, timeline\n'
           'from workers.runner import run\n\n'
           'joined = run("workers.start_join", "join", "--processes", "3", "--step", "0.1")')
    + "The timeline, and the same without the parent's row:\n\n"
    + cell('children = [event for event in joined.events if event["rank"] != "main"]\n'
           'interactive_timeline({"every process": joined.events, "children": children},\n'
           '                     "start() then join()", name="join", label="rows")',
           "hide-input")
    + cell('import matplotlib.pyplot as plt\n\ntimeline(joined.events, "the same, static")\n'
           'plt.show()', "remove-input")
)
PLAIN = "# Plain page\n\nNo code and no interactive figure here.\n"


def write_page_text(body: str) -> str:
    return f"---\n{HEADER}---\n\n{body}"


def write(source: Path) -> Path:
    (source / "book").mkdir(parents=True)
    shutil.copy(ROOT / "_config.yml", source / "_config.yml")
    shutil.copytree(ROOT / "_static", source / "_static")
    shutil.copytree(ROOT / "_ext", source / "_ext",
                    ignore=shutil.ignore_patterns("__pycache__"))
    if (ROOT / "_vendor").is_dir():
        (source / "_vendor").symlink_to(ROOT / "_vendor")
    (source / "_toc.yml").write_text(
        "format: jb-book\nroot: book/demo\nchapters:\n  - file: book/plain\n")
    (source / "book" / "demo.md").write_text(write_page_text(DEMO))
    (source / "book" / "plain.md").write_text(PLAIN)
    return source
