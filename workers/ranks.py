"""What every worker process uses: labelled printing, event records, a strict command
line, free ports, and starting ranks.

Everything here is small on purpose, so a chapter's worker reads top to bottom:

* ``say(rank, text)`` prints ``[rank r] text``; ``say_main(text)`` prints ``[main] text``
  for the process that started the others. The runner sorts lines into ranks by them.
* ``Events(path).emit(rank, "name", ...)`` appends one JSON object per line to ``path``
  (``{"rank": 0, "t": <time.time()>, "event": "name", ...}``); an event with ``t_end`` is
  a span, and ``with events.span(rank, "name"):`` records one around a block.
  ``Events(None)`` records nothing, so workers record unconditionally.
* ``Parser`` is an ``argparse.ArgumentParser`` whose errors are one line and exit code 2;
  ``fail(text)`` ends a worker the same way for a mistake argparse cannot see.
* ``launch(rank_fn, args, n, timeout)`` runs ``rank_fn(rank, *args)`` in ``n`` processes.

Nothing here imports the notebook side (``runner``, ``render``): imports run one way.
"""

from __future__ import annotations

import argparse
import importlib
import json
import os
import signal
import socket
import sys
import threading
import time
from contextlib import contextmanager
from typing import NoReturn

MAIN = "main"  # the label of the process that starts the others
MOST_PROCESSES = 64  # the most ranks or processes a worker starts on one machine


def _write_line(text: str) -> None:
    # One os.write per line: lines from several processes sharing a pipe never interleave
    # mid-line (a pipe write of up to PIPE_BUF bytes is atomic).
    os.write(sys.stdout.fileno(), (text + "\n").encode())


def say(rank: int, text: str) -> None:
    """Print ``text`` as rank ``rank``."""
    sys.stdout.flush()
    _write_line(f"[rank {rank}] {text}")


def say_main(text: str) -> None:
    """Print ``text`` as the main (parent) process."""
    sys.stdout.flush()
    _write_line(f"[{MAIN}] {text}")


class Events:
    """Appends event records to a JSON-lines file; picklable, so children can have it."""

    def __init__(self, path: str | None):
        self.path = path

    def emit(self, rank: int | str, event: str, t: float | None = None, **fields) -> None:
        if not self.path:
            return
        when = time.time() if t is None else t
        record = {"rank": rank, "t": when, "event": event, **fields}
        line = (json.dumps(record) + "\n").encode()
        # O_APPEND + one write: records from concurrent processes stay whole.
        fd = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        try:
            os.write(fd, line)
        finally:
            os.close(fd)

    @contextmanager
    def span(self, rank: int | str, event: str, **fields):
        """Record the block as one event from its start to its end.

        The block may add fields to the dict it is given (a value it computed, say).
        """
        begin = time.time()
        yield fields
        self.emit(rank, event, t=begin, t_end=time.time(), **fields)


def first_line(error: BaseException) -> str:
    """An exception as one line: its message's first line, or its type when it has none."""
    text = str(error).strip()
    return text.splitlines()[0] if text else type(error).__name__


def fail(text: str, code: int = 2) -> None:
    """End the process with one line on stderr: for the reader's mistakes, not for bugs."""
    prog = os.path.basename(sys.argv[0]) if sys.argv and sys.argv[0] else "worker"
    sys.stderr.write(f"{prog}: error: {text}\n")
    sys.exit(code)


class Parser(argparse.ArgumentParser):
    """ArgumentParser whose usage errors are one line (no usage dump), exit code 2."""

    def error(self, message: str) -> NoReturn:
        self.exit(2, f"{self.prog}: error: {message} (see --help)\n")


def positive_int(text: str) -> int:
    """argparse type: a whole number of at least 1."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a whole number, got {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1, got {value}")
    return value


def positive_float(text: str) -> float:
    """argparse type: a number above 0 (seconds, a learning rate)."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number, got {text!r}") from None
    if not value > 0:
        raise argparse.ArgumentTypeError(f"must be above 0, got {text}")
    return value


def add_common_options(parser: argparse.ArgumentParser, timeout: float) -> None:
    """The options every demo has: ``--events PATH`` and ``--timeout SECONDS``."""
    parser.add_argument("--events", metavar="PATH",
                        help="append one JSON event per line to PATH")
    parser.add_argument(
        "--timeout", type=positive_float, default=timeout, metavar="SECONDS",
        help=f"longest wait for any process or peer (default {timeout:g})",
    )


def open_events(path: str | None) -> Events:
    """Check that the events file can be written before any child starts, then return it."""
    if path:
        try:
            with open(path, "a"):
                pass
        except OSError as error:
            fail(f"cannot write the events file {path}: {error.strerror}")
    return Events(path)


_handed_out: list[int] = []  # recent ports, so two jobs started together never share one
_handed_out_lock = threading.Lock()


