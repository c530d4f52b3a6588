"""What every lab's checker shares: load the reader's function, run it on real ranks, count
what it sends, and turn what happened into a verdict.

The main process (``check``) runs one job per world size with ``workers.ranks.launch``:
the ranks come from the forkserver and stop as a whole, at the end or when the job
outlives its timeout (a deadlock). Each rank (``rank_entry``)

* sends what it prints to a file of its own, so the verdict can quote it;
* wraps ``torch.distributed``'s communication functions (``Calls``): each call is counted
  (bytes, peer, group) while the reader's function runs, each ``Work`` an ``isend`` or an
  ``async_op=True`` call returns is followed until someone waits for it, and each call is
  written to a log before it starts and after it ends, so after a deadlock the checker can
  say where every rank was waiting. This is the checker's instrumentation: the reader's
  code, like the book's, calls plain ``torch.distributed``;
* joins a gloo group on loopback when the lab needs one, imports the reader's file, runs
  the lab's ``on_rank`` and saves what it returns (``torch.save``) for the lab's ``judge``.

A lab module (``workers/labs/<lab>.py``) says what it checks: ``CHAPTER``, ``FUNCTION``,
``ASKS`` (one line), ``REREAD`` (the section to reread), ``WORLD_SIZES``, ``GROUP``
(whether the ranks join a default group first), ``TIMEOUT``, and the functions
``setup(world_size)`` (what every rank is given), ``on_rank(rank, world_size, solution,
calls, given)`` and ``judge(world_size, outcome, given)`` (a list of ``Finding``).
"""

from __future__ import annotations

import ast
import importlib
import importlib.util
import inspect
import os
import re
import shutil
import sys
import tempfile
import threading
import time
import traceback
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

REPOSITORY = Path(__file__).resolve().parent.parent.parent
# What the labs' ranks import beyond torch: in the forkserver once, when the checker
# starts it. A lab whose ranks step an optimizer lists torch._dynamo in its own PRELOAD:
# the first step imports it, and imported after init_process_group it keeps a destroyed
# group alive (workers/ranks.py).
PRELOAD = ("workers.labs.harness",)
EVERY_PRELOAD = (*PRELOAD, "torch._dynamo", "workers.mnist")  # the union of the labs'


class BadInput(Exception):
    """The checker cannot check: an unknown lab, a missing file, a stub not filled in.
    Its message is the one line the reader sees (exit code 2)."""


@dataclass
class Finding:
    held: bool
    text: str


@dataclass
class Outcome:
    """What one job of ``world_size`` ranks did, as the main process sees it afterwards."""

    world_size: int
    seconds: float
    results: dict[int, dict] = field(default_factory=dict)  # what on_rank returned
    raised: dict[int, dict] = field(default_factory=dict)  # rank: {"line", "where", ...}
    waiting: dict[int, str] = field(default_factory=dict)  # rank: the call it was in
    dropped: dict[int, list[str]] = field(default_factory=dict)  # Works never waited for
    logs: dict[int, list[str]] = field(default_factory=dict)  # each rank's call log
    timed_out: bool = False
    launcher_said: str = ""  # launch()'s own line, when the job did not end well
    printed: dict[int, list[str]] = field(default_factory=dict)

    def calls(self, rank: int) -> list[dict]:
        return self.results[rank]["calls"]

    def all_calls(self) -> list[dict]:
        return [call for rank in sorted(self.results) for call in self.calls(rank)]


@dataclass
class Verdict:
    """The checker's answer: ``code`` 0 (passed), 1 (failed) or 2 (could not check)."""

    lab: str
    code: int
    lines: list[str]
    seconds: float = 0.0
    outcomes: list[Outcome] = field(default_factory=list, repr=False)

    @property
    def passed(self) -> bool:
        return self.code == 0

    def __str__(self) -> str:
        return "\n".join(self.lines)


# --- the reader's file --------------------------------------------------------------------


