"""Write down what a build did, so the tests can check this build instead of making another.

At the end of every build, ``build-record.json`` is written next to the HTML (in ``_build/``):
when the build started, how many warnings it had, and for every page that executed, how long
it ran and whether it succeeded. The test suite reads it to decide whether ``_build`` is a
complete build of the current sources (then it inspects it) or must be built again.
"""

from __future__ import annotations

import json
import time
from pathlib import Path

RECORD = "build-record.json"


def note_start(app) -> None:
    app.book_build_started = time.time()


def write_record(app, exception) -> None:
    from myst_nb.sphinx_ import NbMetadataCollector

    executed = {}
    for docname, data in NbMetadataCollector.get_doc_data(app.env).items():
        run = data.get("exec_data")
        if run:
            executed[docname] = {key: run.get(key) for key in ("runtime", "succeeded", "error")}
    record = {
        "started": getattr(app, "book_build_started", None),
        "finished": time.time(),
        "error": None if exception is None else repr(exception),
        "warnings": getattr(app, "_warncount", None),  # what -W turns into a failed build
        "executed": executed,
    }
    path = Path(app.outdir).parent / RECORD
    path.write_text(json.dumps(record, indent=1) + "\n")


def setup(app):
    app.connect("builder-inited", note_start)
    app.connect("build-finished", write_record)
    return {"parallel_read_safe": True, "parallel_write_safe": True}
