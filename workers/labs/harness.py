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
import functools
import importlib
import importlib.util
import inspect
import linecache
import os
import re
import shutil
import sys
import tempfile
import threading
import time
import traceback
import weakref
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

REPOSITORY = Path(__file__).resolve().parent.parent.parent
# What the labs' ranks import beyond torch: in the forkserver once, when the checker
# starts it. A lab whose ranks step an optimizer lists torch._dynamo in its own PRELOAD:
# the first step imports it, and imported after init_process_group it keeps a destroyed
# group alive (workers/ranks.py).
PRELOAD = ("workers.labs.harness",)
# The union of the labs', and last the module that notes where they hold the functions
# the checker replaces (replace_everywhere)
INDEXED = "workers.labs.preloaded"
EVERY_PRELOAD = (*PRELOAD, "torch._dynamo", "workers.mnist", INDEXED)


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
    stalled: float | None = None  # seconds into the job when every rank was stuck
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
    seed: int | None = None

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
# A solution reaches a collective by many roads: ``dist.all_reduce``, the same function
# imported from torch.distributed.distributed_c10d or bound by ``from ... import``, a
# functools.partial of it, the process group's own ``allreduce`` method, a backend's, or
# the functional collectives. The checker counts each call once, under the name of the
# function a reader knows, however it was reached: it replaces every module attribute
# that holds one of torch.distributed's functions, and below them the methods of the
# ProcessGroup and Backend classes, which every one of those functions ends in.

# The public functions, and which argument holds the peer of a point-to-point one.
POINT_TO_POINT = {"isend": "dst", "irecv": "src", "send": "dst", "recv": "src"}
# (the *_single names are 2.13's for the flat forms; older releases lack them, and each
# name is wrapped only where this torch has it)
COLLECTIVES = ("all_reduce", "broadcast", "reduce", "all_gather", "all_gather_into_tensor",
               "all_gather_single", "reduce_scatter", "reduce_scatter_tensor",
               "reduce_scatter_single", "gather", "scatter", "barrier",
               "all_to_all", "all_to_all_single", "monitored_barrier",
               "all_gather_object", "broadcast_object_list", "gather_object",
               "scatter_object_list", "send_object_list", "recv_object_list",
               "all_reduce_coalesced", "all_gather_coalesced", "gather_into_tensor",
               "gather_single", "_all_gather_base", "_reduce_scatter_base",
               "new_group", "init_device_mesh", "destroy_process_group")
SENDS = ("isend", "send")
RECEIVES = ("irecv", "recv")
# What each collective is called by the family a lab allows ("one reduce-scatter").
FAMILIES = {
    "all_reduce": ("all_reduce", "all_reduce_coalesced"),
    "reduce_scatter": ("reduce_scatter", "reduce_scatter_tensor", "reduce_scatter_single",
                       "_reduce_scatter_base"),
    "all_gather": ("all_gather", "all_gather_into_tensor", "all_gather_single",
                   "_all_gather_base", "all_gather_coalesced"),
    "broadcast": ("broadcast",),
    "point_to_point": ("isend", "irecv", "send", "recv"),
}
# The methods below the functions, by the function a reader knows them as.
METHODS = {"allreduce": "all_reduce", "allreduce_coalesced": "all_reduce_coalesced",
           "broadcast": "broadcast", "reduce": "reduce", "allgather": "all_gather",
           "_allgather_base": "all_gather_into_tensor",
           "all_gather_single": "all_gather_single",
           "allgather_coalesced": "all_gather_coalesced",
           "allgather_into_tensor_coalesced": "all_gather_into_tensor",
           "reduce_scatter": "reduce_scatter",
           "_reduce_scatter_base": "reduce_scatter_tensor",
           "reduce_scatter_single": "reduce_scatter_single",
           "reduce_scatter_tensor_coalesced": "reduce_scatter_tensor",
           "alltoall": "all_to_all", "alltoall_base": "all_to_all_single",
           "all_to_all_single": "all_to_all_single", "gather": "gather",
           "scatter": "scatter", "barrier": "barrier",
           "monitored_barrier": "monitored_barrier", "send": "isend", "recv": "irecv",
           "recv_anysource": "irecv"}
# which positional argument of a method holds what it sends (or, for recv, receives)
METHOD_INPUT = {"allgather": 1, "_allgather_base": 1, "all_gather_single": 1,
                "allgather_coalesced": 1, "allgather_into_tensor_coalesced": 1,
                "reduce_scatter": 1, "_reduce_scatter_base": 1, "reduce_scatter_single": 1,
                "reduce_scatter_tensor_coalesced": 1, "alltoall": 1, "alltoall_base": 1,
                "all_to_all_single": 1, "gather": 1, "scatter": 1}
# The functional collectives, by the function a reader knows them as.
FUNCTIONAL = {"all_reduce": "all_reduce", "all_reduce_inplace": "all_reduce",
              "all_reduce_coalesced": "all_reduce_coalesced",
              "all_gather_tensor": "all_gather_into_tensor",
              "all_gather_tensor_autograd": "all_gather_into_tensor",
              "all_gather_inplace": "all_gather",
              "all_gather_into_tensor_coalesced": "all_gather_into_tensor",
              "reduce_scatter_tensor": "reduce_scatter_tensor",
              "reduce_scatter_tensor_autograd": "reduce_scatter_tensor",
              "reduce_scatter_inplace": "reduce_scatter",
              "reduce_scatter_tensor_coalesced": "reduce_scatter_tensor",
              "broadcast": "broadcast", "all_to_all_single": "all_to_all_single",
              "all_to_all_single_autograd": "all_to_all_single",
              "permute_tensor": "all_to_all_single"}