def resolve(path: str | os.PathLike) -> Path:
    """The reader's file: as given, or relative to the clone's root (a page runs in
    book/)."""
    given = Path(path)
    for candidate in (given, REPOSITORY / given):
        if candidate.is_file():
            return candidate.resolve()
    if given.exists():
        raise BadInput(f"{path} is not a file")
    raise BadInput(f"no file {path}")


def inspect_source(path: Path, function: str) -> None:
    """Refuse, in one line, a file Python cannot read, one without ``function``, or one
    whose ``function`` is still the stub (its body only raises NotImplementedError)."""
    try:
        tree = ast.parse(path.read_text(), filename=str(path))
    except SyntaxError as error:
        raise BadInput(f"{shown(path)} line {error.lineno}: {error.msg}") from None
    except (OSError, UnicodeDecodeError) as error:
        raise BadInput(f"cannot read {shown(path)}: {error}") from None
    found = [node for node in tree.body
             if isinstance(node, ast.FunctionDef) and node.name == function]
    if not found:
        raise BadInput(f"{shown(path)} defines no function {function}() at its top level")
    body = found[-1].body
    if body and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant):
        body = body[1:]  # the docstring
    if len(body) == 1 and isinstance(body[0], ast.Raise) and "NotImplementedError" in \
            ast.unparse(body[0]):
        raise BadInput(not_implemented(path, function))


def not_implemented(path, function: str) -> str:
    return (f"{shown(path)}: {function}() is not implemented yet (it raises "
            f"NotImplementedError): write its body, then check again")


def shown(path) -> str:
    """A path as the reader would type it: relative to the clone's root when inside it."""
    path = Path(path)
    try:
        return str(path.resolve().relative_to(REPOSITORY))
    except ValueError:
        return str(path)


def load_function(path: str, function: str):
    spec = importlib.util.spec_from_file_location("lab_solution", path)
    module = importlib.util.module_from_spec(spec)
    sys.modules["lab_solution"] = module
    spec.loader.exec_module(module)
    return getattr(module, function)


# --- counting torch.distributed, in the checker's ranks only ------------------------------

# The functions a lab's solution may call, and which argument holds the peer.
POINT_TO_POINT = {"isend": "dst", "irecv": "src", "send": "dst", "recv": "src"}
# (the *_single names are 2.13's for the flat forms; older releases lack them)
COLLECTIVES = ("all_reduce", "broadcast", "reduce", "all_gather", "all_gather_into_tensor",
               "all_gather_single", "reduce_scatter", "reduce_scatter_tensor",
               "reduce_scatter_single", "gather", "scatter", "barrier",
               "all_to_all", "all_to_all_single", "monitored_barrier",
               "all_gather_object", "broadcast_object_list", "new_group", "new_subgroups")
SENDS = ("isend", "send")
RECEIVES = ("irecv", "recv")


def tensor_bytes(value) -> int:
    import torch

    if isinstance(value, torch.Tensor):
        return value.numel() * value.element_size()
    if isinstance(value, (list, tuple)):
        return sum(tensor_bytes(item) for item in value)
    return 0


class TrackedWork:
    """A ``Work`` as the reader gets it from a counted call: the same methods, and a note
    of whether anyone waited for it (``wait``, ``get_future``, or ``is_completed`` True)."""

    def __init__(self, work, record: dict, calls: Calls, serial: int):
        self._work, self._record, self._calls = work, record, calls
        self._serial = serial
        calls.note(f"work {serial} {record['what']}")

    def _waited(self) -> None:
        if not self._record["waited"]:
            self._record["waited"] = True
            self._calls.note(f"waited {self._serial}")

    def __del__(self):
        if not self._record["waited"]:  # dropped, never waited for: say so in the log
            self._calls.note(f"dropped {self._serial} {self._record['what']}")

    def wait(self, *args, **kwargs):
        self._waited()
        with self._calls.logged(f"wait() on its {self._record['what']}"):
            return self._work.wait(*args, **kwargs)

    def get_future(self):
        self._waited()
        return self._work.get_future()

    def is_completed(self):
        done = self._work.is_completed()
        if done:
            self._waited()
        return done

    def __getattr__(self, name):
        return getattr(self._work, name)


