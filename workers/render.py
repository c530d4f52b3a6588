"""How a run looks on the page: the live output while it runs, the rank-labelled block it
ends as, the per-rank timeline, and the interactive figures (drawn in the browser with
plotly.js, from the same measured data; see ``interactive``).

Everything is drawn from what really ran: the lines a run captured, with the second each
arrived, and the events the ranks recorded with their own clocks. This module owns every
piece of HTML the book shows for a run, and imports nothing from the runner: a result is
anything with ``command``, ``lines``, ``returncode``, ``duration`` and ``timed_out``.
"""

from __future__ import annotations

import base64
import html
import io
import itertools
import json
import os
import re
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from workers.ranks import REPOSITORY

# matplotlib's tab10: one colour per rank, the same in the output block and in the plots.
RANK_COLOURS = ["#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd",
                "#8c564b", "#e377c2", "#7f7f7f", "#bcbd22", "#17becf"]
MAIN_COLOUR = "#444444"
UNLABELLED_COLOUR = "#999999"
_run_ids = itertools.count(1)  # each run's block is marked with its own id


def source_colour(source: str | int) -> str:
    """The colour of ``"main"``, ``"rank 3"`` or ``3``; unlabelled output is grey."""
    if isinstance(source, int):
        return RANK_COLOURS[source % len(RANK_COLOURS)]
    if source.startswith("rank "):
        return RANK_COLOURS[int(source[5:]) % len(RANK_COLOURS)]
    return MAIN_COLOUR if source == "main" else UNLABELLED_COLOUR


FOLD_AFTER = 15  # lines: a longer output shows the lines that matter, the rest folds
_TORCH_PREFIX = re.compile(r"^(\[(?:rank|default)\d+\]:)")  # torchrun's own line prefix
_FRAME = re.compile(r"^\s*(frame #\d+:|Exception raised from )")
_CONTINUING = ("Traceback (", "During handling", "The above exception", "File ", "^", "~")


@dataclass
class _Fold:
    """Lines shown as one: ``lines[shown]`` in view, the others folded under it."""

    lines: list
    shown: int


def rank_output_html(result, run_id: str = "", key: str | None = None) -> str:
    """Every line in the order it arrived, with its source's coloured label and its time.

    A traceback shows only the line that says what happened, with its frames folded under
    it (a click opens them); so does a dump of C++ frames. An output of more than
    ``FOLD_AFTER`` lines shows the lines that matter and folds all of them under those:
    the lines that match the regular expression ``key``, or else the line that says how a
    failed run ended, or the last line of each process of a run that succeeded.

    Inline styles only, so the block looks the same in the book, in a downloaded notebook
    and in JupyterLab, in light and dark themes (text colour is inherited).
    """
    if result.timed_out:
        outcome = f"killed at its timeout after {result.duration:.2f} s"
    else:
        outcome = f"exit code {result.returncode} after {result.duration:.2f} s"
    pieces = _folded(result.lines)
    if not pieces:
        body = '<div style="opacity:.6">(no output)</div>'
    elif len(result.lines) <= FOLD_AFTER:
        body = "".join(map(_piece_html, pieces))
    else:
        body = "".join(_line_html(line) for line in _lines_that_matter(result, key)) + (
            '<details class="rank-output-all" style="margin-top:.25em">'
            '<summary style="cursor:pointer;opacity:.7">'
            f"all {len(result.lines)} lines</summary>"
            + "".join(map(_piece_html, pieces)) + "</details>"
        )
    return (
        f'<div class="rank-output" data-run="{run_id}" '
        'style="font-family:var(--pst-font-family-monospace,monospace);font-size:.82em;'
        'border:1px solid rgba(127,127,127,.35);border-radius:6px;padding:.5em .6em;'
        'margin:.3em 0">'
        '<div class="rank-output-head" style="margin-bottom:.4em;opacity:.8">'
        f"<code>{html.escape(command_text(result.command))}</code> &mdash; "
        f"{html.escape(outcome)}</div>" + body + "</div>"
    )


