"""A job that hangs: find the rank and the line, from outside, while it hangs.

    python -m workers.hangs skip              # hangs until --timeout; prints its pid
    python -m workers.hangs diagnose PID      # from a second terminal: which rank, where
    python -m workers.hangs stuck --world-size 4 --diagnose
    python -m workers.hangs every             # every kind in turn, each one diagnosed
    python -m workers.hangs second-terminal   # programs/hang.py, looked at from outside
    torchrun --standalone --nproc-per-node 3 -m workers.hangs dead  # diagnose AGENT_PID

Five kinds of hang, each started on purpose, on gloo: a rank that skips a collective
(skip), ranks that call two collectives in a different order (order), a rank stuck in its
own Python (stuck), a rank whose work died while its process lives on (dead), and a
``Work`` nobody waits for (unwaited). --culprit picks the rank that misbehaves (default:
the last). Every rank serves its flight recorder on a Unix socket of its own; ``diagnose``
reads it, and every rank's stack with py-spy, prints one verdict (which ranks are behind,
in which collective, at which line), and stops the job. A job that nobody diagnoses ends
at --timeout, its collectives' timeout too.
"""

from __future__ import annotations

import http.client
import json
import os
import pickle
import queue
import re
import shutil
import signal
import socket
import struct
import subprocess
import sys
import sysconfig
import threading
import time
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass, field
from datetime import timedelta
from pathlib import Path

from workers.job import Job, job_from_args, loopback_store, sockets_on_loopback
from workers.ranks import (
    REPOSITORY,
    Events,
    Parser,
    add_common_options,
    exit_now,
    fail,
    first_line,
    free_port,
    import_modules,
    imported_then_run,
    open_events,
    say,
    say_main,
    stop_all,
    stop_with_its_launcher,
)

# A recorder's first dump with Python frames imports torch._dynamo (two seconds): each rank
# imports it before it hangs, in the forkserver when this process starts it
PRELOAD = ("torch._dynamo",)
STEPS = 4  # steps of the small training loop the kinds run before (or while) they hang

# The ranks import torch (import_torch); the diagnosis, run from a second terminal, never
# does, and starts in a fraction of a second instead of three
torch = dist = None


def import_torch() -> None:
    global torch, dist
    import torch
    import torch.distributed as dist

# --- five ways to hang --------------------------------------------------------------------


def skip_collective(rank: int, culprit: int) -> None:
    """The culprit's batch at step 1 is empty, so it skips that step's all_reduce; it goes
    on to the barrier after the loop, while the others wait in their last all_reduce."""
    grad = torch.ones(4)
    for step in range(STEPS):
        if rank == culprit and step == 1:
            continue  # an empty batch: nothing to add, it thinks
        dist.all_reduce(grad)
    dist.barrier()  # after the epoch: every rank is done


def different_order(rank: int, culprit: int) -> None:
    """Two collectives, and the culprit calls them in the other order."""
    grad, stop = torch.ones(4), torch.zeros(4)
    if rank == culprit:
        dist.broadcast(stop, src=0)  # asks first whether to stop
        dist.all_reduce(grad)
    else:
        dist.all_reduce(grad)
        dist.broadcast(stop, src=0)


def stuck_in_python(rank: int, culprit: int) -> None:
    """A loader thread fills a queue of batches; on the culprit it stalls at step 2, and
    the main thread waits for a batch that never comes: no collective is involved."""
    batches: queue.Queue = queue.Queue()
    threading.Thread(target=load_batches, args=(batches, rank == culprit),
                     daemon=True).start()
    for _ in range(STEPS):
        batch = batches.get()  # no timeout: waits for ever
        dist.all_reduce(batch)


def load_batches(batches: queue.Queue, stalls: bool) -> None:
    for step in range(STEPS):
        if stalls and step == 2:
            threading.Event().wait()  # a read that never returns (a dead network mount)
        batches.put(torch.ones(4))


def died_unnoticed(rank: int, culprit: int) -> None:
    """The culprit raises after training, before the barrier. Its process does not end:
    Python waits at exit for the prefetch thread, which is not a daemon. So its sockets
    stay open, and neither the launcher nor the other ranks learn that it died."""
    batches: queue.Queue = queue.Queue(maxsize=2)
    threading.Thread(target=prefetch, args=(batches,), name="prefetch").start()
    for _ in range(STEPS):
        dist.all_reduce(batches.get())
    if rank == culprit:
        raise OSError("No space left on device: the checkpoint was not saved")
    dist.barrier()  # every rank has saved its checkpoint


def prefetch(batches: queue.Queue) -> None:
    while True:
        batches.put(torch.ones(4))  # blocks while the queue is full: for ever, at the end


def unwaited_work(rank: int, culprit: int) -> None:
    """Only the culprit logs the loss, with an all_reduce it starts and never waits for.
    It does not block there: it blocks in the barrier after it, which gloo runs only
    once the all_reduce, which no other rank calls, is done."""
    loss = torch.ones(1)
    if rank == culprit:
        logged = dist.all_reduce(loss, async_op=True)  # noqa: F841 (never waited for)
    dist.barrier()


KINDS = {
    "skip": (skip_collective, "a rank skips one all_reduce, then waits in the barrier"),
    "order": (different_order, "a rank calls broadcast and all_reduce in the other order"),
    "stuck": (stuck_in_python, "a rank waits for a batch its loader thread never sends"),
    "dead": (died_unnoticed, "a rank raised, but a non-daemon thread keeps it alive"),
    "unwaited": (unwaited_work, "a rank starts an all_reduce nobody else calls, async"),
}

# --- more shapes of a hang, for the hung_rank lab's grader -------------------------------
# Not demos of the chapter: each takes the set of misbehaving ranks, and the skip takes the
# collective that is skipped, so the lab's jobs can have several culprits, recorders that
# are empty, and every collective the recorder names.

LAB_OPS = ("all_gather", "gather", "scatter", "reduce", "broadcast", "all_to_all",
           "all_reduce")


def lab_stuck_first(rank: int, culprits) -> None:
    """The culprits wait for a batch that never comes before their first collective: their
    recorders stay empty while the others wait in an all_reduce."""
    if rank in culprits:
        threading.Event().wait()
    dist.all_reduce(torch.ones(4))


def lab_skip(rank: int, culprits, op: str) -> None:
    """The culprits skip step 1's ``op``, then meet the others in the barrier after the
    loop: at the recorders' last common number they call barrier, the others ``op``."""
    for step in range(STEPS):
        if rank in culprits and step == 1:
            continue
        lab_call(op, rank)
    dist.barrier()


def lab_stuck_before(rank: int, culprits) -> None:
    """The culprits are stuck in their own Python before step 1's broadcast from the last
    rank. A rank that only receives needs them not: it finishes the broadcast and waits in
    the all_reduce after it, so its last call is not the one the culprits never started."""
    source = dist.get_world_size() - 1
    for step in range(STEPS):
        if rank in culprits and step == 1:
            threading.Event().wait()
        dist.broadcast(torch.ones(4), src=source)
        dist.all_reduce(torch.ones(4))
    dist.barrier()


def lab_call(op: str, rank: int) -> None:
    """One call of the collective ``op``, rooted at rank 0 where it has a root."""
    n = dist.get_world_size()
    x = torch.ones(n)
    if op == "all_gather":
        dist.all_gather([torch.empty(n) for _ in range(n)], x)
    elif op == "gather":
        dist.gather(x, [torch.empty(n) for _ in range(n)] if rank == 0 else None, dst=0)
    elif op == "scatter":
        dist.scatter(torch.empty(1), list(x.split(1)) if rank == 0 else None, src=0)
    elif op == "reduce":
        dist.reduce(x, dst=0)
    elif op == "broadcast":
        dist.broadcast(x, src=0)
    elif op == "all_to_all":
        dist.all_to_all_single(torch.empty(n), x)
    else:
        dist.all_reduce(x)


