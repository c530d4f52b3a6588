"""What the process-groups page says about what this machine could set up."""

from __future__ import annotations

import re

from workers.verdicts import Verdict, verdict


@verdict(
    connect=dict(error="RuntimeError: [../gloo/transport/tcp/pair.h:282] Connect timeout "
                       "[127.0.0.1]:4521"),
    send=dict(error="RuntimeError: [../gloo/transport/tcp/unbound_buffer.cc:129] Timed out "
                    "waiting 1000ms for send operation to complete"),
    other=dict(error="RuntimeError: Connection reset by peer"),
)
def misnumbered_rank(error: str) -> Verdict:
    """Which timer ended the rank that skipped a ``new_group``, from its error."""
    if "Connect timeout" in error:
        return Verdict("connect", "The timer that ended it is gloo's, for connecting "
                                  "to a peer (the `Connect timeout` of its `pair.h`): not "
                                  "the group's `timeout=` itself, though a longer one "
                                  "lengthens it. Ranks 0 and 1 never accepted a third "
                                  "member.")
    waited = re.search(r"Timed out waiting (\d+ ?ms)", error)
    if waited:
        return Verdict("send", "This time its `new_group` returned, and the timer "
                               "that ended it is the group's `timeout=` "
                               f"({waited.group(1)}), in gloo's wait for the group's first "
                               "send to complete: nobody was receiving.")
    return Verdict("other", "Its error names no timer: it failed on talking to peers "
                            "that never expected a third member.")


@verdict(
    set_up=dict(picked="cpu:gloo"),
    not_tried=dict(picked=None, accelerator="cuda", backend="nccl", devices=1, ranks=2),
    not_tried_other=dict(picked=None, accelerator="mps", backend="gloo", devices=1,
                         ranks=2),
)
def no_backend_here(picked: str | None, accelerator: str = "", backend: str = "",
                    devices: int = 0, ranks: int = 0) -> Verdict:
    """What ``init_process_group()`` with no backend set up here (``picked``, the backend
    config), or, where it was not tried (None), why: this machine's accelerator, its
    default backend, and its ``devices`` for ``ranks`` ranks on this machine."""
    if picked is not None:
        return Verdict("set_up", f"With no backend named, only {picked} was set up.")
    on = f"{devices} {accelerator} device{'s' if devices != 1 else ''}"
    said = (f"The run did not call `init_process_group()` with no backend here: it would "
            f"set up {accelerator}:{backend} alone and give each rank device "
            f"`rank % {devices}`, so {ranks} ranks on {on} would share one")
    if backend.startswith("nccl"):  # nccl refuses two ranks on one device
        return Verdict("not_tried", f"{said}, which {backend} refuses, and the job would "
                                    f"end.")
    return Verdict("not_tried_other", f"{said}, which this page does not try.")


@verdict(
    worked=dict(ok=True, result="cpu:gloo,cuda:nccl", gpus=2),
    no_gpu=dict(ok=False, result="RuntimeError: nccl2 requires at least one CUDA device",
                gpus=0),
    failed=dict(ok=False, result="RuntimeError: NCCL error: unhandled system error",
                gpus=2),
    not_tried=dict(ok=False, result=None, gpus=1),
)
def both_backends(ok: bool, result: str | None, gpus: int) -> Verdict:
    """What asking ``init_process_group`` (or ``new_group``) for ``cpu:gloo,cuda:nccl`` gave
    here: ``result`` is the backend set up, or the error, or None where the run did not
    ask (fewer GPUs than ranks). A clause in parentheses."""
    if result is None:
        return Verdict("not_tried", f"not tried here, where {gpus} GPU"
                                    f"{'s' if gpus != 1 else ''} cannot give each rank one "
                                    "of its own")
    if ok:
        return Verdict("worked", f"here it set up {result}")
    if gpus == 0:
        return Verdict("no_gpu", "here it failed for want of a GPU")
    return Verdict("failed", f"here it failed, though this machine has {gpus} "
                             f"GPU{'s' if gpus != 1 else ''}: {result}")