def _lines_that_matter(result, key: str | None) -> list:
    if key is not None:
        found = [line for line in result.lines if re.search(key, line.text)]
        if found:
            return found
    if result.timed_out or result.returncode != 0:
        main = [line for line in result.lines if line.source == "main"]
        errors = [p.lines[p.shown] for p in _folded(result.lines) if isinstance(p, _Fold)]
        return (main or errors or result.lines)[-1:]
    last = {}
    for line in result.lines:
        last[line.source or "unlabelled"] = line
    return sorted(last.values(), key=lambda line: line.t)


def _folded(lines: list) -> list:
    """The lines, each traceback and each run of C++ frames made one ``_Fold``."""
    pieces, i = [], 0
    while i < len(lines):
        fold = _traceback_at(lines, i) or _frames_at(lines, i)
        pieces.append(fold or lines[i])
        i += len(fold.lines) if fold else 1
    return pieces


def _split(line) -> tuple[str, str]:
    """A line's torchrun prefix (``[rank1]:``, or "") and its text after the prefix."""
    match = _TORCH_PREFIX.match(line.text)
    if not match:
        return "", line.text
    return match.group(1), line.text[match.end():].lstrip(" ")


def _traceback_at(lines: list, start: int) -> _Fold | None:
    """The traceback that starts at ``start`` (with any C++ frames after its error line),
    shown by its error line; None when no traceback starts there."""
    prefix, text = _split(lines[start])
    if not text.startswith("Traceback (most recent call last):"):
        return None
    i = start + 1
    while i < len(lines) and (lines[i].source, _split(lines[i])[0]) == (
            lines[start].source, prefix):
        text = _split(lines[i])[1]
        if text and not text.startswith((" ", *_CONTINUING)):  # the error line
            frames = _frames_at(lines, i + 1)
            end = i + 1 + (len(frames.lines) if frames else 0)
            return _Fold(lines[start:end], i - start)
        i += 1
    return _Fold(lines[start:i], i - start - 1)


def _frames_at(lines: list, start: int) -> _Fold | None:
    """Three or more C++ frame lines from ``start`` on, shown by the first."""
    end = start
    while end < len(lines) and _FRAME.match(_split(lines[end])[1]):
        end += 1
    return _Fold(lines[start:end], 0) if end - start >= 3 else None


def _piece_html(piece) -> str:
    if not isinstance(piece, _Fold):
        return _line_html(piece)
    folded = [line for i, line in enumerate(piece.lines) if i != piece.shown]
    return (
        '<details class="rank-fold"><summary style="cursor:pointer;list-style:none">'
        + _line_html(piece.lines[piece.shown], folded=len(folded)) + "</summary>"
        + "".join(map(_line_html, folded)) + "</details>"
    )


def _line_html(line, folded: int = 0) -> str:
    colour = source_colour(line.source)
    label = html.escape(line.source or "·")
    more = (f'<span style="opacity:.55;white-space:nowrap">&#9656; {folded} more '
            f'line{"s" if folded > 1 else ""}</span>') if folded else ""
    return (
        f'<div class="rank-line" data-source="{label}" style="display:flex;gap:.6em;'
        f'border-left:4px solid {colour};padding-left:.4em;line-height:1.35">'
        f'<span style="min-width:4.2em;color:#fff;background:{colour};border-radius:3px;'
        f'padding:0 .35em;text-align:center;white-space:nowrap">{label}</span>'
        f'<span style="min-width:3.6em;opacity:.6;text-align:right">{line.t:5.2f}s</span>'
        '<span style="white-space:pre-wrap;word-break:break-word;flex:1">'
        f"{html.escape(line.text)}</span>{more}</div>"
    )


def command_text(command: list[str]) -> str:
    """``python -m workers.x ...`` as a reader would type it (less the runner's events)."""
    program = "python" if command[0] == sys.executable else os.path.basename(command[0])
    if program == "bash" and len(command) > 1:  # a script of the repository: its own path
        program, command = "", [command[0], _relative(command[1]), *command[2:]]
    shown, skip = [], False
    for arg in command[1:]:
        if skip:
            skip = False
        elif arg == "--events":
            skip = True
        else:
            shown.append(arg)
    return " ".join(([program] if program else []) + shown)


def _relative(path: str) -> str:
    try:
        return str(Path(path).relative_to(REPOSITORY))
    except ValueError:
        return path