def lab_behind_and_odd(rank: int, culprits) -> None:
    """At step 1 ``culprits[0]`` is stuck in its own Python before the all_reduce and
    ``culprits[1]`` calls barrier in its place: at that number one rank has no entry and one
    called something else, beside ranks that called all_reduce."""
    behind, odd = culprits
    for step in range(STEPS):
        if rank == behind and step == 1:
            threading.Event().wait()
        if rank == odd and step == 1:
            dist.barrier()  # in place of the all_reduce
            continue
        dist.all_reduce(torch.ones(4))
    dist.barrier()


def lab_tie(rank: int, culprits) -> None:
    """At step 1 rank 0 calls all_reduce, the two ``culprits`` barrier and the other two
    ranks (of five) broadcast: two calls tie, and rank 0's is not among them."""
    for step in range(STEPS):
        if step == 1 and rank in culprits:
            dist.barrier()
        elif step == 1 and rank != 0:  # from the lowest of the two
            dist.broadcast(torch.ones(4), src=min(set(range(1, 5)) - set(culprits)))
        else:
            dist.all_reduce(torch.ones(4))
    dist.barrier()


def lab_kind(name: str):
    """The function of a lab shape: ``stuck_first``, ``behind_and_odd``, ``tie``,
    ``stuck_before``, or ``skip:<op>``."""
    if name == "stuck_first":
        return lab_stuck_first
    if name == "behind_and_odd":
        return lab_behind_and_odd
    if name == "tie":
        return lab_tie
    if name == "stuck_before":
        return lab_stuck_before
    op = name.partition(":")[2]
    return lambda rank, culprits: lab_skip(rank, culprits, op)


# --- what a rank serves to a second process -----------------------------------------------


SERVERS: list = []  # this process's worker server, once serve_dumps() started it


def recorder(request, response) -> None:
    """The handler: this rank's recorder, pickled, with its rank. A function of the
    module, not one nested in serve_dumps: a nested one, freed as the interpreter exits,
    crashes a rank that ends normally (SIGABRT or SIGSEGV, with torch 2.15)."""
    from torch._C._distributed_c10d import _dump_fr_trace

    dump = pickle.loads(_dump_fr_trace())
    dump["rank"] = dist.get_rank()  # the dump does not say whose it is
    response.set_content(pickle.dumps(dump), "application/octet-stream")
    response.set_status(200)


def serve_dumps() -> None:
    """Let a second process read this rank's stacks and flight recorder while it hangs.

    PyTorch's worker server (the per-rank half of its debug server) answers HTTP on a
    Unix socket in a thread of its own, so it answers while the main thread waits in a
    collective. An abstract socket (its name starts with a NUL byte) is no file and no
    network port: it goes when the process goes. One more handler returns the recorder
    with the Python frames of every call, which the built-in JSON one leaves out.
    """
    from torch._C._distributed_c10d import (
        _get_handler_names,
        _register_handler,
        _WorkerServer,
    )

    if "fr_trace_pickle" not in _get_handler_names():
        _register_handler("fr_trace_pickle", recorder)
    # kept for the life of the process: the server stops when it is freed
    SERVERS.append(_WorkerServer(f"\0torch-worker-{os.getpid()}"))


PR_SET_PTRACER, PR_SET_PTRACER_ANY = 0x59616D61, 2**64 - 1  # <linux/prctl.h>: "Yama", -1UL


def allow_tracers() -> bool:
    """Let any process of this user read this rank with ptrace, as py-spy does. Under
    Yama's kernel.yama.ptrace_scope=1 (Ubuntu's default) only a process's ancestors may,
    and py-spy, started afresh by the diagnosis, is none. Without Yama the call fails
    (EINVAL), and nothing changes: the user's own processes were traceable already; at
    scope 2 or 3 no call of the traced process helps. True when the kernel took it."""
    if not sys.platform.startswith("linux"):
        return False
    import ctypes

    try:
        libc = ctypes.CDLL(None, use_errno=True)
        done = libc.prctl(PR_SET_PTRACER, ctypes.c_ulong(PR_SET_PTRACER_ANY),
                          ctypes.c_ulong(0), ctypes.c_ulong(0), ctypes.c_ulong(0))
    except (OSError, AttributeError):  # no C library to ask
        return False
    return done == 0


def rank_main(rank: int, job: Job, args) -> None:
    """One rank: serve its dumps, join the group, and hang the way ``args.demo`` says.
    The group's collectives wait ``--timeout`` seconds, the job's own deadline."""
    sockets_on_loopback()  # gloo listens on 127.0.0.1 too
    if getattr(args, "fr_buffer", None):  # the lab's full ring buffer
        os.environ["TORCH_FR_BUFFER_SIZE"] = str(args.fr_buffer)
    import_torch()
    allow_tracers()  # py-spy may read this rank under Yama's ptrace_scope=1 too
    wait = timedelta(seconds=job.timeout)
    try:
        serve_dumps()
    except ImportError as error:  # an older torch: the diagnosis reads the stacks only
        say(rank, f"serves no flight recorder ({first_line(error)})")
    if job.started_as_rank:  # torchrun's agent holds the store
        stop_with_its_launcher(rank)
        dist.init_process_group("gloo", rank=rank, world_size=job.world_size, timeout=wait)
    else:
        store = loopback_store(rank, job.world_size, job.port, wait)  # on 127.0.0.1 only
        dist.init_process_group("gloo", store=store, rank=rank, world_size=job.world_size,
                                timeout=wait)
    Events(args.events).emit(rank, "started", pid=os.getpid(), kind=args.demo)
    if args.demo in KINDS:
        kind, _ = KINDS[args.demo]
        kind(rank, args.culprit)
    else:  # a lab shape: several culprits
        lab_kind(args.demo)(rank, tuple(args.culprit))


# --- stacks, from outside: py-spy ---------------------------------------------------------

PTRACE_REFUSED = (
    "py-spy may not read the processes' memory here (ptrace was refused). On Linux, let "
    "a user trace their own processes with: sudo sysctl kernel.yama.ptrace_scope=0 (at 1 "
    "a process may be traced only by its ancestors, and py-spy is not one of the rank's, "
    "unless the traced "
    "process allowed it with prctl(PR_SET_PTRACER); at 3 nothing helps, neither sysctl "
    "nor sudo, until a reboot); or run the diagnosis as root: sudo env \"PATH=$PATH\" "
    "python -m workers.hangs diagnose PID; in a container, start it with --cap-add "
    "SYS_PTRACE")
NO_PY_SPY = "py-spy is not installed: pip install py-spy==0.4.3 (requirements.txt pins it)"
# why py-spy read no stacks of a rank, whose recorder alone the diagnosis then reads
UNREAD = {
    "refused": "py-spy was refused (ptrace)",
    "free-threaded": "py-spy 0.4 cannot read a free-threaded Python's stacks",
    "failed": "py-spy read no stacks",
}


def free_threaded() -> bool:
    """Whether this Python is a free-threaded build (3.13t, 3.14t), whose stacks py-spy 0.4
    cannot read. The build decides, not whether the GIL is on now: an extension that needs
    the GIL turns it back on, and the objects keep the free-threaded layout."""
    gil_enabled = getattr(sys, "_is_gil_enabled", lambda: True)
    return bool(sysconfig.get_config_var("Py_GIL_DISABLED")) or not gil_enabled()


