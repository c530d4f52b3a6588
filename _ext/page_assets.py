"""Only the scripts a page needs, each once: no console errors, no requests that fail offline.

A browser also asks for ``/favicon.ico`` at the site's root, whatever the page says (the root
``index.html`` that redirects to the first chapter says nothing), so one is written there from
the book's own favicon at the end of the build.

Two things in the Jupyter Book 1 stack make every page report an error in a browser console:
sphinx-thebe's configuration script is added twice (``Identifier 'THEBE_JS_URL' has already
been declared``), and MathJax is loaded from a CDN on every page, math or not, so a reader
without network sees a failed request. This drops repeated scripts, and MathJax from pages that
have no math (the book has none). The browser tests check every page for both.
"""

from __future__ import annotations

from docutils import nodes


def tidy_scripts(app, pagename, templatename, context, doctree) -> None:
    has_math = doctree is not None and (
        doctree.next_node(nodes.math) is not None
        or doctree.next_node(nodes.math_block) is not None
    )
    seen, kept = set(), []
    for script in context.get("script_files", []):
        # the same inline script may come once with filename None and once with ""
        filename = getattr(script, "filename", script) or ""
        key = (filename, getattr(script, "attributes", {}).get("body"))
        if key in seen or ("mathjax" in str(filename).lower() and not has_math):
            continue
        seen.add(key)
        kept.append(script)
    context["script_files"] = kept


def root_favicon(app, exception) -> None:
    from pathlib import Path

    from PIL import Image  # Pillow comes with matplotlib

    if exception is None and app.config.html_favicon:
        Image.open(Path(app.srcdir) / app.config.html_favicon).save(
            Path(app.outdir) / "favicon.ico", sizes=[(32, 32)]
        )


def setup(app):
    # late, after the other extensions have added their scripts
    app.connect("html-page-context", tidy_scripts, priority=900)
    app.connect("build-finished", root_favicon)
    return {"parallel_read_safe": True, "parallel_write_safe": True}
