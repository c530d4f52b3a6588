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
import math
import os
import random
import signal
import socket
import sys
import threading
import time
from contextlib import contextmanager
from pathlib import Path
from typing import NoReturn

REPOSITORY = Path(__file__).resolve().parent.parent  # the clone's root

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


def exit_now(code: int | None) -> NoReturn:
    """``sys.exit(code)``, less the second that Python takes at exit, once torch is
    imported, to free its objects one by one: the process's own threads are waited for
    and its exit handlers run (multiprocessing's, logging's, temporary files') as at any
    exit, its output is flushed, and the operating system frees the rest at once."""
    import atexit

    for thread in threading.enumerate():
        if thread is not threading.main_thread() and not thread.daemon:
            thread.join()
    atexit._run_exitfuncs()
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (AttributeError, OSError, ValueError):
            pass
    try:  # and what C++ code wrote through C's own buffers
        import ctypes

        ctypes.CDLL(None).fflush(None)
    except (OSError, AttributeError):
        pass
    os._exit(0 if code is None else code)


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


def affinity_cores() -> int:
    """The cores this process's affinity allows, a core's hyper-threads counted once.

    ``os.sched_getaffinity`` counts logical CPUs, the ones a container's or Slurm's cpuset
    allows; two hyper-threads of one core share its arithmetic units, so a thread per
    logical CPU oversubscribes the cores a compute-bound rank needs. Linux's sysfs says
    which core each CPU belongs to; where it cannot be read, every allowed CPU counts.
    """
    allowed = os.sched_getaffinity(0)
    cores = set()
    for cpu in allowed:
        topology = Path(f"/sys/devices/system/cpu/cpu{cpu}/topology")
        try:
            cores.add((topology.joinpath("physical_package_id").read_text().strip(),
                       topology.joinpath("core_id").read_text().strip()))
        except OSError:
            return len(allowed)
    return len(cores) or len(allowed)


def cpu_quota(groups: str = "/proc/self/cgroup",
              root: str = "/sys/fs/cgroup") -> float | None:
    """The CPUs' worth of time per second that this process's control group may use (a CPU
    quota: ``docker --cpus``, a Kubernetes CPU limit, a Slurm or systemd cgroup), or None
    where there is none.

    A quota leaves the affinity alone: a container limited to 4 CPUs on a 64-core host
    still has all 64 in ``os.sched_getaffinity``, but its processes are paused, until the
    next period, once they have used 4 CPUs' worth of the current one (100 ms by default).
    The quota is ``cpu.max`` (``"400000 100000"``, or ``"max 100000"`` for none) in cgroup
    v2, ``cpu.cfs_quota_us`` over ``cpu.cfs_period_us`` (-1 for none) in v1. Every group
    from this process's own up to the root of the mount limits it, so the smallest quota
    among them counts; a path that a container's mount does not show is skipped (its root
    is then the container's own group). ``groups`` lists this process's groups, ``root`` is
    where Linux mounts them.
    """
    quotas = [quota for v2, group in _control_groups(groups, root, "cpu")
              for quota in [(_quota_v2 if v2 else _quota_v1)(group)] if quota is not None]
    return min(quotas) if quotas else None


def _control_groups(groups: str, root: str, controller: str):
    """``(v2, folder)`` for each control group that may limit this process on
    ``controller``: from its own group up to the root of each hierarchy that carries the
    controller (v2's single one, or v1's own mount, under its name or the joined names
    of the controllers mounted with it)."""
    try:
        lines = Path(groups).read_text().splitlines()
    except OSError:
        return
    for line in lines:
        if line.count(":") < 2:
            continue
        _, controllers, group = line.split(":", 2)
        if controllers == "":  # the v2 hierarchy
            v2, mounts = True, [Path(root)]
        elif controller in controllers.split(","):
            v2, mounts = False, list(dict.fromkeys([Path(root) / controller,
                                                    Path(root) / controllers]))
        else:
            continue
        parts = [part for part in group.split("/") if part]
        for mount in mounts:
            for depth in range(len(parts), -1, -1):
                yield v2, mount.joinpath(*parts[:depth])