class CannotLook(Exception):
    """py-spy cannot look at the job (missing, or ptrace refused): one line says why."""


@dataclass
class Frame:
    name: str
    filename: str
    line: int

    @property
    def where(self) -> str:
        return f"{shown_path(self.filename)}:{self.line}"


@dataclass
class Thread:
    name: str  # "?" where py-spy read none (0.4.3, on recent CPython 3.14)
    frames: list[Frame]  # innermost first, as py-spy and the recorder list them
    os_id: int | None = None  # the kernel's thread id: the main thread's is the pid


@dataclass
class Process:
    pid: int
    rank: int | None
    threads: list[Thread]
    unread: str | None = None  # why py-spy read no stacks (a key of UNREAD), if it did not
    recorded: list = field(default_factory=list)  # then: its recorder's calls, to compare

    @property
    def main(self) -> Thread | None:
        """The main thread: on Linux its kernel id is the pid; by name elsewhere."""
        return next((t for t in self.threads if t.os_id == self.pid), None) or next(
            (t for t in self.threads if t.name == "MainThread"), None)


def py_spy() -> str:
    """The py-spy beside this Python (a virtual environment's), else the one on PATH
    (PY_SPY names another)."""
    beside = Path(sys.executable).with_name("py-spy")
    found = os.environ.get("PY_SPY") or (str(beside) if beside.exists() else
                                         shutil.which("py-spy"))
    if not found or not os.path.exists(found):
        raise CannotLook(NO_PY_SPY)
    return found


def dump_stacks(pid: int) -> Process | None:
    """Every thread's stack of one Python process, with ``py-spy dump``; None when it is
    not (or no longer) a Python process."""
    command = [py_spy(), "dump", "--pid", str(pid), "--json", "--locals"]
    try:
        done = subprocess.run(command, capture_output=True, text=True, timeout=30)
    except subprocess.TimeoutExpired:
        return None
    if done.returncode != 0:
        if "Permission Denied" in done.stderr or "Operation not permitted" in done.stderr:
            raise CannotLook(PTRACE_REFUSED)
        return None
    try:
        threads = json.loads(done.stdout)
    except json.JSONDecodeError:
        return None
    process = Process(pid, rank_from_environment(pid), [])
    for thread in threads:
        frames = [Frame(f["name"], f["filename"], f["line"]) for f in thread["frames"]]
        process.threads.append(Thread(thread.get("thread_name") or "?", frames,
                                      thread.get("os_thread_id")))
        if process.rank is None:
            process.rank = rank_from_arguments(thread["frames"])
    return process


def rank_from_environment(pid: int) -> int | None:
    """RANK, which torchrun and launch scripts set for each rank."""
    import psutil

    try:
        value = psutil.Process(pid).environ().get("RANK", "")
    except (psutil.Error, OSError):
        return None
    return int(value) if value.isdigit() else None


def rank_from_arguments(frames: list[dict]) -> int | None:
    """The rank a process was started as: the outermost function called with an argument
    named ``rank`` (or mp.spawn's ``_wrap``, whose ``i`` is the rank)."""
    for frame in reversed(frames):  # outermost first
        for local in frame.get("locals") or []:
            wanted = "i" if frame["name"] == "_wrap" else "rank"
            if local.get("arg") and local["name"] == wanted and local["repr"].isdigit():
                return int(local["repr"])
    return None


LIBRARY = re.compile(r"/(site|dist)-packages/|/lib/python3\.\d+/|^<")
PLUMBING = ("workers/ranks.py", "workers/job.py")  # the book's launcher, not the lesson


def is_reader_code(filename: str) -> bool:
    """A frame of the program itself: not Python's library, not an installed package."""
    return not LIBRARY.search(filename) and not filename.endswith(PLUMBING)


def reader_frame(frames: list[Frame]) -> Frame | None:
    """The innermost frame of the reader's own code: the line to look at."""
    return next((frame for frame in frames if is_reader_code(frame.filename)), None)


def shown_path(filename: str) -> str:
    """A path as the reader knows it: relative to the current folder when inside it, else
    to the book's clone when inside that (a page runs in book/)."""
    for folder in (Path.cwd(), REPOSITORY):
        try:
            return str(Path(filename).resolve().relative_to(folder))
        except ValueError:
            pass
    return filename


COLLECTIVES = {"all_reduce", "broadcast", "barrier", "all_gather", "all_gather_into_tensor",
               "all_gather_single", "reduce_scatter", "reduce_scatter_tensor",
               "reduce_scatter_single", "reduce", "gather", "scatter", "all_to_all",
               "all_to_all_single", "send", "recv", "monitored_barrier", "wait",
               "all_gather_object", "broadcast_object_list", "gather_object",
               "scatter_object_list", "send_object_list", "recv_object_list",
               "all_reduce_coalesced", "all_gather_coalesced"}


def collective_in(frames: list[Frame]) -> str | None:
    """The torch.distributed call a stack is waiting in, if any."""
    for frame in frames:
        if frame.filename.endswith("distributed_c10d.py") and frame.name in COLLECTIVES:
            return frame.name
    return None


# --- flight recorders, from outside: the rank's worker server -----------------------------


class _UnixConnection(http.client.HTTPConnection):
    """HTTP over the abstract socket ``\\0torch-worker-<pid>``, to process ``pid`` only. An
    abstract name has no permissions: any local user can bind the name of a process that
    serves none, and ``read_recorder`` unpickles the answer. So the peer's pid, which the
    kernel reports (SO_PEERCRED), must be ``pid``."""

    def __init__(self, pid: int, timeout: float):
        super().__init__("localhost", timeout=timeout)
        self.pid = pid

    def connect(self) -> None:
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.sock.settimeout(self.timeout)
        self.sock.connect(f"\0torch-worker-{self.pid}")
        credentials = self.sock.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED,
                                           struct.calcsize("3i"))
        peer, _, _ = struct.unpack("3i", credentials)
        if peer != self.pid:
            raise ConnectionRefusedError(f"torch-worker-{self.pid} is served by pid {peer}")


def ask(pid: int, handler: str, timeout: float = 10.0, failed: bool = False,
        ) -> bytes | None:
    """What the worker server of process ``pid`` answers to ``handler``; None when the
    process serves none (it never called serve_dumps) or, unless ``failed``, when the
    handler failed."""
    connection = _UnixConnection(pid, timeout)
    try:
        connection.request("POST", f"/handler/{handler}")
        response = connection.getresponse()
        body = response.read()
    except OSError:
        return None
    finally:
        connection.close()
    return body if response.status == 200 or failed else None


@dataclass
class Entry:
    """One collective in a rank's flight recorder."""

    seq: int
    group: str
    op: str
    sizes: list
    state: str
    retired: bool
    frames: list[Frame] = field(default_factory=list)

    @property
    def line(self) -> Frame | None:
        return reader_frame(self.frames)


def recorder_entries(dump: dict) -> list[Entry]:
    """A recorder dump (``_dump_fr_trace``'s pickle, or the JSON) as Entry objects."""
    entries = []
    for raw in dump.get("entries", []):
        if raw.get("is_p2p"):
            continue
        frames = [Frame(f["name"], f["filename"], f["line"]) for f in raw.get("frames", [])]
        entries.append(Entry(raw["collective_seq_id"], str(raw["process_group"][0]),
                             raw["profiling_name"].split(":")[-1], raw.get("input_sizes"),
                             raw.get("state", ""), bool(raw.get("retired")), frames))
    return entries


