"""The one place that starts a worker: ``run("workers.start_join", "join")``.

The target of a ``spawn`` or ``forkserver`` child cannot be defined in a notebook (the child
imports its target by name, and a notebook's ``__main__`` has none), so every chapter's code
lives in
``workers/<chapter>.py``, and the chapter starts it as ``python -m workers.<chapter> ...``
through ``run``, which

* picks a free loopback port and sets ``MASTER_ADDR``/``MASTER_PORT`` (two runs at once
  never collide) and ``PYTHONUNBUFFERED=1`` (lines arrive as they are printed; not for a
  plain program in ``programs/``, which flushes its own lines);
* starts the child in its own process session, so the child and everything it starts
  form one process group that can be killed as a whole, under a supervisor that kills
  that group if this process dies first (a notebook kernel restarted or killed);
* streams lines as they arrive to a live display (``render.live_output``): in a notebook
  it ends as the rank-labelled block, in a terminal the lines go to stdout;
* enforces a timeout, and on timeout, error or Ctrl-C kills the whole group, so no
  process is left behind (a Ctrl-C while the child starts or while the group is killed
  waits until that step is done, then stops the run);
* passes ``--events PATH`` and reads back the JSON events the ranks wrote;
* checks the outcome: by default exit code 0, else ``WorkerError`` with the last lines of
  output (so a chapter's build fails). A cell that shows a failure on purpose says which
  exit code and which message it expects, and ``run`` checks exactly that.
"""

from __future__ import annotations

import json
import os
import queue
import re
import signal
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

from workers.ranks import REPOSITORY, free_port, interrupt_held_back
from workers.render import live_output

_LABEL = re.compile(r"^\[(main|rank (\d+))\] ?(.*)$")
_TAIL = 25  # lines of output quoted in an error



class WorkerError(RuntimeError):
    """A run did not end as its caller said it would. ``.result`` holds what it did."""

    def __init__(self, message: str, result: RunResult):
        super().__init__(message)
        self.result = result


@dataclass
class Line:
    """One line of output: seconds since the start, who printed it, and the text."""

    t: float
    source: str  # "main", "rank 3", or "" when unlabelled (tracebacks, library warnings)
    text: str

    @property
    def rank(self) -> int | None:
        return int(self.source[5:]) if self.source.startswith("rank ") else None


@dataclass(repr=False)
class RunResult:
    command: list[str]
    returncode: int | None  # None when the run was killed at its timeout
    duration: float  # seconds from start to exit (or to the kill)
    lines: list[Line]
    events: list[dict] = field(default_factory=list)
    timed_out: bool = False
    started: float = 0.0  # time.time() at the start, on the clock the events use

    def __repr__(self) -> str:  # short: the output block is already on the page
        ended = "timed out" if self.timed_out else f"exit code {self.returncode}"
        what = " ".join(self.command[1:3])
        return f"<run of {what}: {ended} after {self.duration:.1f} s>"

    @property
    def ended(self) -> float:
        return self.started + self.duration

    @property
    def output(self) -> str:
        return "\n".join(
            line.text if not line.source else f"[{line.source}] {line.text}"
            for line in self.lines
        )

    @property
    def ranks(self) -> list[int]:
        return sorted({line.rank for line in self.lines if line.rank is not None})

    @property
    def backends(self) -> list[str]:
        """The backend of each job the run started, as its launcher said ("2 ranks, backend
        gloo"): what ``--backend auto`` chose on this machine."""
        return re.findall(r"\bbackend (gloo|nccl)\b", "\n".join(self.lines_of("main")))

    def lines_of(self, source: int | str) -> list[str]:
        """The texts printed by one rank (an int) or by ``"main"``, in order."""
        label = f"rank {source}" if isinstance(source, int) else source
        return [line.text for line in self.lines if line.source == label]

    def events_named(self, name: str) -> list[dict]:
        return [event for event in self.events if event["event"] == name]

    def tail(self, count: int = _TAIL) -> str:
        return "\n".join(self.output.splitlines()[-count:])


# What a Jupyter kernel sets so that the tools its cells run write in colour (ipykernel's
# zmqshell). From Python 3.13 on, a traceback is then coloured even in a pipe or a file.
FORCED_COLOUR = ("FORCE_COLOR", "CLICOLOR_FORCE")
# what a launcher tells a rank: a build started inside a job (a Kubeflow pod, a shell that
# torchrun or srun opened) must not hand them on, or every run would think itself a rank
LAUNCHER_VARIABLES = ("RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "GROUP_RANK",
                      "GROUP_WORLD_SIZE", "ROLE_RANK", "ROLE_WORLD_SIZE", "ROLE_NAME")