def _quota_v2(group: Path) -> float | None:
    try:
        limit, period = group.joinpath("cpu.max").read_text().split()
        return None if limit == "max" else int(limit) / int(period)
    except (OSError, ValueError):
        return None


def _quota_v1(group: Path) -> float | None:
    try:
        limit = int(group.joinpath("cpu.cfs_quota_us").read_text())
        period = int(group.joinpath("cpu.cfs_period_us").read_text())
        return None if limit < 0 or period <= 0 else limit / period
    except (OSError, ValueError):
        return None


def memory_limit(groups: str = "/proc/self/cgroup",
                 root: str = "/sys/fs/cgroup") -> int | None:
    """The bytes this process's control group may use (``docker -m``, a Kubernetes memory
    limit, Slurm's ``--mem``), which ``psutil.virtual_memory`` does not see, or None where
    there is none: the smallest ``memory.max`` (cgroup v2) or ``memory.limit_in_bytes``
    (v1, a huge number for none) from this process's group up to the mount's root."""
    limits = []
    for v2, group in _control_groups(groups, root, "memory"):
        try:
            name = "memory.max" if v2 else "memory.limit_in_bytes"
            text = group.joinpath(name).read_text()
        except OSError:
            continue
        if text.strip().isdigit() and int(text) < 2**60:
            limits.append(int(text))
    return min(limits) if limits else None


def physical_cores() -> int:
    """The cores this process may keep busy at once, a core's hyper-threads counted once:
    those its affinity allows (``affinity_cores``), no more than a CPU quota
    (``cpu_quota``) rounds up to."""
    cores = affinity_cores()
    quota = cpu_quota()
    return cores if quota is None else max(1, min(cores, math.ceil(quota)))


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
        path = os.path.abspath(path)  # a child started in another folder writes here too
    return Events(path)


_handed_out: list[int] = []  # recent ports, so two jobs started together never share one
_handed_out_lock = threading.Lock()


def free_port(host: str = "127.0.0.1") -> int:
    """A port that was free a moment ago, from below the range Linux gives the outgoing
    connections (ip_local_port_range): the port stays unused until rank 0 listens on it,
    and a port the OS picks for a bind to port 0 comes from that range, where any other
    job's connection (gloo opens one per pair of ranks) could take it meanwhile."""
    low, high = _ports_below_outgoing()
    with _handed_out_lock:
        for _ in range(200):
            port = random.randint(low, high) if high > low else 0
            with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
                try:
                    sock.bind((host, port))
                except OSError:  # taken; try another
                    continue
                port = sock.getsockname()[1]
            if port not in _handed_out:
                _handed_out[:] = (_handed_out + [port])[-64:]
                return port
        raise OSError(f"no free port found on {host}")


def _outgoing_start() -> int:
    """The first port of the OS's range for outgoing connections (Linux's default where it
    cannot be read)."""
    try:
        with open("/proc/sys/net/ipv4/ip_local_port_range") as ports:
            return int(ports.read().split()[0])
    except (OSError, ValueError, IndexError):
        return 32768  # Linux's default


def _ports_below_outgoing() -> tuple[int, int]:
    """Up to 8,192 ports just under the outgoing range; (0, 0), the OS's pick, where the
    range starts too low to leave room."""
    start = _outgoing_start()
    if start < 10000:
        return 0, 0
    return max(1024, start - 8192), start - 1


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
    returned; so they are when they outlive ``timeout``, and when the forkserver or
    multiprocessing's resource tracker dies. Each way one line says what happened. A
    Ctrl-C stops them all too, with one line and exit code 130. Each process stops by
    itself when this one is gone (``stop_with_launcher``).
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
                imported_then_run, args=(preload, rank_fn, args, os.getpid()),
                nprocs=processes, join=False, start_method="forkserver"
            )
        return wait_for(ranks, timeout, helpers=forkserver_helpers())
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


def imported_then_run(rank: int, preload, rank_fn, args: tuple, launcher: int) -> None:
    """What each process of ``launch`` runs: its imports, then ``rank_fn(rank, *args)``."""
    stop_with_launcher(rank, launcher, "the job's main process", speak=rank == 0,
                       forkserver=True)
    import_modules(preload)
    rank_fn(rank, *args)