def read_recorder(pid: int) -> dict | None:
    """Rank ``pid``'s flight recorder dump, with frames; the JSON one (no frames) when
    the pickle handler is missing."""
    raw = ask(pid, "fr_trace_pickle")
    if raw is not None:
        try:
            return pickle.loads(raw)
        except Exception:  # noqa: BLE001 (a dump cut short: treat it as none)
            return None
    raw = ask(pid, "fr_trace_json")
    return json.loads(raw) if raw else None


# --- the verdict --------------------------------------------------------------------------


@dataclass
class Verdict:
    """What the diagnosis found. ``culprits``: the ranks behind or out of step;
    ``collective``: the one the others wait in (``seq``: its number in the recorders);
    ``waiting_line``: where the others called it; ``culprit_line``: the line of the
    culprits' own code to look at; ``culprit_op``: the collective they called instead."""

    found: str  # "behind", "out of step", "no recorder", "recorders agree",
    # "recorders empty", "not hung"
    culprits: list[int]
    waiting: list[int]
    collective: str | None
    seq: int | None
    waiting_line: str | None
    culprit_line: str | None
    culprit_op: str | None
    text: str


def plural(count: int, noun: str) -> str:
    return f"{count} {noun}{'' if count == 1 else 's'}"


def ranks_text(ranks) -> str:
    ranks = sorted(ranks)
    if len(ranks) == 1:
        return f"rank {ranks[0]}"
    return f"ranks {', '.join(map(str, ranks[:-1]))} and {ranks[-1]}"


def first_disagreement(recorders: dict[int, list[Entry]], group: str = "0"):
    """The first collective number at which the ranks' recorders differ, and what each rank
    called there (None: nothing yet). Entries a full ring buffer dropped are skipped: the
    comparison starts where every rank still has its entries. So is a collective every
    rank called and finished with other sizes: all_to_all_single with uneven splits, an
    all_gather of tensors of other lengths."""
    calls = {rank: {e.seq: e for e in entries if e.group == group}
             for rank, entries in recorders.items()}
    first = max((min(by_seq) for by_seq in calls.values() if by_seq), default=1)
    last = max((max(by_seq) for by_seq in calls.values() if by_seq), default=0)
    for seq in range(first, last + 1):
        here = {rank: by_seq.get(seq) for rank, by_seq in calls.items()}
        if len({call_of(e) if e else None for e in here.values()}) > 1:
            if all(e and e.retired for e in here.values()) and \
                    len({e.op for e in here.values()}) == 1:
                continue  # one collective, finished everywhere: uneven by design
            return seq, here
    return None, {}


# A rooted collective's inputs differ between its ranks by design: scatter's source passes
# the list of tensors to hand out, and the others pass none; gather's outputs, likewise.
ROOTED = ("scatter", "gather")


def call_of(entry: Entry) -> tuple:
    """What a rank called at a number: the collective, and its tensors' sizes where every
    rank passes the same (all but the rooted ones)."""
    return (entry.op, None if entry.op in ROOTED else str(entry.sizes))


def where_is(who: str, process: Process) -> str:
    """Where a rank is, as a clause about ``who``: its main thread's line, or the thread
    that keeps it alive once the main thread has ended."""
    if process.unread:
        return f"{who}: its stack was not read"
    main = process.main
    frame = reader_frame(main.frames) if main else None
    if frame:
        return f"{who} is at {frame.where} ({frame.name}){doing(main.frames)}"
    others = [(t, reader_frame(t.frames)) for t in process.threads if t is not main]
    alive = [(t, f) for t, f in others if f]
    if main and any(f.name == "_shutdown" for f in main.frames) and alive:
        thread, frame = alive[0]
        named = f"its thread '{thread.name}'" if thread.name != "?" else "a thread"
        return (f"{who}'s main thread has left the program and waits in "
                f"threading._shutdown for {named}, at {frame.where} ({frame.name})")
    return f"{who} is outside the program's own code"


def doing(frames: list[Frame]) -> str:
    """What a stack's reader line is waiting in: a collective, the library function it
    called, or its own code (a C function such as time.sleep has no Python frame)."""
    collective = collective_in(frames)
    if collective:
        return f", waiting in {collective}"
    index = next(i for i, frame in enumerate(frames) if is_reader_code(frame.filename))
    return f", in {frames[index - 1].name}" if index else ""


def culprit_frame(process: Process) -> Frame | None:
    main = process.main
    frame = reader_frame(main.frames) if main else None
    if frame or main is None:
        return frame
    alive = [reader_frame(t.frames) for t in process.threads if t is not main]
    return next((f for f in alive if f), None)


def read_hang(processes: dict[int, Process], recorders: dict[int, list[Entry] | None],
              ) -> Verdict:
    """Which ranks are behind or out of step, in which collective, at which line."""
    served = bool(recorders) and all(entries is not None for entries in recorders.values())
    if served:
        seq, here = first_disagreement(recorders)
        if seq is not None:
            return from_recorders(seq, here, processes, recorders)
    empty = served and not any(recorders.values())
    return from_stacks(processes, served, empty)


def from_recorders(seq, here: dict[int, Entry | None], processes, recorders) -> Verdict:
    missing = sorted(rank for rank, entry in here.items() if entry is None)
    if missing:  # behind: the others started collective #seq, they did not
        waiting = sorted(set(here) - set(missing))
        entry = here[waiting[0]]
        spots = {rank: culprit_frame(processes[rank]) for rank in missing
                 if rank in processes}
        where = "; ".join(where_is(ranks_text([r]), processes[r])
                          for r in missing if r in processes)
        culprit_line = next((f.where for f in spots.values() if f), None)
        text = (f"{ranks_text(missing)} {'is' if len(missing) == 1 else 'are'} behind: "
                f"{ranks_text(waiting)} {'waits' if len(waiting) == 1 else 'wait'} in "
                f"{entry.op} #{seq}"
                f"{at(entry.line)}, which {ranks_text(missing)} never started; {where}")
        return Verdict("behind", missing, waiting, entry.op, seq, where_of(entry.line),
                       culprit_line, None, text)
    # the ranks differ in the collective, or, calling the same one, in its tensors' sizes
    same_op = len({entry.op for entry in here.values()}) == 1
    call = call_of if same_op else (lambda e: e.op)
    named = (lambda e: f"{e.op} of sizes {e.sizes}") if same_op else (lambda e: e.op)
    calls = Counter(call(entry) for entry in here.values())
    top = max(calls.values())
    tied = [key for key, count in calls.items() if count == top]
    ruling = min(rank for rank, e in here.items() if call(e) in tied)  # lowest tied rank
    rule = here[ruling]
    reference = rule.op
    culprits = sorted(rank for rank, entry in here.items() if call(entry) != call(rule))
    waiting = sorted(set(here) - set(culprits))
    theirs, mine = here[waiting[0]], here[culprits[0]]
    if len({call(here[rank]) for rank in culprits}) == 1:
        theirs_said = (f"{'its' if len(culprits) == 1 else 'their'} collective #{seq} is "
                       f"{named(mine)}{at(mine.line)}")
    else:  # out of step each its own way: each culprit's call
        theirs_said = f"at collective #{seq} " + ", ".join(
            f"rank {rank} called {named(here[rank])}{at(here[rank].line)}"
            for rank in culprits)
    text = (f"{ranks_text(culprits)} {'is' if len(culprits) == 1 else 'are'} out of step: "
            f"{theirs_said}, where {ranks_text(waiting)} called {named(rule)}"
            f"{at(theirs.line)}")
    if len(tied) == 2 and len(calls) == 2:
        text += f" (as many ranks each way: rank {ruling}'s call is taken as the rule)"
    elif len(tied) > 1:
        each = f"{top} rank{'s' * (top != 1)} each"
        text += (f" ({len(tied)} calls tie, {each}: the call of rank {ruling}, the lowest "
                 f"of their ranks, is taken as the rule)")
    stuck_in = {rank: collective_in(processes[rank].main.frames) for rank in culprits
                if rank in processes and processes[rank].main}
    later = {rank: (processes[rank].main and reader_frame(processes[rank].main.frames))
             for rank in culprits if rank in processes}
    moved = [r for r in culprits if later.get(r) and mine.line
             and later[r].where != mine.line.where]
    if moved and not mine.retired:
        rank = moved[0]
        text += (f"; nobody waits for that {mine.op}: {ranks_text([rank])} went on, and "
                 f"now waits in {stuck_in.get(rank) or 'its code'} at {later[rank].where}")
    # a count of calls, only where every recorder still holds its rank's first collective:
    # a full ring buffer has dropped the oldest, and a count of what it kept says nothing
    counts = {rank: sum(e.op == reference for e in recorders[rank]) for rank in here}
    whole = all(min(e.seq for e in recorders[rank] if e.group == "0") == 1 for rank in here)
    mine_count, theirs_count = counts[culprits[0]], counts[waiting[0]]
    if whole and len({counts[r] for r in culprits}) == 1 and \
            len({counts[r] for r in waiting}) == 1 and 0 < mine_count != theirs_count:
        text += (f"; {ranks_text(culprits)} called {reference} "
                 f"{plural(mine_count, 'time')}, {ranks_text(waiting)} "
                 f"{plural(theirs_count, 'time')}")
    return Verdict("out of step", culprits, waiting, reference, seq, where_of(theirs.line),
                   where_of(mine.line), mine.op, text)