def live_output(command: list[str], stream: bool | None):
    """Where a run's lines go while it runs: a notebook display, stdout, or nowhere.

    ``stream=False`` keeps quiet; otherwise a notebook gets a display that shows the last
    lines as they arrive and ends as the rank-labelled block, and a terminal gets the lines.
    """
    if stream is False:
        return _Quiet()
    if _in_notebook():
        return _NotebookDisplay(command)
    return _Terminal()


def _in_notebook() -> bool:
    ipython = sys.modules.get("IPython")
    shell = ipython.get_ipython() if ipython else None
    return shell is not None and hasattr(shell, "kernel")


class _Quiet:
    def add(self, line) -> None:
        pass

    def finish(self, result, key: str | None = None) -> None:
        pass


class _Terminal(_Quiet):
    def add(self, line) -> None:
        print(f"[{line.source}] {line.text}" if line.source else line.text, flush=True)


class _NotebookDisplay:
    """One display per run: the last lines while it runs, then the finished block."""

    LIVE_LINES = 25

    def __init__(self, command: list[str]):
        from IPython.display import HTML, display

        self.HTML = HTML
        self.run_id = f"run-{os.getpid()}-{next(_run_ids)}"
        self.title = command_text(command)
        self.recent: list[str] = []
        self.last_update = 0.0
        self.handle = display(HTML(self._running_html()), display_id=True)

    def add(self, line) -> None:
        text = f"[{line.source}] {line.text}" if line.source else line.text
        self.recent = (self.recent + [text])[-self.LIVE_LINES :]
        if time.time() - self.last_update > 0.3:  # at most about three updates a second
            self.last_update = time.time()
            self.handle.update(self.HTML(self._running_html()))

    def finish(self, result, key: str | None = None) -> None:
        self.handle.update(self.HTML(rank_output_html(result, self.run_id, key)))

    def _running_html(self) -> str:
        body = html.escape("\n".join(self.recent)) or "starting..."
        title = html.escape(self.title)
        return f"<div><code>{title}</code> running...<pre>{body}</pre></div>"


def _row_key(rank) -> tuple:
    return (0, 0) if rank == "main" else (1, rank)


def timeline(events: list[dict], title: str = "", ax=None, t0: float | None = None):
    """A Gantt chart: a row per rank (``main`` on top), spans as bars, instants as markers.

    A static picture; ``interactive_timeline`` draws the same events in the browser.
    An event with ``t_end`` is a span from ``t`` to ``t_end``; one without is an instant.
    A span with ``"queued": true`` is time spent waiting in line (hatched, not filled).
    A span with ``lane`` 0 or 1 takes the upper or lower half of its row, so two things a
    rank does at the same time (computing and communicating) are both visible.
    Times are seconds since ``t0`` (default: the first event).
    """
    import matplotlib.pyplot as plt

    if ax is None:
        rows = {event["rank"] for event in events}
        fig, ax = plt.subplots(figsize=(8, 0.55 * max(len(rows), 2) + 1.1))
    fig = ax.figure
    if not events:
        ax.set_title(title + " (no events)")
        return fig
    t0 = min(event["t"] for event in events) if t0 is None else t0
    rows = sorted({event["rank"] for event in events}, key=_row_key)
    y_of = {rank: i for i, rank in enumerate(rows)}
    names = list(dict.fromkeys(event["event"] for event in events))
    cmap = plt.get_cmap("Set2")
    colour_of = {name: cmap(i % 8) for i, name in enumerate(names)}
    labelled = set()
    for event in events:
        y = y_of[event["rank"]]
        name = event["event"]
        queued = "t_end" in event and bool(event.get("queued"))  # waiting in line: hatched
        label = None if (name, queued) in labelled else name + " (queued)" * queued
        labelled.add((name, queued))
        if "t_end" in event:
            lane = event.get("lane")
            ax.barh(
                y if lane is None else y - 0.13 + 0.26 * lane,
                event["t_end"] - event["t"],
                left=event["t"] - t0,
                height=0.5 if lane is None else 0.24,
                color="none" if queued else colour_of[name],
                hatch="////" if queued else None,
                edgecolor=colour_of[name] if queued else "black",
                linewidth=0.8 if queued else 0.4,
                label=label,
            )
        else:
            ax.plot(
                event["t"] - t0,
                y,
                marker="v",
                markersize=8,
                linestyle="none",
                color=colour_of[name],
                markeredgecolor="black",
                label=label,
            )
    ax.set_yticks(range(len(rows)), [r if r == "main" else f"rank {r}" for r in rows])
    for tick, rank in zip(ax.get_yticklabels(), rows):
        tick.set_color(source_colour(rank))
    ax.invert_yaxis()
    ax.set_xlabel("seconds since the first event")
    ax.set_title(title)
    ax.grid(axis="x", alpha=0.3)
    ax.legend(
        loc="upper center",
        bbox_to_anchor=(0.5, -0.28 if len(rows) < 4 else -0.18),
        ncol=min(len(names), 4),
        frameon=False,
        fontsize="small",
    )
    fig.tight_layout()
    return fig