def run(
    module: str,
    *args: str,
    timeout: float = 60.0,
    expect_returncode: int = 0,
    expect_output: str | None = None,
    events: bool | None = None,
    env: dict[str, str] | None = None,
    stream: bool | None = None,
    key: str | None = None,
    cwd: str | Path | None = None,
) -> RunResult:
    """Run ``python -m <module> <args>`` and return what it did; see the module docstring.

    ``module`` may also be a shell script of the repository (``"scripts/launch_local.sh"``),
    run with bash in the same way, or one of the book's plain programs
    (``"programs/start_and_join.py"``), run as ``python programs/...`` from the
    repository's root, as a reader runs it: no ``--events``, and its output as buffered as
    it would be in a pipe of the reader's own.

    ``expect_output`` is a regular expression that must occur in the output.
    ``events``: pass ``--events`` (default: yes, except for a program).
    ``stream``: None shows output live (notebook display or stdout); False keeps quiet.
    ``key``: a regular expression for the lines that matter, which a long output shows
    while the rest is folded (``render.rank_output_html``).
    ``cwd``: the folder to run in (default: this process's; a program's: the repository).
    """
    program = module.endswith(".py")
    if module.endswith(".sh"):
        command = ["bash", str(REPOSITORY / module), *map(str, args)]
    elif program:
        command = [sys.executable, module, *map(str, args)]
        cwd = REPOSITORY if cwd is None else cwd
    else:
        command = [sys.executable, "-m", module, *map(str, args)]
    events_file = None
    if events if events is not None else not program:
        handle, events_file = tempfile.mkstemp(prefix="events-", suffix=".jsonl")
        os.close(handle)
        command += ["--events", events_file]
    child_env = {
        **{name: value for name, value in os.environ.items()
           if name not in LAUNCHER_VARIABLES and not name.startswith("TORCHELASTIC_")},
        "PYTHONUNBUFFERED": "1",
        "MASTER_ADDR": "127.0.0.1",
        "MASTER_PORT": str(free_port()),
        **(env or {}),
    }
    # the kernel's forced colour is dropped: the child writes to a pipe, as in a shell
    for forced in FORCED_COLOUR:
        if forced not in (env or {}):
            child_env.pop(forced, None)
    if program or any(str(arg).startswith("programs/") for arg in args):
        # a plain program, alone or under a launcher, runs as a reader's shell runs it:
        # unbuffered, its print(..., flush=True) would write the text and the newline apart,
        # and two ranks sharing the pipe could interleave them mid-line
        child_env.pop("PYTHONUNBUFFERED")
    display = live_output(command, stream)
    lines: list[Line] = []
    received: queue.Queue = queue.Queue()
    process = None
    timed_out = False
    started = time.time()
    try:
        with interrupt_held_back():  # the child exists only once `process` names it
            process = subprocess.Popen(
                # workers.supervise runs the command, and ends its group if this
                # process dies without doing so (a notebook kernel killed outright)
                [sys.executable, "-m", "workers.supervise", str(os.getpid()), *command],
                cwd=cwd,
                stdout=subprocess.PIPE,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                env=child_env,
                start_new_session=True,  # its own process group: killpg reaches them all
            )
        reader = threading.Thread(target=_read_lines, args=(process.stdout, received),
                                  daemon=True)
        reader.start()
        timed_out = _collect(process, received, started, timeout, lines, display)
    finally:
        # On success, timeout, error and Ctrl-C alike; a second Ctrl-C waits for all of it,
        # the events file's removal included (raised between the two, it left the file)
        with interrupt_held_back():
            if process is not None:
                _kill_group(process)
            recorded = _read_events(events_file)  # and the file is removed
    reader.join(timeout=2)
    while not received.empty():  # lines that arrived while the group was being stopped
        raw = received.get_nowait()
        if raw is not None:
            _record(raw, started, lines, display)
    result = RunResult(
        command=command,
        returncode=None if timed_out else process.returncode,
        duration=time.time() - started,
        lines=lines,
        events=recorded,
        timed_out=timed_out,
        started=started,
    )
    display.finish(result, key)
    if os.environ.get("BOOK_RUN_LOG"):  # where a build's time goes: one line per run
        with open(os.environ["BOOK_RUN_LOG"], "a") as log:
            log.write(json.dumps({"command": command[1:], "cwd": str(cwd or os.getcwd()),
                                  "seconds": round(result.duration, 2)}) + "\n")
    _check(result, module, timeout, expect_returncode, expect_output)
    return result