def at(frame: Frame | None) -> str:
    return f" (called at {frame.where}, in {frame.name})" if frame else ""


def where_of(frame: Frame | None) -> str | None:
    return frame.where if frame else None


# Where every recorder was read and they agree: the diagnosis compares the default group's
# collectives only, so the hang, if any, is in another group's (a new_group, a mesh's)
AGREE = ("the flight recorders, all read, agree on the default group's collectives, the "
         "only ones compared: a hang in another group's shows in the stacks alone")
# Where every recorder was read and none holds a collective: the ranks called none yet, or
# they served another backend's recorder than the one that recorded their collectives
EMPTY = ("the flight recorders, all read, are empty: no rank recorded a collective in the "
         "recorder it served (gloo's, by default; a job on another backend records into "
         "that backend's)")


def from_stacks(processes: dict[int, Process], served: bool = False,
                empty: bool = False) -> Verdict:
    """Without every rank's recorder, or with recorders that agree (``served``), or that
    are all ``empty``: the ranks not inside a collective are behind."""
    read = EMPTY if empty else AGREE
    inside = {rank: collective_in(p.main.frames) if p.main else None
              for rank, p in processes.items()}
    waiting = sorted(rank for rank, op in inside.items() if op)
    behind = sorted(rank for rank, op in inside.items() if not op)
    if waiting and behind:
        op = Counter(inside[r] for r in waiting).most_common(1)[0][0]
        line = reader_frame(processes[waiting[0]].main.frames)
        spot = culprit_frame(processes[behind[0]])
        where = "; ".join(where_is(ranks_text([r]), processes[r]) for r in behind)
        text = (f"{ranks_text(behind)} {'is' if len(behind) == 1 else 'are'} behind: "
                f"{ranks_text(waiting)} {'waits' if len(waiting) == 1 else 'wait'} in "
                f"{op}{at(line)}, and "
                f"{ranks_text(behind)} {'is' if len(behind) == 1 else 'are'} in no "
                f"collective; {where} (from the stacks alone: "
                f"{read if served else 'no flight recorder served'})")
        return Verdict("behind", behind, waiting, op, None, where_of(line),
                       where_of(spot), None, text)
    if waiting:
        ops = {rank: inside[rank] for rank in waiting}
        lines = "; ".join(f"rank {r} in {ops[r]} at "
                          f"{where_of(reader_frame(processes[r].main.frames))}"
                          for r in waiting)
        if served:
            text = (f"every rank waits in a collective ({lines}): {read}, and the stacks "
                    f"cannot tell which rank is out of step")
            return Verdict("recorders empty" if empty else "recorders agree", [], waiting,
                           None, None, None, None, None, text)
        text = (f"every rank waits in a collective ({lines}): without the flight "
                f"recorders, the stacks cannot tell which rank is out of step")
        return Verdict("no recorder", [], waiting, None, None, None, None, None, text)
    if served and empty:  # on nccl a rank waits for the GPU, at an .item() or a sync
        return Verdict("recorders empty", [], [], None, None, None, None, None,
                       f"no rank waits in a torch.distributed call, and {EMPTY}: neither "
                       f"the stacks nor the recorders show where this job is stuck")
    return Verdict("not hung", [], [], None, None, None, None, None,
                   "no rank waits in a collective: this does not look like a hung job")


# --- the diagnosis ------------------------------------------------------------------------


def job_processes(target: int) -> list:
    """The target and everything it started, this process (and its parents) left out."""
    import psutil

    root = psutil.Process(target)
    mine = {os.getpid(), *(p.pid for p in psutil.Process().parents())}
    return [p for p in [root, *root.children(recursive=True)] if p.pid not in mine]


def rank_stacks(target: int, unread: set | None = None) -> dict[int, Process]:
    """Every rank's stacks: the processes of the job that were started as a rank (by
    RANK, by the rank the recorder they serve says, or by their functions' arguments). A
    rank py-spy cannot read is known by its recorder alone, with no stacks; ``unread``
    collects why py-spy read none of a process, rank or not."""
    import psutil

    unread = set() if unread is None else unread

    pids = []
    for process in job_processes(target):
        try:
            if "python" in os.path.basename(process.exe()).lower():
                pids.append(process.pid)
        except (psutil.Error, OSError):
            pass

    def look(pid: int) -> Process | None:
        why = "free-threaded" if free_threaded() else None
        try:
            process = None if why else dump_stacks(pid)
        except CannotLook as error:
            if str(error) != PTRACE_REFUSED:
                raise
            process, why = None, "refused"
        if why:
            unread.add(why)
        if process is None:
            return from_recorder(pid, why or "failed")
        served = read_recorder(pid) if process.rank is None else None
        if served is not None and "rank" in served:
            process.rank = served["rank"]
        return process

    with ThreadPoolExecutor(8) as pool:
        found = [p for p in pool.map(look, pids) if p and p.rank is not None]
    ranks: dict[int, Process] = {}
    for process in found:  # torchrun's agent has no rank; a rank's own children inherit it
        if process.rank not in ranks or process.pid < ranks[process.rank].pid:
            ranks[process.rank] = process
    return dict(sorted(ranks.items()))


def from_recorder(pid: int, why: str) -> Process | None:
    """A rank whose stacks py-spy did not read, as its recorder names it; None when the
    process serves none (not a rank of the book's, or not yet)."""
    served = read_recorder(pid)
    if served is None or "rank" not in served:
        return None
    calls = [(e["collective_seq_id"], e["profiling_name"], e["retired"])
             for e in served.get("entries", [])]
    return Process(pid, served["rank"], [], unread=why, recorded=calls)