class Calls:
    """Counts this rank's calls of ``torch.distributed`` while ``counting`` is on, and logs
    every call's start and end to a file, so that a rank stopped in a deadlock can be
    found waiting in its last call."""

    def __init__(self, log_path: str):
        self.records: list[dict] = []
        self.counting = False
        self._log = os.open(log_path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        self._depth = threading.local()
        self._serial = 0

    def note(self, text: str) -> None:
        os.write(self._log, (text.replace("\n", " ") + "\n").encode())

    @contextmanager
    def logged(self, text: str):
        self._serial += 1
        serial = self._serial
        self.note(f"enter {serial} {text}")
        try:
            yield
        finally:  # a call that raised has ended too (the reader may catch the error)
            self.note(f"leave {serial}")

    @contextmanager
    def reader(self):
        """Count the calls of the block: the reader's function."""
        self.counting = True
        self.note("phase in your function")
        try:
            yield
        finally:
            self.counting = False
            self.note("phase after your function returned")

    def install(self) -> None:
        import torch.distributed as dist
        import torch.distributed.distributed_c10d as c10d

        for name in (*POINT_TO_POINT, *COLLECTIVES):
            original = getattr(dist, name, None)
            if original is None:
                continue
            wrapped = self.wrap(name, original)
            setattr(dist, name, wrapped)
            if name in ("isend", "irecv"):  # P2POp accepts only these two by identity
                setattr(c10d, name, wrapped)

    def wrap(self, name: str, original):
        signature = inspect.signature(original)
        calls = self

        def counted(*args, **kwargs):
            if getattr(calls._depth, "inside", False):  # send() calls isend() inside
                return original(*args, **kwargs)
            try:
                bound = signature.bind(*args, **kwargs)
            except TypeError:
                return original(*args, **kwargs)  # let torch say what is wrong
            record = calls.describe(name, bound.arguments)
            calls._depth.inside = True
            try:
                with calls.logged(record["what"]):
                    result = original(*args, **kwargs)
            finally:
                calls._depth.inside = False
            if calls.counting:
                calls.records.append(record)
            if calls.counting and result is not None and hasattr(result, "wait") and \
                    name not in ("new_group", "batch_isend_irecv"):
                record["waited"] = False
                return TrackedWork(result, record, calls, calls._serial)
            return result

        counted.__name__ = counted.__qualname__ = name
        counted.__doc__ = original.__doc__
        return counted

    def describe(self, name: str, arguments: dict) -> dict:
        import torch.distributed as dist

        group = arguments.get("group")
        record = {"name": name, "group": None, "peer": None, "sent": 0, "received": 0,
                  "op": None}
        try:
            if group is not None and name not in ("new_group", "new_subgroups"):
                record["group"] = dist.get_process_group_ranks(group)
        except Exception:  # a group this rank is not in: torch will say so
            pass
        tensor = arguments.get("tensor")
        if name in POINT_TO_POINT:
            key = POINT_TO_POINT[name]
            peer = arguments.get(key)
            if peer is None and arguments.get(f"group_{key}") is not None:
                peer = arguments[f"group_{key}"]  # a rank in ``group``: make it global
                try:
                    if group is not None:
                        peer = dist.get_global_rank(group, peer)
                except Exception:
                    peer = f"group rank {peer}"
            record["peer"] = peer
            record["numel"] = tensor.numel() if tensor is not None else 0
            record["sent" if name in SENDS else "received"] = tensor_bytes(tensor)
            record["what"] = f"{name}({key}={peer}, {tensor_bytes(tensor)} bytes)"
            return record
        if name == "new_group":
            ranks = arguments.get("ranks")
            record["ranks"] = list(ranks) if ranks is not None else None
            record["what"] = f"new_group({record['ranks']})"
            return record
        inputs = {"all_gather": "tensor", "all_gather_into_tensor": "input_tensor",
                  "all_gather_single": "input_tensor", "reduce_scatter": "input_list",
                  "reduce_scatter_tensor": "input", "reduce_scatter_single": "input",
                  "gather": "tensor", "scatter": "scatter_list",
                  "all_to_all": "input_tensor_list", "all_to_all_single": "input",
                  }.get(name, "tensor")
        record["sent"] = tensor_bytes(arguments.get(inputs))
        record["async"] = bool(arguments.get("async_op"))
        op = arguments.get("op")
        record["op"] = str(op).rpartition(".")[2] if op is not None else None
        for key in ("src", "dst"):
            if arguments.get(key) is not None:
                record["peer"] = arguments[key]
        where = f"group {record['group']}" if record["group"] is not None else "all ranks"
        peer = f", {'src' if name == 'broadcast' else 'root'}={record['peer']}" \
            if record["peer"] is not None else ""
        record["what"] = f"{name}({record['sent']} bytes{peer}, {where})"
        return record

    def unwaited(self) -> list[str]:
        return [record["what"] for record in self.records if record.get("waited") is False]


# --- a rank -------------------------------------------------------------------------------


@dataclass
class Plan:
    """What every rank of one job is told (pickled to it)."""

    lab: str
    world_size: int
    path: str
    port: int
    folder: str
    given: object
    group_timeout: float


def rank_entry(rank: int, plan: Plan) -> None:
    """One rank of a lab's job (started by ``launch``)."""
    import torch

    folder = Path(plan.folder)
    printed = os.open(folder / f"rank{rank}.out", os.O_WRONLY | os.O_CREAT, 0o644)
    os.dup2(printed, 1)
    os.dup2(printed, 2)
    torch.set_num_threads(1)  # small tensors, several ranks on a few cores
    lab = importlib.import_module(f"workers.labs.{plan.lab}")
    calls = Calls(str(folder / f"rank{rank}.log"))
    calls.install()
    joined = False
    try:
        if lab.GROUP:
            join(rank, plan, calls)
            joined = True
        solution = load_function(plan.path, lab.FUNCTION)
        result = lab.on_rank(rank, plan.world_size, solution, calls, plan.given)
        result["calls"] = calls.records
        result["unwaited"] = calls.unwaited()
        torch.save(result, folder / f"rank{rank}.partial")
        os.rename(folder / f"rank{rank}.partial", folder / f"rank{rank}.result")
        with calls.logged("the checker's wait for every rank to return"):
            every_rank_returned(folder, plan.world_size)
    except BaseException as error:  # noqa: B036 - said to the main process, then re-raised
        save_error(folder / f"rank{rank}.error", error, plan.path)
        sys.stdout.flush()
        os._exit(1)  # at once: the others may wait for this rank, and launch stops them
    if joined:
        import torch.distributed as dist

        with calls.logged("destroy_process_group(), after your function returned"):
            dist.destroy_process_group()
    sys.stdout.flush()
    sys.stderr.flush()


def every_rank_returned(folder: Path, world_size: int) -> None:
    """Wait until every rank has saved its result: a rank that left now would leave a peer
    stuck in a call with it failing on a closed connection, hiding the real mistake (the
    job's timeout ends the wait when a rank never returns)."""
    while len(list(folder.glob("rank*.result"))) < world_size:
        time.sleep(0.01)


def join(rank: int, plan: Plan, calls: Calls) -> None:
    from datetime import timedelta

    import torch.distributed as dist

    with calls.logged("init_process_group (the checker's)"):
        dist.init_process_group(
            "gloo", init_method=f"tcp://127.0.0.1:{plan.port}", rank=rank,
            world_size=plan.world_size, timeout=timedelta(seconds=plan.group_timeout))


def save_error(path: Path, error: BaseException, solution: str) -> None:
    import torch

    frames = traceback.extract_tb(error.__traceback__)
    where = ""
    for frame in frames:
        if os.path.realpath(frame.filename) == os.path.realpath(solution):
            where = f"{shown(solution)} line {frame.lineno}: {(frame.line or '').strip()}"
    line = f"{type(error).__name__}: {first_line(error)}"
    torch.save({"line": line, "where": where, "type": type(error).__name__,
                "not_implemented": isinstance(error, NotImplementedError)}, path)


# what c10d's C++ logging puts before a message: "[rank0]:[F1123 21:00:06.16 x.cpp:15] "
C10D_PREFIX = re.compile(r"^(\[rank\d+\]:)?(\[[WEIF]\d{4} [^\]]*\] ?)?")


def first_line(error: BaseException) -> str:
    text = str(error).strip()
    return C10D_PREFIX.sub("", text.splitlines()[0])[:300] if text else ""


# --- the main process ---------------------------------------------------------------------


def start_forkserver(preload=EVERY_PRELOAD) -> None:
    """Start the forkserver the ranks come from, unless it runs: importing what every lab
    needs, so that checks in one process (the tests) share it."""
    import multiprocessing
    from multiprocessing import forkserver

    multiprocessing.get_context("forkserver").set_forkserver_preload(
        ["torch", "torch.distributed", *preload])
    forkserver.ensure_running()


@contextmanager
def captured_stdout():
    """Collect what this process writes to its standard output (``launch`` says one line
    when a job ends badly; the verdict says it in its own words). On an exception, what
    was said is passed on."""
    sys.stdout.flush()
    try:
        out = sys.stdout.fileno()  # where launch() writes: not fd 1 under pytest's capture
    except (AttributeError, OSError, ValueError):
        out = 1
    saved = os.dup(out)
    with tempfile.TemporaryFile() as said:
        os.dup2(said.fileno(), out)
        text = []
        try:
            yield text
        except BaseException:
            restore(out, saved, said, text)
            sys.stdout.write("".join(text))
            raise
        restore(out, saved, said, text)


def restore(out: int, saved: int, said, text: list[str]) -> None:
    os.dup2(saved, out)
    os.close(saved)
    said.seek(0)
    text.append(said.read().decode(errors="replace"))


def run_job(lab, world_size: int, path: Path, timeout: float, given) -> Outcome:
    """Run the lab on ``world_size`` ranks; what they did, read back from their files."""
    import torch

    from workers.ranks import free_port, launch

    folder = tempfile.mkdtemp(prefix=f"lab-{lab.__name__.rpartition('.')[2]}-")
    try:
        plan = Plan(lab.__name__.rpartition(".")[2], world_size, str(path), free_port(),
                    folder, given, group_timeout=timeout + 60)
        start_forkserver()
        begin = time.monotonic()
        with captured_stdout() as said:
            code = launch(rank_entry, (plan,), world_size, timeout,
                          preload=(*PRELOAD, *lab.PRELOAD))
        outcome = Outcome(world_size, time.monotonic() - begin)
        outcome.launcher_said = "".join(said).strip() if code else ""
        outcome.timed_out = "still running after" in outcome.launcher_said
        for rank in range(world_size):
            base = Path(folder) / f"rank{rank}"
            if base.with_suffix(".result").exists():
                outcome.results[rank] = torch.load(base.with_suffix(".result"),
                                                   weights_only=False)
            elif base.with_suffix(".error").exists():
                outcome.raised[rank] = torch.load(base.with_suffix(".error"),
                                                  weights_only=False)
            if base.with_suffix(".log").exists():
                outcome.logs[rank] = base.with_suffix(".log").read_text(
                    errors="replace").splitlines()
            if rank not in outcome.results and base.with_suffix(".log").exists():
                where, dropped = read_log(base.with_suffix(".log"))
                if rank not in outcome.raised:
                    outcome.waiting[rank] = where
                if dropped:
                    outcome.dropped[rank] = dropped
            out = base.with_suffix(".out")
            if out.exists():
                outcome.printed[rank] = out.read_text(errors="replace").splitlines()
        if code and not outcome.raised and outcome.waiting and \
                outcome.seconds >= timeout and not outcome.launcher_said:
            outcome.timed_out = True  # launch()'s line went elsewhere; the clock says it
        return outcome
    finally:
        shutil.rmtree(folder, ignore_errors=True)


def read_log(log: Path) -> tuple[str, list[str]]:
    """Where a rank was when it was stopped (the call it entered and never left), and the
    Works it dropped without waiting for them."""
    open_calls, phase, dropped = {}, "before your function", []
    for line in log.read_text(errors="replace").splitlines():
        kind, _, rest = line.partition(" ")
        if kind == "enter":
            serial, _, what = rest.partition(" ")
            open_calls[serial] = what
        elif kind == "leave":
            open_calls.pop(rest, None)
        elif kind == "phase":
            phase = rest
        elif kind == "dropped":
            dropped.append(rest.partition(" ")[2])
    if open_calls:
        return f"waiting in {list(open_calls.values())[-1]}, {phase}", dropped
    return f"busy {phase} (in no torch.distributed call of its own)", dropped


# --- findings every lab shares ------------------------------------------------------------


def ended_findings(outcome: Outcome, function: str) -> list[Finding]:
    """Failures that end a job early: a rank raised, the job outlived its timeout (a
    deadlock), or it ended in some other way. Empty when every rank returned."""
    if outcome.raised:
        first = min(outcome.raised)
        error = outcome.raised[first]
        where = f" at {error['where']}" if error["where"] else ""
        others = sorted(set(outcome.raised) - {first})
        also = f" (rank{'s' if len(others) > 1 else ''} {list_of(others)} too)" \
            if others else ""
        return [Finding(False, f"rank {first} raised {error['line']}{where}{also}")]
    if outcome.timed_out:
        done = sorted(outcome.results)
        texts = [f"deadlock: the ranks were still running after {outcome.seconds:.0f} s "
                 f"and were stopped"]
        forgotten = {**outcome.dropped,
                     **{rank: outcome.results[rank]["unwaited"] for rank in done
                        if outcome.results[rank]["unwaited"]}}
        if forgotten:
            rank, works = min(forgotten.items())
            texts[0] = (f"forgotten wait(): rank {rank} never waited for the Work of its "
                        f"{works[0]}{' and more' if len(works) > 1 else ''}, and the job "
                        f"hung: every rank was stopped after {outcome.seconds:.0f} s")
        elif outcome.waiting and all(
                re.search(r"waiting in (recv|wait\(\) on its irecv)", where)
                for where in outcome.waiting.values()) and not done:
            texts[0] += ("; every rank was waiting to receive, so none was sending: "
                         "start a send (isend) before you wait to receive")
        elif len({calls_named(where) for where in outcome.waiting.values()}) > 1:
            texts[0] += ("; the ranks were in different calls: every rank must make "
                         "the same collective calls, in the same order")
        for rank in sorted(outcome.waiting):
            texts.append(f"  rank {rank} was {outcome.waiting[rank]}")
        if done:
            texts.append(f"  rank{'s' if len(done) > 1 else ''} {list_of(done)} had "
                         f"returned from {function}()")
        return [Finding(False, "\n".join(texts))]
    missing = [rank for rank in range(outcome.world_size) if rank not in outcome.results]
    if missing:
        said = outcome.launcher_said.removeprefix("[main] ") or "no result"
        return [Finding(False, f"rank {missing[0]} ended without a result: {said}")]
    return []


def calls_named(where: str) -> str:
    """``broadcast(src=1)`` from ``waiting in broadcast(16 bytes, src=1, all ranks)``."""
    match = re.match(r"waiting in (\w+(?:\(\) on its \w+)?)", where)
    peer = re.search(r"(src|root)=(\d+)", where)
    group = re.search(r"group \[[\d, ]*\]", where)
    name = match.group(1) if match else where
    return name + (f"({peer.group(0)})" if peer and "recv" not in name else "") + \
        (f" in {group.group(0)}" if group else "")


def wait_findings(outcome: Outcome) -> list[Finding]:
    """Every Work an isend/irecv (or an async_op=True call) returned was waited for."""
    forgotten = {rank: result["unwaited"] for rank, result in outcome.results.items()
                 if result["unwaited"]}
    if not forgotten:
        if any("waited" in call for call in outcome.all_calls()):
            return [Finding(True, "every Work (from isend, irecv or async_op=True) was "
                                  "waited for")]
        return []
    rank, works = next(iter(forgotten.items()))
    return [Finding(False, f"forgotten wait(): rank {rank} never waited for {len(works)} "
                           f"Work(s), the first from {works[0]}; until wait() returns, a "
                           f"sent buffer may still be read and a received one is not "
                           f"yet written")]


def calls_summary(calls: list[dict]) -> str:
    """``isend x2 to rank 1 (32 bytes), irecv x2 from rank 0 (32 bytes)``: a rank's calls
    of torch.distributed in the reader's function, by kind."""
    kinds: dict[str, dict] = {}
    for call in calls:
        kind = kinds.setdefault(call["name"], {"count": 0, "bytes": 0, "peers": set()})
        kind["count"] += 1
        kind["bytes"] += call["sent"] + call["received"]
        if call["name"] in POINT_TO_POINT and call["peer"] is not None:
            kind["peers"].add(call["peer"])
        elif call["group"] is not None:
            kind["peers"].add(f"group {call['group']}")
    parts = []
    for name, kind in kinds.items():
        to = " from " if name in RECEIVES else " to " if name in SENDS else " in "
        peers = to + list_of(sorted(map(str, kind["peers"]))) if kind["peers"] else ""
        if peers and name in POINT_TO_POINT:
            peers = peers.replace(to, to + "rank" + "s" * (len(kind["peers"]) > 1) + " ")
        size = f" ({kind['bytes']} bytes)" if kind["bytes"] else ""
        parts.append(f"{name} x{kind['count']}{peers}{size}")
    return ", ".join(parts)


def integer_values(seed: int, numel: int):
    """``numel`` whole numbers in [-50, 50), as floats, from ``seed``: sums stay exact."""
    import torch

    generator = torch.Generator().manual_seed(seed)
    return torch.randint(-50, 50, (numel,), generator=generator).float()


def all_reduced_in_place(rank: int, seed: int, numel: int, solution, calls) -> dict:
    """A rank of an all-reduce lab: the reader's ``solution(tensor)`` sums ``tensor`` over
    the ranks in place; the library's all_reduce of the same start is the answer."""
    import torch.distributed as dist

    tensor = integer_values(seed + rank, numel)
    with calls.reader():
        solution(tensor)
    expected = integer_values(seed + rank, numel)
    dist.all_reduce(expected)
    return {"result": tensor, "expected": expected, "bytes": tensor.numel() * 4}


def list_of(items) -> str:
    items = [str(item) for item in items]
    return items[0] if len(items) == 1 else ", ".join(items[:-1]) + " and " + items[-1]


def printed_lines(outcome: Outcome, most: int = 6) -> list[str]:
    """What the reader's code printed, a few lines, for a failed check."""
    lines = [f"[rank {rank}] {text}" for rank, texts in sorted(outcome.printed.items())
             for text in texts if text.strip() and not C10D_PREFIX.match(text).group(0)
             and not text.startswith(" ")]
    if not lines:
        return []
    shown_lines = lines[:most]
    more = f" (and {len(lines) - most} more)" if len(lines) > most else ""
    return [f"  what your ranks printed{more}:"] + [f"    {line}" for line in shown_lines]