# --- a job ends as a whole ----------------------------------------------------------------
# A job is several processes. Whichever of them dies, the rest must notice and stop, or
# they train on with nobody waiting for them: the main process watches its ranks and its
# helpers (wait_for), and every rank watches the process that launched it.

_watched: list[int] = []  # the launcher this process watches, once set


def stop_with_launcher(rank: int, launcher: int, name: str, speak: bool,
                       forkserver: bool = False) -> None:
    """End this process as soon as ``launcher``, or the parent it has now, is gone.

    A thread looks five times a second and ends the process with ``os._exit``, which
    works even while the main thread waits inside C++ (a collective, a backward pass) where
    no signal handler of Python's would run. ``speak``: say so in one line first (one rank
    of the job does, for all of them); a parent that dies while ``launcher`` lives (the
    forkserver) is the launcher's to report. ``forkserver``: the parent is the launcher's
    forkserver, which the rank that speaks ends too (it would leave by itself only after
    every rank, and then take a second or more to tear down the PyTorch it imported).
    """
    if _watched:
        return
    _watched.append(launcher)
    parent = os.getppid()

    def watch() -> None:
        while True:
            time.sleep(0.2)
            if not is_alive(launcher):
                if not speak:  # let the rank that speaks see it first, and say nothing
                    silent = os.open(os.devnull, os.O_WRONLY)  # when a collective fails
                    os.dup2(silent, 1)  # under us in the meantime: it is no news
                    os.dup2(silent, 2)
                    time.sleep(0.5)
                    os._exit(1)
                say(rank, f"{name} (pid {launcher}) is gone: every rank stops")
                if forkserver:
                    try:
                        os.kill(parent, signal.SIGKILL)
                    except ProcessLookupError:
                        pass
                os._exit(1)
            if os.getppid() != parent:
                os._exit(1)

    threading.Thread(target=watch, name="stop-with-launcher", daemon=True).start()


def stop_with_its_launcher(rank: int) -> None:
    """End this rank when whatever launched it is gone: torchrun's agent, the book's launch
    script (which exports its pid as ``LAUNCHER_PID``), or the parent that ``mp.spawn``
    started it from. (``launch``'s ranks watch their launcher from the start.)

    torchrun starts each rank in a session of its own, so a killed agent would leave its
    ranks training with nobody to wait for them. A process started some other way (by
    hand, by Slurm) is left alone.
    """
    import multiprocessing

    if "TORCHELASTIC_RUN_ID" in os.environ:
        launcher, name = os.getppid(), "torchrun's agent"
    elif os.environ.get("LAUNCHER_PID", "").isdigit():
        launcher, name = int(os.environ["LAUNCHER_PID"]), "the launch script"
    elif multiprocessing.parent_process() is not None:
        launcher, name = multiprocessing.parent_process().pid, "the job's main process"
    else:
        return
    speak = os.environ.get("LOCAL_RANK", str(rank)) == "0"
    stop_with_launcher(rank, launcher, name, speak)


def is_alive(pid: int) -> bool:
    """Whether process ``pid`` runs (a zombie, dead but not yet reaped, does not)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # it exists, as someone else's
        return True
    try:
        with open(f"/proc/{pid}/stat") as stat:
            return stat.read().rpartition(")")[2].split()[0] != "Z"
    except OSError:  # no /proc here, or it just ended
        return os.path.exists(f"/proc/{pid}") or not os.path.isdir("/proc")


def child_has_ended(pid: int) -> bool:
    """Whether child ``pid`` of this process has ended, without reaping it."""
    try:
        return os.waitid(os.P_PID, pid, os.WEXITED | os.WNOHANG | os.WNOWAIT) is not None
    except ChildProcessError:  # not a child of ours (any more): ask the system
        return not is_alive(pid)


def forkserver_helpers() -> dict[int, str]:
    """The processes ``launch``'s ranks depend on: the forkserver that forked them (their
    parent) and multiprocessing's resource tracker (which cleans up after them)."""
    from multiprocessing import forkserver, resource_tracker

    helpers = {}
    server = getattr(forkserver._forkserver, "_forkserver_pid", None)  # no public names
    tracker = getattr(resource_tracker._resource_tracker, "_pid", None)
    if server:
        helpers[server] = "the forkserver, which started the ranks,"
    if tracker:
        helpers[tracker] = "multiprocessing's resource tracker"
    return helpers