@verdict(
    made=dict(groups={"[0, 2]": 4.0, "[1, 3]": 6.0}, error=None, release="2.15.0"),
    refused=dict(groups={}, release="2.14.1",
                 error="RuntimeError: No device associated with the default pg, not safe "
                       "to split any process groups"),
    failed=dict(groups={}, release="2.15.0",
                error="RuntimeError: the backend does not support splitting"),
)
def split_group_here(groups: dict[str, float], error: str | None, release: str) -> Verdict:
    """What ``split_group`` did in this build: each group it made (its ranks, as text) with
    the sum its members' ``rank + 1`` all-reduced to, or the error every rank met."""
    if error is None:
        made = ", ".join(f"ranks {ranks} summed {total:g}"
                         for ranks, total in groups.items())
        return Verdict("made", f"Each rank got its own group from the one call: {made}.")
    older = tuple(int(part) for part in release.split("+")[0].split(".")[:2]) < (2, 15)
    if older and "No device associated" in error:
        return Verdict("refused", f"Here PyTorch {release} refused it ({error}): before "
                                  "2.15, split_group needs a default group bound to a GPU "
                                  "(device_id), and this one is gloo's, on the CPU.")
    return Verdict("failed", f"Here PyTorch {release} refused it: {error}.")


def _refused(kind: str, names: list[str]) -> str:
    if not names:
        return f"no {kind}"
    return f"the {kind}{'s' if len(names) > 1 else ''} {', '.join(names)}"


# every dtype and operation the worker tries, for an example where one column refused all
ALL_DTYPES = ["float32", "float64", "float16", "bfloat16", "int64", "int32", "uint8",
              "bool", "complex64", "float8_e4m3fn"]
ALL_OPERATIONS = ["send/recv", "broadcast", "all_reduce", "reduce", "all_gather",
                  "gather", "scatter", "reduce_scatter", "all_to_all", "barrier"]


@verdict(
    nothing=dict(columns=[("gloo", "cpu", [], [])], dtypes=10, operations=10),
    some=dict(columns=[("gloo", "cpu", ["float8_e4m3fn"], [])], dtypes=10, operations=10),
    all_of_one=dict(columns=[
        ("gloo", "cpu", ["float8_e4m3fn"], []),
        ("gloo", "cuda", ["bool", "float8_e4m3fn"], ["send/recv", "gather"]),
        ("nccl", "cpu", ALL_DTYPES, ALL_OPERATIONS),
        ("nccl", "cuda", [], []),
    ], dtypes=10, operations=10),
)
def refused_here(columns: list[tuple[str, str, list[str], list[str]]], dtypes: int,
                 operations: int) -> Verdict:
    """What each backend refused on each device type it was tried on: ``columns`` holds
    (backend, device type, the dtypes whose ``all_reduce`` failed, the operations that
    failed), each name once; ``dtypes`` and ``operations`` are how many were tried."""
    clauses, everything, anything = [], False, False
    for backend, device, refused_dtypes, refused_operations in columns:
        where = f"`{backend}` on {device.upper()} tensors"
        if len(refused_dtypes) == dtypes and len(refused_operations) == operations:
            clauses.append(f"{where} refused every operation and every dtype")
            everything = anything = True
        elif refused_dtypes or refused_operations:
            clauses.append(f"{where} refused {_refused('dtype', refused_dtypes)} and "
                           f"{_refused('operation', refused_operations)}")
            anything = True
        else:
            clauses.append(f"{where} took every operation and every dtype")
    said = "; ".join(clauses)
    if not anything:
        return Verdict("nothing", f"Nothing was refused here: {said}.")
    return Verdict("all_of_one" if everything else "some",
                   f"What was refused here: {said}.")