def origin_rank(value, world_size: int) -> int | None:
    """Which rank a start value is from (rank r starts with 10(r+1), 10(r+1)+1, ...)."""
    if not isinstance(value, (int, float)) or value != int(value):
        return None
    rank, offset = divmod(int(value), 10)
    return rank - 1 if 1 <= rank <= world_size and offset < world_size else None


def before_after(records: list[dict], title: str, ax_before, ax_after, world_size: int):
    """Draw every rank's tensor before and after one collective, one row per rank.

    A value still coloured like a rank came from that rank unchanged; a grey value was
    computed (a sum, a product, ...). An empty row had nothing (or nothing defined); a
    collective the backend refused says so, with its error.
    """
    # one cell width for both panels, so a value takes the same space before and after
    width = max([len(r[key] or []) for r in records for key in ("before", "after")] + [1])
    for ax, key in ((ax_before, "before"), (ax_after, "after")):
        for record in records:
            y = record["rank"]
            values = record[key]
            if key == "after" and record.get("error"):
                ax.text(0, y, record["error"][:80], va="center",
                        fontsize=8, color="#d62728")
                continue
            if values is None:
                ax.text(0, y, "(unspecified)", va="center", fontsize=8, alpha=0.6)
                continue
            for i, value in enumerate(values):
                origin = origin_rank(value, world_size)
                colour = source_colour(origin) if origin is not None else "#bbbbbb"
                ax.add_patch(_cell(i, y, colour))
                text_colour = "white" if origin is not None else "black"
                ax.text(i + 0.5, y, f"{value:g}", ha="center", va="center", fontsize=8,
                        color=text_colour)
        ax.set_xlim(0, width)
        ax.set_ylim(world_size - 0.5, -0.5)
        ax.set_yticks(
            range(world_size), [f"rank {r}" for r in range(world_size)], fontsize=8
        )
        ax.set_xticks([])
        for spine in ax.spines.values():
            spine.set_visible(False)
    ax_before.set_title(f"{title}: before", fontsize=9, loc="left")
    ax_after.set_title("after", fontsize=9, loc="left")


def _cell(x: float, y: float, colour: str):
    from matplotlib.patches import Rectangle

    return Rectangle((x + 0.04, y - 0.4), 0.92, 0.8, color=colour)


# Interactive figures ----------------------------------------------------------------------
#
# Drawn in the browser by plotly.js, which the build serves from the site and adds only to
# pages that show one (_ext/live_pages.py); this module writes the figure's data as JSON and
# needs neither plotly's Python package nor a network. Each figure also carries a PNG for
# print (and for a notebook, where no plotly.js draws it) and a Chrome-trace download.

# One distinct colour per operation (Okabe-Ito's eight, then eight of Tableau's): never
# confused with another operation of the same figure, up to 16 of them.
OPERATION_COLOURS = ["#0072B2", "#E69F00", "#009E73", "#CC79A7", "#56B4E9", "#D55E00",
                     "#F0E442", "#000000", "#4E79A7", "#F28E2B", "#59A14F", "#B07AA1",
                     "#9C755F", "#EDC948", "#76B7B2", "#FF9DA7"]
_SHOWN_ELSEWHERE = {"rank", "t", "t_end", "event", "lane", "queued", "bytes", "waited"}


@dataclass
class Figure:
    """One interactive figure: plotly's ``data`` and ``layout``, a function that draws it
    with matplotlib for print (``static``, called when the page is built), and for a
    timeline the events its trace download holds."""

    data: list[dict]
    layout: dict
    static: Callable | None = None
    events: list[dict] | None = field(default=None, repr=False)