def _collect(process, received, started, timeout, lines, display) -> bool:
    """Record lines until the child and its descendants are done; True if it timed out."""
    deadline = started + timeout
    leader_exited_at = None
    while True:
        try:
            raw = received.get(timeout=0.1)
        except queue.Empty:
            if time.time() >= deadline:
                return process.poll() is None
            if leader_exited_at is None and process.poll() is not None:
                leader_exited_at = time.time()
            # The pipe stays open while anything the child left behind holds it; once the
            # child itself has exited, a short quiet spell ends the run (and leftovers are
            # killed).
            if leader_exited_at is not None and time.time() - leader_exited_at > 1.0:
                return False
            continue
        if raw is None:  # the child and all its descendants closed the pipe
            return False
        _record(raw, started, lines, display)


def _check(result, module, timeout, expect_returncode, expect_output) -> None:
    last_lines = f"last lines:\n{result.tail()}"
    if result.timed_out:
        message = f"{module} timed out after {timeout:g} s and was killed; {last_lines}"
        raise WorkerError(message, result)
    if result.returncode != expect_returncode:
        message = (f"{module} exited with code {result.returncode}, expected "
                   f"{expect_returncode}; {last_lines}")
        raise WorkerError(message, result)
    if expect_output and not re.search(expect_output, result.output, re.MULTILINE):
        message = f"{module}: expected output matching {expect_output!r}; {last_lines}"
        raise WorkerError(message, result)


def _read_lines(pipe, received: queue.Queue) -> None:
    for raw in iter(pipe.readline, b""):
        received.put(raw.decode(errors="replace").rstrip("\n"))
    received.put(None)


def _record(raw: str, started: float, lines: list[Line], display) -> None:
    match = _LABEL.match(raw)
    t = time.time() - started
    line = Line(t, match.group(1), match.group(3)) if match else Line(t, "", raw)
    lines.append(line)
    display.add(line)


def _kill_group(process: subprocess.Popen) -> None:
    """Stop the child's whole process group: SIGTERM, a short grace, then SIGKILL."""
    group = process.pid  # start_new_session made the child the leader of its own group
    if process.poll() is None:
        try:
            os.killpg(group, signal.SIGTERM)
        except ProcessLookupError:
            pass
        try:
            process.wait(timeout=3)
        except subprocess.TimeoutExpired:
            pass
    # Whatever is still in the group (the leader, or what it left) is killed outright.
    try:
        os.killpg(group, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass
    process.wait()


def _read_events(path: str | None) -> list[dict]:
    if not path:
        return []
    records = []
    try:
        with open(path) as file:
            for line in file:
                try:
                    records.append(json.loads(line))
                except json.JSONDecodeError:  # cut short: its rank was killed writing it
                    pass
    finally:
        os.unlink(path)
    return sorted(records, key=lambda record: record["t"])


class capture_child_output:
    """Collect what processes started inside the ``with`` block write to stdout and stderr.

    For the few cells that start a process from the notebook's own kernel: a child inherits
    the kernel's file descriptors 1 and 2, and the kernel does not reliably forward what
    arrives on them. Inside the block both point to a temporary file; ``.text`` holds what
    was written. The kernel's forced colour is lifted for the block, so a child writes to
    the file as it would to any file (without it, Python 3.13 colours a child's traceback).
    """

    def __enter__(self) -> capture_child_output:
        self._forced = {name: os.environ.pop(name) for name in FORCED_COLOUR
                        if name in os.environ}
        self._file = tempfile.TemporaryFile(mode="w+b")
        sys.stdout.flush()
        sys.stderr.flush()
        self._saved = [os.dup(1), os.dup(2)]
        os.dup2(self._file.fileno(), 1)
        os.dup2(self._file.fileno(), 2)
        self.text = ""
        return self

    def __exit__(self, *exc_info) -> None:
        for fd, saved in zip((1, 2), self._saved):
            os.dup2(saved, fd)
            os.close(saved)
        self._file.seek(0)
        self.text = self._file.read().decode(errors="replace")
        self._file.close()
        os.environ.update(self._forced)
