"""How a run looks on the page: the live output while it runs, the rank-labelled block it
ends as, and the per-rank timeline.

Everything is drawn from what really ran: the lines a run captured, with the second each
arrived, and the events the ranks recorded with their own clocks. This module owns every
piece of HTML the book shows for a run, and imports nothing from the runner: a result is
anything with ``command``, ``lines``, ``returncode``, ``duration`` and ``timed_out``.
"""

from __future__ import annotations

import html
import itertools
import os
import re
import sys
import time
from dataclasses import dataclass
from pathlib import Path

# matplotlib's tab10: one colour per rank, the same in the output block and in the plots.
RANK_COLOURS = ["#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd",
                "#8c564b", "#e377c2", "#7f7f7f", "#bcbd22", "#17becf"]
MAIN_COLOUR = "#444444"
UNLABELLED_COLOUR = "#999999"
REPOSITORY = Path(__file__).resolve().parent.parent
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

    An event with ``t_end`` is a span from ``t`` to ``t_end``; one without is an instant.
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
        label = None if name in labelled else name
        labelled.add(name)
        if "t_end" in event:
            lane = event.get("lane")
            ax.barh(
                y if lane is None else y - 0.13 + 0.26 * lane,
                event["t_end"] - event["t"],
                left=event["t"] - t0,
                height=0.5 if lane is None else 0.24,
                color=colour_of[name],
                edgecolor="black",
                linewidth=0.4,
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