def timeline_figure(events: list[dict], title: str = "", t0: float | None = None) -> Figure:
    """``timeline``'s events as an interactive figure: a lane per rank (``main`` on top), a
    colour per operation, queued work hatched, instants as markers; hovering a bar shows the
    operation, its rank, start, duration, ``bytes`` and ``waited`` (seconds the rank waited)
    when the event has them, and its other fields; drag to zoom in time."""
    if not events:
        return Figure([], {"title": {"text": f"{title} (no events)"}},
                      lambda: timeline(events, title), [])
    t0 = min(event["t"] for event in events) if t0 is None else t0
    rows = sorted({event["rank"] for event in events}, key=_row_key)
    row_of = {rank: i for i, rank in enumerate(rows)}
    names = list(dict.fromkeys(event["event"] for event in events))
    colour_of = {name: OPERATION_COLOURS[i % len(OPERATION_COLOURS)]
                 for i, name in enumerate(names)}
    traces: dict[tuple, dict] = {}
    for event in events:
        name, span = event["event"], "t_end" in event
        queued = span and bool(event.get("queued"))
        key = (name, span, queued)
        if key not in traces:
            traces[key] = _operation_trace(name, colour_of[name], span, queued)
        trace, row, lane = traces[key], row_of[event["rank"]], event.get("lane")
        trace["hovertext"].append(_hover_text(event, t0))
        if span:
            trace["base"].append(round(event["t"] - t0, 6))
            trace["x"].append(round(event["t_end"] - event["t"], 6))
            trace["y"].append(row if lane is None else row - 0.13 + 0.26 * lane)
            trace["width"].append(0.5 if lane is None else 0.24)
        else:
            trace["x"].append(round(event["t"] - t0, 6))
            trace["y"].append(row)
    labels = [f'<span style="color:{source_colour(rank)}">'
              f'{"main" if rank == "main" else f"rank {rank}"}</span>' for rank in rows]
    layout = {
        "title": _title(title),
        "barmode": "overlay",
        "height": 120 + 38 * max(len(rows), 2),
        "margin": {"l": 70, "r": 10, "t": 40 if title else 12, "b": 45},
        "xaxis": {"title": {"text": "seconds since the first event"}, "zeroline": False,
                  "gridcolor": "rgba(127,127,127,.25)", "rangemode": "tozero"},
        "yaxis": {"tickvals": list(range(len(rows))), "ticktext": labels, "showgrid": False,
                  "range": [len(rows) - 0.5, -0.5], "fixedrange": True},
        "hovermode": "closest",
        "legend": {"font": {"size": 11}},
    }
    return Figure(list(traces.values()), layout, lambda: timeline(events, title, t0=t0),
                  events)


def _operation_trace(name: str, colour: str, span: bool, queued: bool) -> dict:
    label = f"{name} (queued)" if queued else name
    common = {"name": label, "legendgroup": name, "hovertext": [], "hoverinfo": "text",
              "x": [], "y": []}
    if not span:
        return {**common, "type": "scatter", "mode": "markers",
                "marker": {"symbol": "triangle-down", "size": 11, "color": colour,
                           "line": {"width": 1, "color": "#333"}}}
    marker = {"color": colour, "line": {"width": 0.5, "color": "#333"}}
    if queued:  # waiting in line, not running: hatched in the operation's colour
        marker = {"color": "rgba(0,0,0,0)", "line": {"width": 1.2, "color": colour},
                  "pattern": {"shape": "/", "fgcolor": colour, "fillmode": "replace",
                              "size": 6}}
    return {**common, "type": "bar", "orientation": "h", "base": [], "width": [],
            "marker": marker}


def _seconds(value: float) -> str:
    return f"{value:.3f} s" if abs(value) >= 1 else f"{1000 * value:.2f} ms"


def _byte_count(value: float) -> str:
    for unit, size in (("GB", 1e9), ("MB", 1e6), ("kB", 1e3)):
        if value >= size:
            return f"{value / size:.2f} {unit} ({value:,.0f} bytes)"
    return f"{value:,.0f} bytes"