# The collectives that write their result into the tensor they send (a change to it
# before wait() is the reader's, not the collective's).
IN_PLACE = ("all_reduce", "broadcast", "reduce")


def op_name(op) -> str:
    """``SUM`` for ReduceOp.SUM, an options' reduceOp, or the functional's "sum"."""
    inner = getattr(op, "op", op)
    return str(getattr(inner, "name", None) or str(inner).rpartition(".")[2]).upper()


def tensor_bytes(value) -> int:
    return sum(tensor.numel() * tensor.element_size() for tensor in tensors_in(value))


def tensors_in(value) -> list:
    """The tensors in ``value``: a tensor, or lists of them, nested."""
    import torch

    if isinstance(value, torch.Tensor):
        return [value]
    if isinstance(value, (list, tuple)):
        return [tensor for item in value for tensor in tensors_in(item)]
    return []


def dtype_of(value) -> str | None:
    found = tensors_in(value)
    return str(found[0].dtype).removeprefix("torch.") if found else None


@dataclass
class InFlight:
    """A Work the reader started and has not waited for yet, and what it uses."""

    work: object  # a weak reference: a Work the reader drops is noted (``dropped``)
    record: dict
    serial: int
    sent: list  # (tensor, a copy of it when sent): must not change before wait()
    versions: list  # (tensor, its version): an in-place collective's, likewise
    buffers: list  # (start, end) addresses of its tensors
    tensors: tuple = ()  # held while in flight or handed on: none other takes their memory
    lands: tuple = ()  # an irecv's (private buffer, the reader's): copied at its wait()


def same(tensor, copy) -> bool:
    """Equal, element for element, NaN included (a NaN sent is not a change)."""
    import torch

    if tensor.is_floating_point() or tensor.is_complex():
        return tensor.shape == copy.shape and bool(torch.all(
            (tensor == copy) | (torch.isnan(tensor) & torch.isnan(copy))))
    return torch.equal(tensor, copy)