STARTING = ("init_process_group", "_find_and_load", "rendezvous", "_store_based_barrier")


def settled(before: dict[int, Process], after: dict[int, Process], world_size) -> bool:
    """Whether two looks at the ranks, a moment apart, found the same stacks, every rank
    past its start-up: a job that hangs."""
    if not after or set(before) != set(after):
        return False
    if world_size is not None and len(after) != world_size:
        return False
    for rank, process in after.items():
        if signature(process) != signature(before[rank]):
            return False
        if process.unread and not process.recorded:  # no collective yet: still starting
            return False
        if any(f.name in STARTING for t in process.threads for f in t.frames):
            return False
    return True


def signature(process: Process) -> list:
    """The stacks that say whether a rank moves: its main thread's and those of threads
    in the program's own code (the book's launcher watches its parent in a loop); for a
    rank py-spy did not read, its recorder's calls."""
    if process.unread:
        return process.recorded
    main = process.main
    return sorted((t.name, [(f.name, f.line) for f in t.frames]) for t in process.threads
                  if t is main or reader_frame(t.frames))


def wait_until_hung(target: int, deadline: float, world_size=None,
                    unread: set | None = None) -> dict[int, Process]:
    """Look at the ranks until two looks half a second apart agree (or the deadline, or
    the target's end)."""
    import psutil

    before = rank_stacks(target, unread)
    while True:
        time.sleep(0.5)
        after = rank_stacks(target, unread)
        if settled(before, after, world_size) or time.time() > deadline:
            return after
        try:
            if psutil.Process(target).status() == psutil.STATUS_ZOMBIE:
                return after
        except psutil.NoSuchProcess:
            return after
        before = after


def diagnose(target: int, events: Events, world_size=None, wait: float = 30.0,
             save_dumps: str | None = None, debug_server: bool = False) -> Verdict:
    """Look at a hung job from outside and say which ranks are behind and where."""
    began = time.time()
    unread: set = set()
    processes = wait_until_hung(target, began + wait, world_size, unread)
    hung = time.time()
    if not processes and "refused" in unread:  # no rank serves a recorder to read instead
        raise CannotLook(PTRACE_REFUSED)
    if not processes:
        say_main(f"no rank found under pid {target}: is it the job's main process, or "
                 f"torchrun's agent?")
        return Verdict("not hung", [], [], None, None, None, None, None, "no rank found")
    dumps = {rank: read_recorder(p.pid) for rank, p in processes.items()}
    recorders = {rank: recorder_entries(d) if d is not None else None
                 for rank, d in dumps.items()}
    verdict = read_hang(processes, recorders)
    looked = time.time() - began
    reasons = sorted({p.unread for p in processes.values() if p.unread})
    for reason in reasons:
        say_main(f"{UNREAD[reason]}: the diagnosis reads the flight recorders alone"
                 + (f". {PTRACE_REFUSED}" if reason == "refused" else ""))
    for rank, process in processes.items():
        entries = recorders[rank]
        if entries is None:
            kept = "no flight recorder served"
        elif not entries:
            kept = "its recorder is empty"
        else:
            last = entries[-1]
            kept = (f"recorder: {plural(len(entries), 'collective')}, the last #{last.seq} "
                    f"{last.op}, {'retired' if last.retired else 'not retired'}")
        say_main(f"{where_is(f'rank {rank} (pid {process.pid})', process)}; {kept}")
    say_main(f"verdict: {verdict.text}")
    if save_dumps:
        write_dumps(dumps, save_dumps)
    events.emit("main", "diagnosis", t=began, t_end=time.time(), t_hung=hung,
                seconds=looked, verdict=asdict(verdict), unread=reasons,
                all_unread=bool(processes) and all(p.unread for p in processes.values()),
                ranks={rank: summary(processes[rank], recorders[rank])
                       for rank in processes},
                **(debug_server_answers(processes) if debug_server else {}))
    return verdict


def write_dumps(dumps: dict[int, dict | None], folder: str) -> None:
    """Each rank's dump as fr_trace reads it, ``FOLDER/as-dumped/rank_<r>``, and mended
    for it in ``FOLDER/mended/rank_<r>`` (fr_trace reads a folder's subfolders too)."""
    for name, mend in (("as-dumped", dict), ("mended", mend_gloo_dump)):
        os.makedirs(os.path.join(folder, name), exist_ok=True)
        for rank, dump in dumps.items():
            if dump is not None:
                Path(folder, name, f"rank_{rank}").write_bytes(pickle.dumps(mend(dump)))


def mend_gloo_dump(dump: dict) -> dict:
    """A gloo dump as fr_trace can read it. ProcessGroupGloo meets its flight recorder
    before the group has a name, so ``pg_config`` files it under "" while each entry
    names its group ("0"), and fr_trace's lookup of ("0", rank) raises KeyError. Each
    group named in the entries gets its config back, under its own name."""
    mended = {**dump, "pg_config": dict(dump.get("pg_config", {}))}
    unnamed = mended["pg_config"].pop("", None)
    for entry in dump.get("entries", []):
        name, description = entry["process_group"]
        if unnamed and name not in mended["pg_config"]:
            mended["pg_config"][name] = {**unnamed, "name": name, "desc": description}
    return mended


def summary(process: Process, entries: list[Entry] | None) -> dict:
    """What the events record of one rank: its pid, where it is, and its recorder."""
    main = process.main
    frame = reader_frame(main.frames) if main else None
    return {
        "pid": process.pid,
        "where": where_is(f"rank {process.rank}", process),
        "line": frame.where if frame else None,
        "collective": collective_in(main.frames) if main else None,
        "threads": [t.name for t in process.threads],
        "recorder": None if entries is None else [
            {"seq": e.seq, "op": e.op, "sizes": e.sizes, "state": e.state,
             "retired": e.retired, "line": where_of(e.line)} for e in entries],
    }


def debug_server_answers(processes: dict[int, Process]) -> dict:
    """What PyTorch's own debug handlers answer during the hang, rank by rank, and what
    its flight-recorder page (the same code as fr_trace) makes of the JSON dumps."""
    answers: dict = {"health": {}, "traceback": {}, "pyspy": {}}
    dumps = {}
    for rank, process in processes.items():
        for key, handler in (("health", "c10d_health_check"),
                             ("traceback", "dump_traceback"), ("pyspy", "pyspy_dump")):
            raw = ask(process.pid, handler, failed=True)
            answers[key][rank] = None if raw is None else raw.decode(errors="replace")
        raw = ask(process.pid, "fr_trace_json")
        if raw:
            dumps[rank] = json.loads(raw)
    answers["trace_page"] = trace_page(dumps)
    return {"debug_server": answers}


def trace_page(dumps: dict[int, dict]) -> str:
    """What the debug server's FlightRecorder page makes of these dumps: its own
    ``_build_db``, as its handler calls it; the error's one line when it fails."""
    try:
        from torch.distributed.debug._debug_handlers import FlightRecorderHandler
        from torch.distributed.debug._frontend import Response
    except ImportError as error:
        return f"unloadable: {first_line(error)}"
    addresses = [f"rank{rank}" for rank in sorted(dumps)]
    responses = [Response(200, json.dumps(dumps[rank])) for rank in sorted(dumps)]
    try:
        FlightRecorderHandler._build_db(addresses, responses)
    except (Exception, SystemExit) as error:  # noqa: BLE001 (reported, as the page does)
        return f"{type(error).__name__}: {error}"
    return "built"