def _hover_text(event: dict, t0: float) -> str:
    rank = event["rank"]
    lines = [f"<b>{html.escape(str(event['event']))}</b>"
             + (" (queued)" if event.get("queued") and "t_end" in event else ""),
             "main" if rank == "main" else f"rank {rank}",
             f"start {event['t'] - t0:.3f} s"]
    if "t_end" in event:
        lines.append(f"duration {_seconds(event['t_end'] - event['t'])}")
    if isinstance(event.get("bytes"), (int, float)):
        lines.append(f"bytes {_byte_count(event['bytes'])}")
    if isinstance(event.get("waited"), (int, float)):
        lines.append(f"waited {_seconds(event['waited'])}")
    extra = [(key, value) for key, value in event.items() if key not in _SHOWN_ELSEWHERE
             and isinstance(value, (str, int, float, bool))]
    for key, value in extra[:6]:
        text = f"{value:.4g}" if isinstance(value, float) else str(value)
        lines.append(html.escape(f"{key}: {text[:60]}"))
    return "<br>".join(lines)


def lines_figure(series: dict[str, tuple], title: str = "", x_title: str = "",
                 y_title: str = "", log_x: bool = False, log_y: bool = False) -> Figure:
    """Curves, one per entry of ``series`` (``{"2 ranks": (xs, ys), ...}``), with markers
    at the measured points; hover shows the curve and both values."""
    data = [{"type": "scatter", "mode": "lines+markers", "name": name, "x": list(xs),
             "y": list(ys), "marker": {"color": OPERATION_COLOURS[i % 16]},
             "line": {"color": OPERATION_COLOURS[i % 16]},
             "hovertemplate": f"<b>{html.escape(name)}</b><br>{html.escape(x_title)} %{{x}}"
                              f"<br>{html.escape(y_title)} %{{y:.4g}}<extra></extra>"}
            for i, (name, (xs, ys)) in enumerate(series.items())]
    layout = {
        "title": _title(title),
        "height": 380, "margin": {"l": 60, "r": 10, "t": 40 if title else 12, "b": 45},
        "xaxis": _axis(x_title, log_x),
        "yaxis": _axis(y_title, log_y),
        "hovermode": "closest",
    }

    def static():
        import matplotlib.pyplot as plt

        fig, ax = plt.subplots(figsize=(7, 3.6))
        for i, (name, (xs, ys)) in enumerate(series.items()):
            ax.plot(list(xs), list(ys), marker="o", label=name,
                    color=OPERATION_COLOURS[i % 16])
        ax.set(title=title, xlabel=x_title, ylabel=y_title,
               xscale="log" if log_x else "linear", yscale="log" if log_y else "linear")
        ax.grid(alpha=0.3)
        ax.legend(frameon=False, fontsize="small")
        fig.tight_layout()
        return fig

    return Figure(data, layout, static)


def _title(text: str) -> dict:
    return {"text": html.escape(text), "font": {"size": 14}, "x": 0, "xanchor": "left"}


def _axis(title: str, log: bool) -> dict:
    return {"title": {"text": html.escape(title)}, "type": "log" if log else "linear",
            "gridcolor": "rgba(127,127,127,.25)"}


def chrome_trace(events: list[dict], t0: float | None = None) -> dict:
    """The events as a Chrome trace (the JSON that Perfetto's UI and chrome://tracing open):
    a process per rank (``main`` first), a thread per lane, spans as complete events and
    instants as instant events, every other field of an event in its ``args``."""
    if not events:
        return {"traceEvents": [], "displayTimeUnit": "ms"}
    t0 = min(event["t"] for event in events) if t0 is None else t0
    rows = sorted({event["rank"] for event in events}, key=_row_key)
    pid_of = {rank: i + 1 for i, rank in enumerate(rows)}
    trace = []
    for rank, pid in pid_of.items():
        name = "main" if rank == "main" else f"rank {rank}"
        trace += [{"ph": "M", "pid": pid, "name": "process_name", "args": {"name": name}},
                  {"ph": "M", "pid": pid, "name": "process_sort_index",
                   "args": {"sort_index": pid}}]
    lanes = {(event["rank"], event.get("lane") or 0) for event in events}
    for rank, lane in sorted(lanes, key=lambda pair: (_row_key(pair[0]), pair[1])):
        trace.append({"ph": "M", "pid": pid_of[rank], "tid": lane, "name": "thread_name",
                      "args": {"name": f"lane {lane}"}})
    for event in events:
        args = {key: value for key, value in event.items()
                if key not in ("rank", "t", "t_end", "event", "lane")}
        record = {"name": str(event["event"]), "pid": pid_of[event["rank"]],
                  "tid": event.get("lane") or 0, "ts": round(1e6 * (event["t"] - t0), 1),
                  "args": args}
        if "t_end" in event:
            record.update(ph="X", dur=round(1e6 * (event["t_end"] - event["t"]), 1),
                          cat="queued" if event.get("queued") else "running")
        else:
            record.update(ph="i", s="t", cat="instant")
        trace.append(record)
    return {"traceEvents": trace, "displayTimeUnit": "ms"}