def wait_for(ranks, timeout: float, helpers: dict[int, str] | None = None) -> int:
    """Wait for the processes of ``mp.start_processes``/``mp.spawn(..., join=False)``.

    0 when every rank exited with 0; otherwise 1, every rank stopped, and one line saying
    what ended the job: the rank that failed first, and how; a helper process
    (``helpers``: pid to name) that died; or the ranks outliving ``timeout``.
    """
    from multiprocessing.connection import wait

    helpers = helpers or {}
    deadline = time.time() + timeout
    running = {process.sentinel: index for index, process in enumerate(ranks.processes)}
    try:
        while running:
            for sentinel in wait(list(running), timeout=0.2):
                # the sentinel says the process is ending: wait until it has its exit code
                ranks.processes[running.pop(sentinel)].join(timeout=5)
            ended = [i for i, p in enumerate(ranks.processes) if p.sentinel not in running]
            failed = [i for i in ended if ranks.processes[i].exitcode != 0]
            # a rank "exited with 255" may be the forkserver dying: look a moment longer
            ghost = any(ranks.processes[i].exitcode == 255 for i in failed)
            helper = first_dead_helper(helpers, patience=1.0 if ghost else 0.0)
            if helper is not None:
                stop_all(ranks)
                say_main(f"{helper} died: every rank was stopped")
                return 1
            if failed:
                stop_all(ranks)
                say_main(f"{how_rank_failed(ranks, failed)}; the other ranks were stopped")
                return 1
            if running and time.time() > deadline:
                stop_all(ranks)
                say_main(f"ranks still running after {timeout:g} s: stopping them all")
                return 1
    except KeyboardInterrupt:  # Ctrl-C, or SIGINT sent to this process alone
        stop_all(ranks)
        say_main("interrupted: every rank was stopped")
        raise SystemExit(130) from None
    return 0


def first_dead_helper(helpers: dict[int, str], patience: float) -> str | None:
    """The name of a helper that has died, looking for up to ``patience`` seconds.

    Patience matters when a rank seems to have failed: a rank's exit status comes through
    the forkserver, and when the forkserver dies every rank looks as if it exited with code
    255 a moment before the forkserver itself is seen to be dead.
    """
    give_up = time.time() + patience
    while True:
        for pid, name in helpers.items():
            if child_has_ended(pid):
                return name
        if time.time() >= give_up:
            return None
        time.sleep(0.05)


def how_rank_failed(ranks, failed: list[int]) -> str:
    """``rank 1 exited with signal SIGKILL`` or ``rank 0 raised ValueError: ...``.

    When several ranks have failed, the cause is the one killed by a signal, or else the
    one that raised first: the others usually failed because it did (a peer's connection
    closed under them).
    """
    import pickle

    def raised_at(index: int) -> float:
        try:
            return os.path.getmtime(ranks.error_files[index])
        except (OSError, AttributeError, IndexError):
            return float("inf")

    signalled = [i for i in failed if ranks.processes[i].exitcode < 0]
    index = signalled[0] if signalled else min(failed, key=raised_at)
    code = ranks.processes[index].exitcode
    if code < 0:
        try:
            name = signal.Signals(-code).name
        except ValueError:
            name = str(-code)
        return f"rank {index} exited with signal {name}"
    try:
        with open(ranks.error_files[index], "rb") as file:
            return f"rank {index} raised {raised_line(pickle.load(file))}"
    except (OSError, EOFError, pickle.UnpicklingError, AttributeError, IndexError):
        return f"rank {index} exited with code {code}"


def stop_all(ranks) -> None:
    """Kill every rank still running and wait until it is gone (a rank stuck in C++ ignores
    SIGTERM). By pid: when the forkserver died, multiprocessing believes them ended."""
    for process in ranks.processes:
        try:
            os.kill(process.pid, signal.SIGKILL)
        except (ProcessLookupError, TypeError):
            pass
    for process in ranks.processes:
        process.join(timeout=5)
    give_up = time.time() + 5
    while any(is_alive(p.pid) for p in ranks.processes if p.pid) and time.time() < give_up:
        time.sleep(0.02)


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