def stop_job(target: int) -> tuple[int, int]:
    """Stop a job from outside: SIGTERM to its main process (or torchrun's agent), which
    stops its ranks; a few seconds later SIGKILL whatever of it is left (a rank blocked
    in C++ never runs a Python signal handler). Returns (processes, left alive)."""
    import psutil

    everything = job_processes(target)
    alive = everything
    for signalled, grace in ((everything[:1], 1.0), (everything, 2.0), (everything, 5.0)):
        for process in signalled:
            try:
                process.kill() if grace == 5.0 else process.terminate()
            except psutil.Error:
                pass
        # what was signalled ends first (a launcher once it has stopped its ranks); then a
        # moment for the rest to follow it
        until_gone(signalled, grace)
        alive = until_gone(alive, 0.2)
        if not alive:
            break
    return len(everything), len(alive)


def until_gone(processes: list, timeout: float) -> list:
    """Wait until these processes have ended (a zombie has: only unreaped, by a parent
    that is not this process), or the timeout; return those still running."""
    deadline = time.time() + timeout
    while (alive := [p for p in processes if running(p)]) and time.time() < deadline:
        time.sleep(0.05)
    return alive


def running(process) -> bool:
    import psutil

    try:
        return process.status() != psutil.STATUS_ZOMBIE
    except psutil.Error:
        return False


# --- starting a job that hangs ------------------------------------------------------------


def stop_and_clean(ranks) -> None:
    """Stop every rank, and remove the file in which a rank that raised left its error
    for a launcher's join, which never read it (the dead kind's culprit writes one)."""
    stop_all(ranks)
    for path in ranks.error_files:
        try:
            os.unlink(path)
        except (FileNotFoundError, TypeError):
            pass


def collect_dumps(kind: str, world_size: int, culprit, fr_buffer: int | None = None,
                  timeout: float = 30.0) -> dict[int, dict]:
    """Start one kind of hang, wait until every rank's recorder stands still, and return
    the recorders, rank by rank (the lab grades a reading of them): no py-spy needed."""
    import argparse

    import torch.multiprocessing as mp

    job = Job(world_size, "gloo", f"tcp://127.0.0.1:{free_port()}", timeout, False)
    args = argparse.Namespace(demo=kind, culprit=culprit, events=None, fr_buffer=fr_buffer)
    ranks = mp.start_processes(imported_then_run,
                               args=(PRELOAD, rank_main, (job, args), os.getpid()),
                               nprocs=world_size, join=False, start_method="forkserver")
    try:
        deadline, before, earlier = time.time() + timeout, None, None
        while time.time() < deadline:
            time.sleep(0.3)
            dumps = {rank: read_recorder(p.pid) for rank, p in enumerate(ranks.processes)}
            # a recorder may stay empty (a rank stuck before its first collective), but
            # not every recorder; a dump with no "entries" at all is not the pickled one
            # (before its group exists, a rank answers only with the JSON dump)
            if any(dump is None or "entries" not in dump for dump in dumps.values()) or \
                    not any(dump["entries"] for dump in dumps.values()):
                continue
            now = {rank: [(e["collective_seq_id"], e["profiling_name"], e["retired"])
                          for e in dump["entries"]] for rank, dump in dumps.items()}
            if now == before == earlier:  # the same three reads in a row, over 0.6 s
                return dumps
            before, earlier = now, before
        raise TimeoutError(f"{kind} at {world_size} ranks did not settle in {timeout:g} s")
    finally:
        stop_and_clean(ranks)


def hang(job: Job, args, events: Events, diagnosed: bool) -> Verdict | None:
    """Start the job's ranks and let them hang: until the deadline, until a second process
    stops this one, or, with --diagnose, until this process has diagnosed them."""
    import torch.multiprocessing as mp

    say_main(f"{job.world_size} ranks, backend gloo: {args.demo}, rank {args.culprit} "
             f"misbehaves")
    server = mp.get_context("forkserver")
    server.set_forkserver_preload(["torch", "torch.distributed", *PRELOAD])
    ranks = mp.start_processes(imported_then_run,
                               args=(PRELOAD, rank_main, (job, args), os.getpid()),
                               nprocs=job.world_size, join=False, start_method="forkserver")
    deadline = time.time() + job.timeout
    try:
        if diagnosed:
            return diagnose(os.getpid(), events, job.world_size, wait=job.timeout / 2,
                            save_dumps=args.save_dumps, debug_server=args.debug_server)
        pid = os.getpid()
        say_main(f"pid {pid}: the job hangs now, on purpose, for {job.timeout:g} s. From "
                 f"a second terminal: python -m workers.hangs diagnose {pid}")
        while time.time() < deadline:
            if not any(process.is_alive() for process in ranks.processes):
                return None
            time.sleep(0.2)
        say_main(f"still hanging after {job.timeout:g} s: stopping every rank")
        return None
    finally:
        stop_and_clean(ranks)


def stopped_from_outside(signum, frame) -> None:
    """SIGTERM (a diagnosis, or a kill): stop the ranks on the way out."""
    say_main("stopped from outside (SIGTERM): every rank stops")
    raise SystemExit(143)


def demo_kind(job: Job, args, events: Events) -> int:
    signal.signal(signal.SIGTERM, stopped_from_outside)
    verdict = hang(job, args, events, diagnosed=args.diagnose)
    if verdict is not None:
        say_main("every rank was stopped")
        return 0 if verdict.culprits else 1
    return 0


def demo_every(job: Job, args, events: Events) -> int:
    """Every kind in turn, each diagnosed by this process once it hangs, then stopped."""
    signal.signal(signal.SIGTERM, stopped_from_outside)
    found = 0
    folder = args.save_dumps
    for kind in KINDS:
        args.demo = kind
        args.save_dumps = folder and os.path.join(folder, kind)
        began = time.time()
        verdict = hang(job.on_fresh_port(), args, events, diagnosed=True)
        events.emit("main", "kind done", kind=kind, t=began, t_end=time.time(),
                    world_size=job.world_size, culprit=args.culprit)
        found += bool(verdict and verdict.culprits)
    say_main(f"{found} of {len(KINDS)} hangs diagnosed; every rank was stopped")
    return 0 if found == len(KINDS) else 1


def demo_diagnose(args, events: Events) -> int:
    import psutil

    if not str(args.pid).isdigit():
        fail(f"PID must be a process id (a whole number), got {args.pid!r}")
    args.pid = int(args.pid)
    try:
        psutil.Process(args.pid)
    except psutil.NoSuchProcess:
        fail(f"no process {args.pid}")
    verdict = diagnose(args.pid, events, wait=args.timeout, save_dumps=args.save_dumps,
                       debug_server=args.debug_server)
    if args.stop:
        count, left = stop_job(args.pid)
        say_main(f"stopped the job: {count} processes, {left} left")
    return 0 if verdict.culprits else 1


PROGRAM = "programs/hang.py"