class Interactive:
    """What a cell shows for an interactive figure: ``interactive(...)`` returns one.

    Its HTML holds every variant's data; ``_live/figures.js`` (on the pages that have one)
    draws it with plotly.js and switches variants with tabs. Where no plotly.js runs (a
    notebook in JupyterLab, a printed page) the PNG of the first variant shows instead.
    """

    def __init__(self, variants: dict[str, Figure], name: str, label: str = ""):
        if not variants:
            raise ValueError("an interactive figure needs at least one variant")
        self.variants, self.name, self.label = variants, name, label

    def __repr__(self) -> str:
        return f"<interactive figure {self.name!r}: {', '.join(self.variants)}>"

    def _repr_html_(self) -> str:
        slug = re.sub(r"[^A-Za-z0-9_.-]+", "-", self.name).strip("-") or "figure"
        variants, has_trace = [], False
        for label, figure in self.variants.items():
            variant = {"label": label, "data": figure.data, "layout": figure.layout}
            if figure.events is not None:
                has_trace = True
                file = slug + ("" if len(self.variants) == 1 else "-" + re.sub(
                    r"[^A-Za-z0-9_.-]+", "-", label).strip("-")) + ".trace.json"
                variant.update(trace=_data_url(json.dumps(chrome_trace(figure.events))),
                               file=file)
            variants.append(variant)
        spec = json.dumps({"label": self.label, "name": slug, "variants": variants},
                          separators=(",", ":")).replace("</", "<\\/")
        first = next(iter(self.variants.values()))
        tabs = "".join(
            f'<button type="button" role="tab" data-variant="{i}" '
            f'aria-selected="{"true" if i == 0 else "false"}">{html.escape(label)}</button>'
            for i, label in enumerate(self.variants))
        note = ("Hover for details; drag to zoom, double-click to zoom out; click a legend "
                "entry to hide it.")
        if has_trace:
            note += (f' <a class="live-figure-trace" download="{variants[0]["file"]}" '
                     f'href="{variants[0]["trace"]}">Download these events as a Chrome '
                     'trace</a> and open it in Perfetto\'s UI (<a href="https://ui.perfetto.dev">'
                     'ui.perfetto.dev</a>, "Open trace file"): a track per rank.')
        static = _png_data_url(first.static) if first.static else ""
        label_text = html.escape(self.label or "variant")
        return (
            f'<div class="live-figure" data-name="{html.escape(slug)}">'
            f'<div class="live-figure-tabs" role="tablist" aria-label="{label_text}" '
            'hidden>'
            f'<span class="live-figure-label">{label_text}:</span>{tabs}</div>'
            '<div class="live-figure-plot" hidden></div>'
            + (f'<img class="live-figure-static" alt="{html.escape(self.name)}" '
               f'src="{static}" style="max-width:100%">' if static else "")
            + f'<div class="live-figure-note" style="font-size:.8em;opacity:.8">{note}'
            '</div><script type="application/json" class="live-figure-data">'
            f"{spec}</script></div>"
        )


def interactive(figures: Figure | dict[str, Figure], name: str,
                label: str = "") -> Interactive:
    """Show one figure, or variants the reader switches between with tabs (``label`` names
    what varies: ``interactive({"2": fig2, "4": fig4}, "bandwidth", "world size")``)."""
    variants = figures if isinstance(figures, dict) else {"": figures}
    return Interactive(variants, name, label)