class Calls:
    """Counts this rank's calls of ``torch.distributed`` while ``counting`` is on, and logs
    every call's start and end to a file, so that a rank stopped in a deadlock can be
    found waiting in its last call. Follows each Work the reader's code starts to its
    wait(), and notes what the reader got wrong on the way (``problems``)."""

    def __init__(self, log_path: str, solution: str = ""):
        self.records: list[dict] = []
        self.counting = False
        self.problems: list[str] = []  # e.g. a tensor changed while its isend ran
        self.hook_waits: list[str] = []  # waits inside a communication hook
        self.polls = 0  # is_completed() answers of False outside a hook: a wait by polling
        self.solution = os.path.realpath(solution) if solution else ""
        self._log = os.open(log_path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        self._local = threading.local()
        self._serial = 0
        self._flying: dict[int, InFlight] = {}  # id(work): the Works not yet waited for
        self._polled: dict[int, dict] = {}  # id(work): record, done by is_completed()
        # Works handed on with get_future() (a hook's to DDP): their buffers stay in use
        # until the reader waits for that future, or until the reader's block ends (DDP
        # waits for every bucket's future at the end of backward), whether or not the
        # collective happens to be done already: id(future): its Work's InFlight (an id a
        # dead future leaves may be reused: a wrong match only releases early, and so
        # misses a reuse, never reports one)
        self._handed: dict[int, InFlight] = {}

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
            self._handed.clear()
            self.note("phase after your function returned")

    @contextmanager
    def hook(self):
        """The block is the reader's communication hook: a wait inside it is noted."""
        self._local.hook = True
        try:
            yield
        finally:
            self._local.hook = False

    def _in_hook(self) -> bool:
        local = self._local
        return getattr(local, "hook", False) and not getattr(local, "callback", False)

    @contextmanager
    def _inside(self):
        self._local.inside = getattr(self._local, "inside", 0) + 1
        try:
            yield
        finally:
            self._local.inside -= 1

    def caller(self, frame) -> str:
        """Who made a call: "you" (a line of the reader's file), "torch <module>" (the
        library, e.g. Join or ZeroRedundancyOptimizer on the reader's behalf), or
        "checker"."""
        while frame is not None and frame.f_code.co_filename == __file__:
            frame = frame.f_back
        if frame is None:
            return "checker"
        filename = frame.f_code.co_filename
        if self.solution and os.path.realpath(filename) == self.solution:
            return "you"
        module = frame.f_globals.get("__name__", "")
        if module == "torch" or module.startswith("torch."):
            return f"torch {module}"
        return "checker"

    # --- installing ------------------------------------------------------------------

    def install(self) -> None:
        import torch
        import torch.distributed as dist
        import torch.distributed._functional_collectives as functional
        import torch.distributed.distributed_c10d as c10d

        replaced = {}
        for name, original, is_functional in counted_functions():
            if not is_functional or id(original) not in replaced:
                replaced[id(original)] = self.wrap(name, original, functional=is_functional)
        originals = {id(value): value for module in (c10d, dist, functional)
                     for value in vars(module).values() if id(value) in replaced}
        replace_everywhere(originals, replaced)
        self.replaced = replaced
        for cls in (dist.ProcessGroup, torch._C._distributed_c10d.Backend):
            for method, known_as in METHODS.items():
                original = cls.__dict__.get(method)
                if original is not None:
                    setattr(cls, method, self.wrap_method(method, known_as, original))
        self.follow_works(dist.Work, torch._C.Future)

    def wrap(self, name: str, original, functional: bool = False):
        try:
            signature = inspect.signature(original)
        except (TypeError, ValueError):
            signature = None
        calls = self

        def counted(*args, **kwargs):
            local = calls._local
            if getattr(local, "inside", 0) and not (
                    getattr(local, "batch", False) and name in POINT_TO_POINT):
                return original(*args, **kwargs)  # send() calls isend() inside
            try:
                bound = signature.bind(*args, **kwargs).arguments if signature else {}
            except TypeError:
                return original(*args, **kwargs)  # let torch say what is wrong
            by = getattr(local, "batch_by", None) if getattr(local, "batch", False) \
                else calls.caller(sys._getframe(1))
            if name == "batch_isend_irecv":  # its sends and receives are counted one by one
                local.batch, local.batch_by = True, by
                try:
                    with calls._inside():
                        return original(*args, **kwargs)
                finally:
                    local.batch = False
            record = calls.describe(name, bound, functional)
            record["by"] = by
            lands = calls.deferred(name, bound, by)
            with calls._inside(), calls.logged(record["what"]):
                result = original(**{**bound, "tensor": lands[0]}) if lands else \
                    original(*args, **kwargs)
            calls.keep(record, result, bound)
            if lands and id(result) in calls._flying:
                calls._flying[id(result)].lands = lands
                lands[1].fill_(float("nan"))  # what a read before wait() finds
            return result

        counted.__name__ = counted.__qualname__ = getattr(original, "__name__", name)
        counted.__doc__ = original.__doc__
        counted.__module__ = getattr(original, "__module__", None)
        return counted

    def wrap_method(self, method: str, known_as: str, original):
        calls = self

        def counted(group, *args, **kwargs):
            if getattr(calls._local, "inside", 0):
                return original(group, *args, **kwargs)
            record = calls.describe_method(method, known_as, group, args)
            record["by"] = calls.caller(sys._getframe(1))
            with calls._inside(), calls.logged(record["what"]):
                result = original(group, *args, **kwargs)
            calls.keep(record, result, {"tensor": args[0] if args else None,
                                        "input": record.pop("_input", None)})
            return result

        counted.__name__ = counted.__qualname__ = method
        counted.__doc__ = getattr(original, "__doc__", None)
        return counted

    def deferred(self, name: str, bound: dict, by: str) -> tuple:
        """For the reader's own irecv of a floating-point tensor: a private buffer to
        receive into, and the reader's tensor, which holds NaN until wait() copies the data
        in. The data may land at any moment before wait() returns; this makes "at the last
        moment" the one every run sees, so a read before wait() never passes by luck."""
        import torch

        tensor = bound.get("tensor")
        if name != "irecv" or by != "you" or not self.counting or \
                getattr(self._local, "batch", False) or \
                not isinstance(tensor, torch.Tensor) or not tensor.is_floating_point():
            return ()
        return torch.empty_like(tensor), tensor

    # --- describing a call --------------------------------------------------------------

    def describe(self, name: str, arguments: dict, functional: bool = False) -> dict:
        import torch.distributed as dist

        group = arguments.get("group")
        record = {"name": name, "group": None, "peer": None, "sent": 0, "received": 0,
                  "op": None, "async": False, "dtype": None,
                  "via": "functional collectives" if functional else "function"}
        try:
            if group is not None and name not in ("new_group", "new_subgroups") and \
                    not isinstance(group, str):
                record["group"] = dist.get_process_group_ranks(group)
        except Exception:  # a group this rank is not in (or a mesh): torch will say so
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
            record["dtype"] = dtype_of(tensor)
            record["async"] = name in ("isend", "irecv")
            record["what"] = f"{name}({key}={peer}, {tensor_bytes(tensor)} bytes)"
            return record
        if name == "new_group":
            ranks = arguments.get("ranks")
            record["ranks"] = sorted(ranks) if ranks is not None else None
            record["local"] = bool(arguments.get("use_local_synchronization"))
            local = ", use_local_synchronization=True" if record["local"] else ""
            record["what"] = f"new_group({record['ranks']}{local})"
            return record
        inputs = {"all_gather": "tensor", "all_gather_into_tensor": "input_tensor",
                  "all_gather_single": "input_tensor", "reduce_scatter": "input_list",
                  "reduce_scatter_tensor": "input", "reduce_scatter_single": "input",
                  "gather": "tensor", "scatter": "scatter_list",
                  "all_to_all": "input_tensor_list", "all_to_all_single": "input",
                  "_all_gather_base": "input_tensor", "_reduce_scatter_base": "input",
                  "all_reduce_coalesced": "tensors", "all_gather_coalesced":
                  "input_tensor_list", "gather_into_tensor": "input_tensor",
                  "gather_single": "input_tensor", "all_gather_object": "obj",
                  "broadcast_object_list": "object_list"}.get(name, "tensor")
        if functional:
            inputs = "self" if "self" in arguments else next(iter(arguments), "tensor")
        record["sent"] = tensor_bytes(arguments.get(inputs))
        record["dtype"] = dtype_of(arguments.get(inputs))
        record["async"] = bool(arguments.get("async_op")) or functional
        op = arguments.get("op", arguments.get("reduceOp"))
        record["op"] = op_name(op) if op is not None else None
        for key in ("src", "dst", "group_src", "group_dst"):
            if arguments.get(key) is not None and record["peer"] is None:
                record["peer"] = arguments[key]
        where = f"group {record['group']}" if record["group"] is not None else "all ranks"
        peer = f", {'src' if name == 'broadcast' else 'root'}={record['peer']}" \
            if record["peer"] is not None else ""
        asynchronous = ", async_op=True" if arguments.get("async_op") else ""
        record["what"] = f"{name}({record['sent']} bytes{peer}, {where}{asynchronous})"
        return record

    def describe_method(self, method: str, known_as: str, group, args: tuple) -> dict:
        import torch.distributed as dist

        record = {"name": known_as, "group": None, "peer": None, "sent": 0, "received": 0,
                  "op": None, "async": True, "dtype": None, "via": f"method {method}"}
        try:
            record["group"] = dist.get_process_group_ranks(group)
        except Exception:
            try:
                record["group"] = list(range(group.size()))
            except Exception:
                pass
        position = METHOD_INPUT.get(method, 0)
        given = args[position] if len(args) > position else None
        record["_input"] = given
        record["dtype"] = dtype_of(given)
        if method in ("send", "recv"):
            peer = args[1] if len(args) > 1 else None
            try:
                peer = record["group"][peer]
            except (TypeError, IndexError, KeyError):
                pass
            record["peer"] = peer
            record["numel"] = sum(t.numel() for t in tensors_in(given))
            record["sent" if method == "send" else "received"] = tensor_bytes(given)
            key = "dst" if method == "send" else "src"
            record["what"] = (f"{known_as}({key}={peer}, {tensor_bytes(given)} bytes, "
                              f"through the process group's {method})")
            return record
        record["sent"] = tensor_bytes(given) if method != "recv_anysource" else 0
        for item in args:
            op = getattr(item, "reduceOp", None)
            if op is not None:
                record["op"] = op_name(op)
        where = f"group {record['group']}" if record["group"] is not None else "a group"
        record["what"] = (f"{known_as}({record['sent']} bytes, {where}, through the "
                          f"process group's {method})")
        return record

    # --- following Works ----------------------------------------------------------------

    def keep(self, record: dict, result, arguments: dict) -> None:
        """Count a call, and follow the Work it returned to the reader to its wait()."""
        import torch.distributed as dist

        if not self.counting:
            return
        self.records.append(record)
        if record["name"] == "recv" and record["peer"] is None and isinstance(result, int):
            record["peer"] = result  # a receive from any rank returns its sender
        if record["by"] != "you" or not isinstance(result, dist.Work):
            return
        record["waited"] = False
        name = record["name"]
        given = arguments.get("tensor") if name in (*POINT_TO_POINT, *IN_PLACE) else \
            arguments.get("input", arguments.get("input_tensor"))
        tensors = tensors_in(given)
        receiving = name in RECEIVES
        serial, key = self._serial, id(result)
        try:
            held = weakref.ref(result, lambda _: self.dropped(key, serial))
        except TypeError:  # a Work without weak references: held, its drop unseen
            held = functools.partial(lambda work: work, result)
        flight = InFlight(held, record, serial, [], [],
                          [(t.data_ptr(), t.data_ptr() + t.numel() * t.element_size())
                           for t in tensors], tuple(tensors))
        if name in IN_PLACE:
            # gloo has no AVG of its own: it sums, then divides the tensor in place when
            # the sum arrives, before wait(), which moves its version on by one
            allowed = 1 if record.get("op") == "AVG" else 0
            flight.versions = [(t, t._version + allowed) for t in tensors
                               if t._base is None]
        elif not receiving:
            flight.sent = [(t, t.detach().clone()) for t in tensors]
        writes = (*RECEIVES, *IN_PLACE)  # a Work that writes into its buffer
        for other in (*self._flying.values(), *self._handed.values()):
            # a buffer still in use by an earlier Work, which one of the two writes into
            if any(a < d and c < b for a, b in flight.buffers for c, d in other.buffers) \
                    and (name in writes or other.record["name"] in writes):
                what = "received into" if receiving else \
                    f"ran {name} in place on" if name in IN_PLACE else "sent from"
                handed = other in self._handed.values()
                self.problems.append(
                    f"{what} a buffer that its earlier {other.record['what']} was still "
                    f"using (" + ("it had handed that Work on with get_future(), whose "
                                  "future no one had waited for yet: a hook's future is "
                                  "waited for at the end of backward; give each bucket "
                                  "its own buffer" if handed else
                                  "it had not waited for it: wait() before reusing a "
                                  "buffer, or use another one") + ")")
                break
        self._flying[key] = flight
        self.note(f"work {serial} {record['what']}")

    def dropped(self, key: int, serial: int) -> None:
        """A Work the reader let go of without waiting for it."""
        flight = self._flying.pop(key, None)
        if flight is not None and flight.serial == serial:
            self.note(f"dropped {serial} {flight.record['what']}")

    def landed(self, work, how: str) -> None:
        """The reader waited for ``work`` (or handed it on): check what it used."""
        flight = self._flying.get(id(work))
        if flight is None or flight.work() is not work:
            return
        del self._flying[id(work)]
        flight.record["waited"] = True
        flight.record["how"] = how
        if how == "is_completed()":  # a later wait() or get_future() still counts as one
            self._polled[id(work)] = flight.record
        self.note(f"waited {flight.serial}")
        changed = any(not same(tensor, copy) for tensor, copy in flight.sent) or \
            any(tensor._version > version for tensor, version in flight.versions)
        if changed:
            self.problems.append(
                f"changed a tensor that its {flight.record['what']} was still using, "
                f"before {how}: a collective or a send may read it until wait() returns")

    def follow_works(self, work_class, future_class) -> None:
        import torch.futures

        calls = self
        wait, get_future, is_completed = (work_class.wait, work_class.get_future,
                                          work_class.is_completed)

        def work_wait(work, *args, **kwargs):
            flight = calls._flying.get(id(work))
            if calls._in_hook() and not getattr(calls._local, "inside", 0):
                calls.hook_waits.append("work.wait()")
            if flight is None:
                polled = calls._polled.pop(id(work), None)
                if polled is not None:
                    polled["how"] = "wait()"
                return wait(work, *args, **kwargs)
            calls.landed(work, "wait()")
            with calls.logged(f"wait() on its {flight.record['what']}"):
                done = wait(work, *args, **kwargs)
            if flight.lands:
                flight.lands[1].copy_(flight.lands[0])
            if flight.record["name"] == "irecv" and flight.record["peer"] is None:
                try:  # a receive from any rank: its Work knows the sender once done
                    flight.record["peer"] = work._source_rank()
                except RuntimeError:
                    pass
            return done

        def work_get_future(work):
            flight = calls._flying.get(id(work))
            polled = calls._polled.pop(id(work), None)
            if polled is not None:
                polled["how"] = "get_future()"
            calls.landed(work, "get_future()")
            future = get_future(work)
            if flight is not None and flight.work() is work and calls.counting:
                calls._handed[id(future)] = flight
            return future

        def work_is_completed(work):
            done = is_completed(work)
            if calls._in_hook():  # a hook that asks is waiting for the answer
                calls.hook_waits.append("work.is_completed(), asked until it is done")
            elif not done:
                calls.polls += 1
            if done:
                flight = calls._flying.get(id(work))
                calls.landed(work, "is_completed()")
                if flight is not None and flight.lands:
                    flight.lands[1].copy_(flight.lands[0])
            return done

        work_class.wait = work_wait
        work_class.get_future = work_get_future
        work_class.is_completed = work_is_completed
        def reading(name, read):  # the reader reads a value: is a Work still writing it?
            shown = {"__bool__": "bool()", "__int__": "int()", "__float__": "float()",
                     "__index__": "an index"}.get(name, f".{name}()")

            def read_value(tensor, *args, **kwargs):
                if calls.counting and calls._flying and \
                        not getattr(calls._local, "inside", 0):
                    start = tensor.data_ptr()
                    end = start + max(tensor.numel(), 1) * tensor.element_size()
                    for flight in list(calls._flying.values()):
                        if flight.record["name"] in (*RECEIVES, *IN_PLACE) and any(
                                a < end and start < b for a, b in flight.buffers):
                            calls.problems.append(
                                f"read a tensor with {shown} that its "
                                f"{flight.record['what']} was still writing, before "
                                f"wait(): until wait() returns it may still hold this "
                                f"rank's own value")
                            break
                return read(tensor, *args, **kwargs)

            return read_value

        for name in ("item", "tolist", "__bool__", "__int__", "__float__", "__index__"):
            setattr(torch.Tensor, name, reading(name, getattr(torch.Tensor, name)))
        future_wait, then = future_class.wait, future_class.then

        def future_waited(future):
            if calls._in_hook() and not getattr(calls._local, "inside", 0):
                calls.hook_waits.append("future.wait()")
            done = future_wait(future)
            calls.released(future)
            return done

        def chained(future, callback):
            def called(*args, **kwargs):
                calls._local.callback = True  # a callback's waits are on a done future
                try:
                    return callback(*args, **kwargs)
                finally:
                    calls._local.callback = False

            following = then(future, called)
            if id(future) in calls._handed:  # waiting for it waits for the Work too
                calls._handed[id(following)] = calls._handed[id(future)]
            return following

        future_class.wait = future_waited
        future_class.then = chained
        wait_all = torch.futures.wait_all

        def waited_all(futures):
            if calls._in_hook():
                calls.hook_waits.append("torch.futures.wait_all()")
            done = wait_all(futures)
            for future in futures:
                calls.released(future)
            return done

        replace_everywhere({id(wait_all): wait_all}, {id(wait_all): waited_all})

    def released(self, future) -> None:
        """The reader waited for a future: a Work handed on through it is done."""
        flight = self._handed.pop(id(future), None)
        if flight is not None:
            self._handed = {key: other for key, other in self._handed.items()
                            if other is not flight}

    def unwaited(self) -> list[str]:
        return [record["what"] for record in self.records if record.get("waited") is False]

    def polled_only(self) -> list[str]:
        """The Works the reader saw done through is_completed() and never wait()ed for."""
        return [record["what"] for record in self.records
                if record.get("how") == "is_completed()"]


def replace_everywhere(originals: dict, replacements: dict) -> None:
    """Put ``replacements[id(f)]`` wherever a loaded module holds the function ``f``
    (torch.distributed, distributed_c10d, and any module that imported it by name)."""
    indexed = _HOLDERS is not None and all(
        _HOLDERS["watched"].get(key) is value for key, value in originals.items())
    for name, module in list(sys.modules.items()):
        names = getattr(module, "__dict__", None)
        if not isinstance(names, dict):
            continue
        if indexed and name in _HOLDERS["modules"]:  # only where the index says
            keys = _HOLDERS["where"].get(name, ())
        else:
            keys = list(names)
        for key in keys:
            value = names.get(key)
            if id(value) in originals and originals[id(value)] is value:
                try:
                    setattr(module, key, replacements[id(value)])
                except (AttributeError, TypeError):
                    pass


# Where the loaded modules hold a function the checker replaces: noted once, in the
# forkserver, once it has imported everything (workers/labs/preloaded.py). A rank, forked
# from it, then looks only there and in the modules imported since: looking through every
# module's names would copy most of the forkserver's memory into the rank (reading an
# object writes its reference count), a tenth of a second in every rank.
_HOLDERS: dict | None = None


def counted_functions():
    """The functions the checker counts: (the name it counts them by, the function, whether
    it is a functional collective)."""
    import torch.distributed as dist
    import torch.distributed._functional_collectives as functional
    import torch.distributed.distributed_c10d as c10d

    for name in (*POINT_TO_POINT, *COLLECTIVES, "batch_isend_irecv"):
        original = getattr(c10d, name, None) or getattr(dist, name, None)
        if callable(original):
            yield name, original, False
    for name, known_as in FUNCTIONAL.items():
        original = getattr(functional, name, None)
        if callable(original):
            yield known_as, original, True


def calls_from(home: str, noted: list, named) -> object:
    """A profile function (for ``sys.setprofile``) that appends to ``noted`` every call made
    from a line of the reader's file ``home`` that ``named(frame, event, arg)`` names: a
    Python function's ``"call"`` (``frame`` is the callee's) or a C function's ``"c_call"``
    (``frame`` is the caller's, ``arg`` the function). Each entry reads "<name> at line N
    (<the line>)". Used where a lab forbids a kind of call that leaves no trace in what
    the checker counts: a lock in Hogwild, torch.distributed in the store-only barrier."""
    home = os.path.realpath(home)
    real: dict[str, str] = {}

    def watch(frame, event, arg):
        if event not in ("call", "c_call"):
            return
        caller = frame if event == "c_call" else frame.f_back
        if caller is None:
            return
        filename = caller.f_code.co_filename
        if filename not in real:
            real[filename] = os.path.realpath(filename)
        if real[filename] != home:
            return
        name = named(frame, event, arg)
        if name:
            line = linecache.getline(filename, caller.f_lineno).strip()
            noted.append(f"{name} at line {caller.f_lineno} ({line[:70]})")

    return watch


def watched_functions() -> dict:
    """The functions ``replace_everywhere`` is given, by id: the ones the checker counts,
    torch.futures.wait_all, time.sleep."""
    import torch

    found = [function for _, function, _ in counted_functions()]
    return {id(function): function for function in [*found, torch.futures.wait_all,
                                                    time.sleep]}


def index_holders() -> None:
    """Note, for every loaded module, which of its names hold a watched function."""
    global _HOLDERS
    watched = watched_functions()
    where = {}
    for name, module in list(sys.modules.items()):
        names = getattr(module, "__dict__", None)
        if not isinstance(names, dict):
            continue
        keys = [key for key, value in list(names.items())
                if id(value) in watched and watched[id(value)] is value]
        if keys:
            where[name] = keys
    _HOLDERS = {"watched": watched, "modules": set(sys.modules), "where": where}


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
    (folder / f"rank{rank}.pid").write_text(str(os.getpid()))
    _JOB["port"] = plan.port
    lab = importlib.import_module(f"workers.labs.{plan.lab}")
    calls = Calls(str(folder / f"rank{rank}.log"), plan.path)
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
        result["polls"], result["polled_only"] = calls.polls, calls.polled_only()
        result["problems"] = calls.problems
        result["hook_waits"] = calls.hook_waits
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

    from workers.job import sockets_on_loopback

    sockets_on_loopback()  # the store listens on 127.0.0.1 (serve_store), and gloo too
    with calls.logged(CHECKERS_INIT):
        dist.init_process_group(
            "gloo", store=job_store(plan.group_timeout), rank=rank,
            world_size=plan.world_size, timeout=timedelta(seconds=plan.group_timeout))


_JOB: dict = {}  # this rank's job: the port of its store


def job_store(timeout: float):
    """A client of the job's TCPStore. The checker's own process serves it, on 127.0.0.1,
    from before the ranks start: a client that finds no server yet waits out a back-off
    before it tries again (a third of a second, in a job that takes one)."""
    from datetime import timedelta

    import torch.distributed as dist

    return dist.TCPStore("127.0.0.1", _JOB["port"], is_master=False,
                         timeout=timedelta(seconds=timeout))


def serve_store():
    """The job's TCPStore, listening on 127.0.0.1 only, served by this process."""
    import socket

    import torch.distributed as dist

    listening = socket.create_server(("127.0.0.1", 0))
    port = listening.getsockname()[1]
    return dist.TCPStore("127.0.0.1", port, is_master=True, wait_for_workers=False,
                         master_listen_fd=listening.detach())


def save_error(path: Path, error: BaseException, solution: str) -> None:
    import torch

    frames = traceback.extract_tb(error.__traceback__)
    where = ""
    for frame in frames:
        if os.path.realpath(frame.filename) == os.path.realpath(solution):
            where = f"{shown(solution)} line {frame.lineno}: {(frame.line or '').strip()}"
    line = f"{type(error).__name__}: {first_line(error)}"
    # written whole, then renamed: a rank stopped while it writes (the others' failure
    # ends the job) leaves no half file for the checker to read
    partial = path.with_suffix(".error-partial")
    torch.save({"line": line, "where": where, "type": type(error).__name__,
                "not_implemented": isinstance(error, NotImplementedError)}, partial)
    os.replace(partial, path)


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

    from workers.ranks import launch

    folder = tempfile.mkdtemp(prefix=f"lab-{lab.__name__.rpartition('.')[2]}-")
    store = serve_store()
    try:
        plan = Plan(lab.__name__.rpartition(".")[2], world_size, str(path), store.port,
                    folder, given, group_timeout=timeout + 60)
        start_forkserver()
        begin = time.monotonic()
        watchdog = Watchdog(Path(folder), world_size)
        watchdog.start()
        try:
            with captured_stdout() as said:
                code = launch(rank_entry, (plan,), world_size, timeout,
                              preload=(*PRELOAD, *lab.PRELOAD))
        finally:
            watchdog.stop()
        outcome = Outcome(world_size, time.monotonic() - begin)
        outcome.launcher_said = "".join(said).strip() if code else ""
        outcome.timed_out = "still running after" in outcome.launcher_said
        if watchdog.stalled_at is not None:  # every rank blocked, none moving: stopped
            outcome.timed_out, outcome.stalled = True, watchdog.stalled_at - begin
        for rank in range(world_size):
            base = Path(folder) / f"rank{rank}"
            if base.with_suffix(".result").exists():
                outcome.results[rank] = torch.load(base.with_suffix(".result"),
                                                   weights_only=False)
            elif base.with_suffix(".error").exists() and watchdog.stalled_at is None:
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
        del store  # its port closes with it
        shutil.rmtree(folder, ignore_errors=True)


# How long every rank of a job may sit blocked in a call, with no rank writing a line of its
# log, before the job is called a deadlock and stopped (its timeout is the last resort).
STALLED = 1.5
# The checker's own set-up is not the reader's: ranks slow to meet there, as on a loaded
# machine, are left to the job's timeout and never called a deadlock.
CHECKERS_INIT = "init_process_group (the checker's)"


class Watchdog:
    """Stops a job early when it can no longer move: every rank is inside a call (a
    collective, a receive, a store's wait, DDP's backward) and no rank has logged anything
    for ``STALLED`` seconds. A rank busy in Python is in no call, so a slow solution is not
    taken for a deadlock; nor are ranks that all wait in the checker's own
    init_process_group."""

    def __init__(self, folder: Path, world_size: int):
        self.folder, self.world_size = folder, world_size
        self.stalled_at: float | None = None
        self._done = threading.Event()
        self._thread = threading.Thread(target=self._watch, daemon=True)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._done.set()
        self._thread.join()

    def _watch(self) -> None:
        logs = [self.folder / f"rank{rank}.log" for rank in range(self.world_size)]
        sizes, since = None, time.monotonic()
        while not self._done.wait(0.2):
            try:
                now_sizes = [log.stat().st_size for log in logs]
            except OSError:  # a rank not started yet
                sizes, since = None, time.monotonic()
                continue
            if now_sizes != sizes:
                sizes, since = now_sizes, time.monotonic()
                continue
            if time.monotonic() - since < STALLED:
                continue
            where = [read_log(log)[0] for log in logs]
            if all(at.startswith("waiting in ") for at in where) and not all(
                    at.startswith(f"waiting in {CHECKERS_INIT}") for at in where):
                self.stalled_at = time.monotonic()
                self._stop_ranks()
                return
            since = time.monotonic()

    def _stop_ranks(self) -> None:
        import signal

        for rank in range(self.world_size):
            try:
                pid = int((self.folder / f"rank{rank}.pid").read_text())
                os.kill(pid, signal.SIGKILL)  # launch() sees it and stops the job
            except (OSError, ValueError):
                pass


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


ABORTED = ("(gloo::EnforceNotMet), most often because the ranks were in different "
           "calls, paired with others of another size: every rank must make the same "
           "collective calls, in the same order")  # gloo checks paired calls' sizes


def ended_findings(outcome: Outcome, function: str) -> list[Finding]:
    """Failures that end a job early: a rank raised, the job outlived its timeout (a
    deadlock), or it ended in some other way. Empty when every rank returned."""
    aborted = any("gloo::EnforceNotMet" in text for texts in outcome.printed.values()
                  for text in texts)  # gloo checks that paired calls have one size
    if outcome.raised and aborted and all(
            re.search(r"Connection (reset|closed) by peer", error["line"])
            for error in outcome.raised.values()):
        first = min(outcome.raised)  # it only lost the peer that gloo aborted
        return [Finding(False, f"rank {first} lost its peer, which gloo aborted {ABORTED}")]
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
        texts = [deadlock_line(outcome)]
        forgotten = {**outcome.dropped,
                     **{rank: outcome.results[rank]["unwaited"] for rank in done
                        if outcome.results[rank]["unwaited"]}}
        if forgotten:
            rank, works = min(forgotten.items())
            texts[0] = (f"forgotten wait(): rank {rank} never waited for the Work of its "
                        f"{works[0]}{' and more' if len(works) > 1 else ''}, and the job "
                        f"hung: every rank was stopped after "
                        f"{outcome.stalled or outcome.seconds:.0f} s")
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
        read = [(rank, outcome.results[rank]["problems"][0]) for rank in done
                if outcome.results[rank].get("problems")]
        if read:
            texts.append(f"  rank {read[0][0]} {read[0][1]}")
        if done:
            texts.append(f"  rank{'s' if len(done) > 1 else ''} {list_of(done)} had "
                         f"returned from {function}()")
        return [Finding(False, "\n".join(texts))]
    missing = [rank for rank in range(outcome.world_size) if rank not in outcome.results]
    if missing:
        said = outcome.launcher_said.removeprefix("[main] ") or "no result"
        if aborted:
            said += f"; gloo aborted it {ABORTED}"
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


def deadlock_line(outcome: Outcome) -> str:
    if outcome.stalled is not None:
        return (f"deadlock: after {outcome.stalled:.0f} s every rank was blocked in a call "
                f"and none had moved for {STALLED:g} s; the ranks were stopped")
    return (f"deadlock: the ranks were still running after {outcome.seconds:.0f} s and "
            f"were stopped")


def wait_findings(outcome: Outcome) -> list[Finding]:
    """Every Work an isend/irecv (or an async_op=True call) returned was waited for, and
    nothing it used was touched before: a changed send buffer, a buffer received into
    while an earlier Work still used it."""
    for rank, result in sorted(outcome.results.items()):
        if result.get("problems"):
            return [Finding(False, f"rank {rank} {result['problems'][0]}")]
    polled = {rank: (result.get("polls", 0), result.get("polled_only", []))
              for rank, result in outcome.results.items()
              if result.get("polls", 0) > 1 or result.get("polled_only")}
    if polled:
        rank, (polls, works) = min(polled.items())
        asked = (f"saw {len(works)} Work(s) done through is_completed() and never called "
                 f"wait() on them, the first from {works[0]}" if works else
                 f"asked work.is_completed() {polls} times while its Works ran")
        return [Finding(False, f"rank {rank} {asked}: a loop that polls keeps a core busy "
                               f"waiting; wait() blocks until the Work is done, and raises "
                               f"the error of one that failed")]
    forgotten = {rank: result["unwaited"] for rank, result in outcome.results.items()
                 if result["unwaited"]}
    if not forgotten:
        if any("waited" in call for call in outcome.all_calls()):
            return [Finding(True, "every Work (from isend, irecv or async_op=True) was "
                                  "waited for, and nothing it used changed before")]
        return []
    rank, works = min(forgotten.items())
    return [Finding(False, f"forgotten wait(): rank {rank} never waited for {len(works)} "
                           f"Work(s), the first from {works[0]}; until wait() returns, a "
                           f"sent buffer may still be read and a received one is not "
                           f"yet written")]


def how_called(call: dict) -> str:
    """``all_reduce``, and how the reader reached it when not by the function itself."""
    said = call["name"]
    via = call.get("via", "function")
    if via.startswith("method "):
        said += f" (through the process group's {via.removeprefix('method ')} method)"
    elif via == "functional collectives":
        said += " (through torch.distributed._functional_collectives)"
    by = call.get("by", "you")
    if by.startswith("torch "):
        said += f" (made for you by {by.removeprefix('torch ')})"
    return said


def forbidden_finding(outcome: Outcome, allowed, lesson: str) -> Finding | None:
    """The first call of a function the lab does not allow, said as the reader knows it,
    whichever road it took (another module's name, a partial, the process group)."""
    for rank, result in sorted(outcome.results.items()):
        for call in result["calls"]:
            if call["name"] not in allowed:
                return Finding(False, f"rank {rank} called {how_called(call)}: {lesson}")
    return None


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
    import torch
    import torch.distributed as dist

    # The tensor given is a view into a longer one, as a parameter's slice of a flat
    # buffer is; the result is read through another view taken before the call, so a
    # function that rebinds ``tensor.data`` (or ``set_``) instead of summing in place fails.
    start = integer_values(seed + rank, numel)
    base = torch.full((numel + 2,), 7.0)
    base[1:-1] = start
    tensor, seen = base[1:-1], base[1:-1]
    with calls.reader():
        solution(tensor)
    expected = start.clone()
    dist.all_reduce(expected)
    return {"result": seen.clone(), "expected": expected, "bytes": numel * 4,
            "around": [base[0].item(), base[-1].item()]}


def in_place_finding(rank: int, result: dict, start) -> Finding | None:
    """What is wrong with where an in-place lab's result went (``all_reduced_in_place``):
    nothing written through the caller's view, or something written beside the tensor."""
    import torch

    if result["around"] != [7.0, 7.0]:
        return Finding(False, f"rank {rank} changed the values beside its tensor (it is a "
                              f"view into a longer one): write only into the tensor given")
    if torch.equal(result["result"], start):
        return Finding(False, f"rank {rank}'s tensor is unchanged, seen through a view of "
                              f"it taken before the call: write the result into the "
                              f"tensor given, in place (tensor.copy_, add_, or receive "
                              f"into its chunks); assigning to the name or to tensor.data "
                              f"gives it new storage that nobody else sees")
    return None


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