def free_port(host: str = "127.0.0.1") -> int:
    """A port that was free a moment ago: the OS picks it when binding to port 0."""
    with _handed_out_lock:
        while True:
            with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
                sock.bind((host, 0))
                port = sock.getsockname()[1]
            if port not in _handed_out:
                _handed_out[:] = (_handed_out + [port])[-64:]
                return port


@contextmanager
def interrupt_held_back():
    """Let the block finish before a Ctrl-C (SIGINT) takes effect; deliver it right after.

    Only the main thread may set signal handlers, and a run started from another thread
    is not interrupted by Ctrl-C; there, and where SIGINT is ignored or left to C code,
    the block just runs.
    """
    if threading.current_thread() is not threading.main_thread() or not callable(
        signal.getsignal(signal.SIGINT)
    ):
        yield
        return
    arrived = []
    previous = signal.signal(signal.SIGINT, lambda signum, frame: arrived.append(signum))
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, previous)
        if arrived:
            signal.raise_signal(signal.SIGINT)  # now handled as the caller had it handled


def launch(rank_fn, args: tuple, processes: int, timeout: float, preload=()) -> int:
    """Run ``rank_fn(rank, *args)`` in ``processes`` new processes and wait for them all.

    The processes come from a forkserver that has imported torch once, so even eight ranks
    start in a fraction of a second (the start-methods chapter measures why). Returns 0
    when every process exited with 0. When one fails, the others are stopped and 1 is
    returned; so they are when they outlive ``timeout``. Either way one line says so. A
    Ctrl-C stops them all too, with one line and exit code 130.
    ``preload`` names more modules each process imports before ``rank_fn`` runs: once, in
    the forkserver, when this starts it; in each process when it was already running
    (``python -m workers.<chapter>`` starts it early: ``workers/__init__.py`` says why).
    """
    ranks = None
    try:
        import torch.multiprocessing as mp

        server = mp.get_context("forkserver")
        server.set_forkserver_preload(["torch", "torch.distributed", *preload])
        with interrupt_held_back():  # a Ctrl-C mid-way would orphan the ranks started
            ranks = mp.start_processes(
                imported_then_run, args=(preload, rank_fn, args), nprocs=processes,
                join=False, start_method="forkserver"
            )
        return wait_for(ranks, timeout)
    except KeyboardInterrupt:  # before any rank started, or held back until all had
        if ranks is not None:
            stop_all(ranks)
        say_main("interrupted: every rank was stopped")
        raise SystemExit(130) from None


def import_modules(names) -> None:
    """Import ``names`` now: torch._dynamo imported after ``init_process_group`` (the
    optimizers import it on their first step) keeps the group alive past its destruction."""
    for name in names:
        importlib.import_module(name)


def imported_then_run(rank: int, preload, rank_fn, args: tuple) -> None:
    """What each process of ``launch`` runs: its imports, then ``rank_fn(rank, *args)``."""
    import_modules(preload)
    rank_fn(rank, *args)


def wait_for(ranks, timeout: float) -> int:
    """Wait for the processes of ``mp.start_processes``/``mp.spawn(..., join=False)``.

    0 when every rank exited with 0; otherwise 1, every rank stopped, and one line saying
    which rank failed and how, or that the ranks outlived ``timeout``.
    """
    import torch.multiprocessing as mp

    deadline = time.time() + timeout
    try:
        while not ranks.join(timeout=0.2):
            if time.time() > deadline:
                say_main(f"ranks still running after {timeout:g} s: stopping them all")
                stop_all(ranks)
                return 1
    except KeyboardInterrupt:  # Ctrl-C, or SIGINT sent to this process alone
        stop_all(ranks)
        say_main("interrupted: every rank was stopped")
        raise SystemExit(130) from None
    except mp.ProcessExitedException as error:  # start_processes stopped the others
        if error.signal_name:
            how = f"signal {error.signal_name}"
        else:
            how = f"code {error.exit_code}"
        rank = error.error_index
        say_main(f"rank {rank} exited with {how}; the other ranks were stopped")
        return 1
    except mp.ProcessRaisedException as error:
        say_main(
            f"rank {error.error_index} raised {raised_line(str(error))}; "
            "the other ranks were stopped"
        )
        return 1
    return 0


def stop_all(ranks) -> None:
    """Kill every rank still running and reap it (a rank stuck in C++ ignores SIGTERM)."""
    for process in ranks.processes:
        process.kill()
    for process in ranks.processes:
        process.join()


def raised_line(traceback_text: str) -> str:
    """``Type: first line of the message`` from a formatted traceback.

    The line after the last traceback's frames; a message may go on for many more lines
    (DDP's do), and the first of them is the one that says what happened.
    """
    lines = traceback_text.strip().splitlines()
    starts = [i for i, line in enumerate(lines) if line.startswith("Traceback (")]
    for line in lines[starts[-1] + 1 :] if starts else []:
        if line.strip() and not line.startswith(" "):
            return line.strip()
    return lines[-1].strip() if lines else "an exception"