class ModelExplorer:
    """A cost model the reader drives: inputs for alpha, beta, the ranks N and a message
    size, and each collective's predicted time, drawn by ``_live/figures.js`` with
    plotly.js from ``terms`` (``{collective: {N: (steps, share)}}``, computed in Python, the
    one place the model's counts are written). Where no plotly.js runs, the PNG ``static``
    draws shows the curves at the starting values instead."""

    def __init__(self, terms: dict, alpha: float, beta: float, sizes: list[int],
                 name: str, static: Callable | None = None, ranks: int = 2):
        self.terms, self.alpha, self.beta, self.sizes = terms, alpha, beta, sizes
        self.name, self.static, self.ranks = name, static, ranks

    def __repr__(self) -> str:
        return f"<cost model {self.name!r}: {', '.join(self.terms)}>"

    def _repr_html_(self) -> str:
        slug = re.sub(r"[^A-Za-z0-9_.-]+", "-", self.name).strip("-") or "model"
        spec = {"name": slug, "alpha_us": self.alpha * 1e6, "beta_gbs": self.beta / 1e9,
                "ranks": self.ranks, "sizes": self.sizes,
                "colours": OPERATION_COLOURS[:len(self.terms)],
                "terms": {name: {str(n): list(pair) for n, pair in by_ranks.items()}
                          for name, by_ranks in self.terms.items()}}
        data = json.dumps(spec, separators=(",", ":")).replace("</", "<\\/")
        most = max(int(n) for by_ranks in spec["terms"].values() for n in by_ranks)

        def field(key: str, label: str, value: float, **limits) -> str:
            bounds = "".join(f' {k}="{v}"' for k, v in limits.items())
            return (f'<label>{label} <input type="number" name="{key}" value="{value:.4g}"'
                    f' step="any"{bounds}></label>')

        inputs = "".join([
            field("alpha", "α (µs)", spec["alpha_us"], min=0),
            field("beta", "β (GB/s)", spec["beta_gbs"], min=0.001),
            field("ranks", "ranks N", self.ranks, min=2, max=most),
            field("size", "message (bytes)", 1 << 20, min=1),
            '<button type="button" data-preset="fit">back to this machine\'s fit</button>',
        ])
        static = _png_data_url(self.static) if self.static else ""
        return (
            f'<div class="live-model" data-name="{html.escape(slug)}">'
            f'<div class="live-model-inputs" hidden>{inputs}</div>'
            '<div class="live-model-plot" hidden></div>'
            '<p class="live-model-readout" aria-live="polite" hidden></p>'
            + (f'<img class="live-figure-static" alt="{html.escape(self.name)}" '
               f'src="{static}" style="max-width:100%">' if static else "")
            + '<div class="live-figure-note" style="font-size:.8em;opacity:.8">Every curve '
            "here is a prediction from the parameters above and gloo's counts of steps and "
            "bytes, never a measurement: change them, or type another link's (say 5 µs and "
            "25 GB/s).</div>"
            f'<script type="application/json" class="live-model-data">{data}</script></div>'
        )


def model_explorer(terms: dict, alpha: float, beta: float, sizes: list[int], name: str,
                   static: Callable | None = None, ranks: int = 2) -> ModelExplorer:
    """An interactive cost model, starting from ``alpha`` (seconds) and ``beta`` (bytes per
    second) at ``ranks`` ranks, over the message ``sizes`` (bytes)."""
    return ModelExplorer(terms, alpha, beta, sizes, name, static, ranks)


def interactive_timeline(events: list[dict] | dict[str, list[dict]], title: str = "",
                         name: str = "timeline", label: str = "") -> Interactive:
    """A run's events as an interactive timeline (``timeline_figure``), or one per variant:
    ``interactive_timeline({"2 ranks": r2.events, "4 ranks": r4.events}, ..., label=
    "world size")``. The last expression of a cell, or ``display(...)``, shows it."""
    if isinstance(events, dict):
        return interactive({label_: timeline_figure(evs, title)
                            for label_, evs in events.items()}, name, label)
    return interactive(timeline_figure(events, title), name, label)


def _data_url(text: str, kind: str = "application/json") -> str:
    return f"data:{kind};base64,{base64.b64encode(text.encode()).decode()}"


def _png_data_url(draw: Callable) -> str:
    import matplotlib.pyplot as plt

    fig = draw()
    buffer = io.BytesIO()
    fig.savefig(buffer, format="png", dpi=90)
    plt.close(fig)
    return f"data:image/png;base64,{base64.b64encode(buffer.getvalue()).decode()}"