def demo_second_terminal(args, events: Events) -> int:
    """Run the plain program, and do from here what a reader does from a second terminal
    once it hangs: py-spy dump a rank, kill -USR1 every rank, then diagnose and stop it."""
    env = {**os.environ, "MASTER_PORT": str(free_port()), "GLOO_SOCKET_IFNAME": "lo"}
    env.pop("PYTHONUNBUFFERED", None)  # the program flushes its own lines
    path = Path(args.program)
    path = path if path.exists() else REPOSITORY / args.program  # a page runs in book/
    if not path.is_file():
        fail(f"no program {args.program}")
    program = subprocess.Popen([sys.executable, str(path)], env=env,
                               stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, text=True)
    printed: dict[int, int] = {}  # rank: pid, as the program prints them
    threading.Thread(target=echo_pids, args=(program.stdout, printed), daemon=True).start()
    try:
        unread = stacks_unreadable(program.pid)
        events.emit("main", "looked", stacks=unread or "read")
        if unread:
            return without_py_spy(program, printed, unread, args, events)
        # as a reader does: look once both ranks printed their pids, past their start-up
        # (py-spy stopping a rank inside TCPStore's connect makes it retry a second later,
        # with the rank's Python stack at the same line in both looks)
        deadline = time.time() + args.timeout
        if not printed_both(program, printed, deadline):
            say_main(f"the program did not hang within {args.timeout:g} s")
            return 1
        processes = wait_until_hung(program.pid, deadline, 2)
        if len(processes) < 2:
            say_main(f"the program did not hang within {args.timeout:g} s")
            return 1
        events.emit("main", "hung", pids={r: p.pid for r, p in processes.items()})
        pid = processes[0].pid
        say_main(f"$ py-spy dump --pid {pid}")
        sys.stdout.flush()
        plain = {k: v for k, v in os.environ.items() if k != "CLICOLOR_FORCE"}  # Jupyter's
        subprocess.run([py_spy(), "dump", "--pid", str(pid)], timeout=30, env=plain)
        for process in processes.values():
            say_main(f"$ kill -USR1 {process.pid}")
            os.kill(process.pid, signal.SIGUSR1)
            time.sleep(0.3)  # faulthandler writes from the rank's own signal handler
        say_main(f"$ python -m workers.hangs diagnose {program.pid}")
        # the same command's code, run here: this process has imported it already
        args.pid, args.stop = program.pid, True
        args.save_dumps, args.debug_server = None, False
        return demo_diagnose(args, events)
    except CannotLook as error:
        fail(str(error))
    finally:
        if program.poll() is None:
            program.kill()
        program.wait(timeout=10)


def echo_pids(stream, printed: dict[int, int]) -> None:
    """Pass the program's lines on as they come, and note the pid each rank prints."""
    for line in stream:
        sys.stdout.write(line)
        sys.stdout.flush()
        if found := re.match(r"\[rank (\d+)\] pid (\d+)$", line.strip()):
            printed[int(found[1])] = int(found[2])


def printed_both(program, printed: dict[int, int], deadline: float) -> bool:
    """Wait until both ranks printed their pids (after their process group is made), the
    program ends, or the deadline passes; whether both printed."""
    while len(printed) < 2 and program.poll() is None and time.time() < deadline:
        time.sleep(0.1)
    return len(printed) == 2


def stacks_unreadable(pid: int) -> str | None:
    """Why py-spy cannot read process ``pid`` (a key of UNREAD), or None when it may."""
    if free_threaded():
        return "free-threaded"
    try:
        dump_stacks(pid)
    except CannotLook as error:
        if str(error) != PTRACE_REFUSED:
            raise
        return "refused"
    return None


def without_py_spy(program, printed: dict[int, int], unread: str, args,
                   events: Events) -> int:
    """second-terminal where py-spy may not read the program: the pids it printed, once
    both ranks printed theirs, then faulthandler, which needs no permission; the diagnosis
    has nothing to read (the program serves no recorder), so this stops the job itself."""
    if not printed_both(program, printed, time.time() + args.timeout):
        say_main(f"the program did not hang within {args.timeout:g} s")
        return 1
    time.sleep(0.5)  # each rank prints its pid just before it waits
    events.emit("main", "hung", pids=printed)
    say_main(f"$ py-spy dump --pid {printed[0]}")
    sys.stdout.flush()
    if unread == "refused":  # what a reader sees: py-spy's own refusal
        plain = {k: v for k, v in os.environ.items() if k != "CLICOLOR_FORCE"}
        subprocess.run([py_spy(), "dump", "--pid", str(printed[0])], timeout=30, env=plain)
    else:
        say_main(f"not run: {UNREAD[unread]}")
    for rank in sorted(printed):
        say_main(f"$ kill -USR1 {printed[rank]}")
        os.kill(printed[rank], signal.SIGUSR1)
        time.sleep(0.3)  # faulthandler writes from the rank's own signal handler
    say_main(f"the diagnosis of pid {program.pid}: not run, "
             f"{UNREAD[unread]}, and the program serves no flight recorder to read instead")
    count, left = stop_job(program.pid)
    say_main(f"stopped the job: {count} processes, {left} left")
    return 0


# --- the command line ---------------------------------------------------------------------


def command_line() -> Parser:
    parser = Parser(prog="python -m workers.hangs", description=__doc__.split("\n\n")[0])
    demos = parser.add_subparsers(dest="demo", required=True, metavar="DEMO")
    for name, (_, text) in KINDS.items():
        kind = demos.add_parser(name, help=text)
        add_kind_options(kind)
        kind.add_argument("--diagnose", action="store_true",
                          help="once the job hangs, diagnose it from this process, then "
                               "stop it")
        add_common_options(kind, timeout=60)
    every = demos.add_parser("every", help="every kind in turn, each diagnosed and stopped")
    add_kind_options(every)
    add_common_options(every, timeout=60)
    diagnosis = demos.add_parser(
        "diagnose", help="look at a running job: which ranks are behind, and where")
    diagnosis.add_argument("pid", help="the pid of the job's main process, or of torchrun "
                                       "(its agent)")
    diagnosis.add_argument("--no-stop", dest="stop", action="store_false",
                           help="leave the job running afterwards")
    add_dump_options(diagnosis)
    add_common_options(diagnosis, timeout=30)
    second = demos.add_parser("second-terminal",
                              help=f"run {PROGRAM} and look at it from outside")
    second.add_argument("--program", default=PROGRAM, metavar="PATH",
                        help=f"the program to run (default {PROGRAM})")
    add_common_options(second, timeout=60)
    return parser


def add_kind_options(parser) -> None:
    parser.add_argument("--world-size", type=int, default=3,
                        help="ranks to start (default 3; under torchrun: its WORLD_SIZE)")
    parser.add_argument("--culprit", type=int, metavar="RANK",
                        help="the rank that misbehaves (default: the last)")
    add_dump_options(parser)


def add_dump_options(parser) -> None:
    parser.add_argument("--save-dumps", metavar="FOLDER",
                        help="write each rank's flight recorder to FOLDER/rank_<r>")
    parser.add_argument("--debug-server", action="store_true",
                        help="also ask each rank's debug handlers (health, tracebacks)")


def main(argv=None) -> int:
    parser = command_line()
    args = parser.parse_args(argv)
    events = open_events(args.events)
    try:
        if args.demo == "diagnose":
            return demo_diagnose(args, events)
        if args.demo == "second-terminal":
            return demo_second_terminal(args, events)
        args.backend = "gloo"
        job = job_from_args(parser, args)
        args.culprit = job.world_size - 1 if args.culprit is None else args.culprit
        if not 0 <= args.culprit < job.world_size:
            parser.error(f"--culprit must be a rank of the job, 0 to {job.world_size - 1}")
        if job.started_as_rank:  # torchrun started this process as one rank
            import_modules(PRELOAD)
            rank_main(int(os.environ["RANK"]), job, args)
            return 0
        if args.demo == "every":
            return demo_every(job, args, events)
        return demo_kind(job, args, events)
    except CannotLook as error:
        fail(str(error))


if __name__ == "__main__":
    exit_now(main())
