"""What the data-parallel MNIST page says about what its runs measured: the backend they
ran with, and what each way of training cost per step (Part 4)."""

from __future__ import annotations

import statistics
from collections.abc import Sequence

from workers.verdicts import NOISE, Verdict, ratio, verdict


def quartiles(times: Sequence[float]) -> list[float]:
    """The first quartile, the median and the third quartile of a run's step times."""
    ordered = sorted(times)
    return [ordered[len(ordered) * q // 4] for q in (1, 2, 3)]


def apart(a: Sequence[float], b: Sequence[float]) -> bool:
    """True when the middle halves of two sets of step times do not overlap: a difference
    of medians then stands out of the step-to-step spread."""
    qa, qb = quartiles(a), quartiles(b)
    return qa[2] < qb[0] or qb[2] < qa[0]


@verdict(
    gloo=dict(backend="gloo", world_size=2),
    nccl=dict(backend="nccl", world_size=2),
)
def ran_with(backend: str, world_size: int) -> Verdict:
    """Where a run's ranks computed, from the backend its launcher said it used."""
    if backend == "nccl":
        return Verdict("nccl", f"on {world_size} ranks with nccl, a GPU each")
    return Verdict("gloo", f"on {world_size} ranks with gloo, on the CPU")


@verdict(
    a_faster=dict(a=[4.0, 4.2, 4.4, 4.6], b=[6.0, 6.5, 7.0, 7.5], a_name="one process",
                  b_name="DDP"),
    b_faster=dict(a=[9.0, 9.5, 10.0, 11.0], b=[6.0, 6.5, 7.0, 7.5], a_name="one process",
                  b_name="DDP"),
    inside=dict(a=[5.0, 6.0, 7.0, 8.0], b=[5.5, 6.5, 7.5, 8.5], a_name="one process",
                b_name="DDP"),
)
def per_step(a: Sequence[float], b: Sequence[float], a_name: str, b_name: str) -> Verdict:
    """Which of two ways of training took less time per step, from each step's time (ms)."""
    ma, mb = statistics.median(a), statistics.median(b)
    if not apart(a, b):
        return Verdict("inside", f"their medians differ by {abs(ma - mb):.1f} ms, {NOISE} "
                                 "(the middle halves of their steps overlap)")
    if ma < mb:
        return Verdict("a_faster", f"{a_name} was faster: {b_name} took {ratio(mb, ma)} as "
                                   "long per step (medians), beyond the spread")
    return Verdict("b_faster", f"{b_name} was faster: {a_name} took {ratio(ma, mb)} as "
                               "long per step (medians), beyond the spread")


@verdict(
    one_bucket=dict(model_bytes=87_000, first_bucket_bytes=1 << 20),
    buckets=dict(model_bytes=44_000_000, first_bucket_bytes=1 << 20),
)
def ddp_averaging(model_bytes: int, first_bucket_bytes: int) -> Verdict:
    """How DDP averaged this model's gradients: one bucket, or buckets during backward."""
    if model_bytes < first_bucket_bytes:
        return Verdict("one_bucket", "DDP's one all-reduce of every gradient (the model's "
                                     f"{model_bytes / 1e3:.1f} kB fit in one bucket, which "
                                     "starts when backward ends)")
    return Verdict("buckets", "DDP's buckets (started during backward)")


BLOCKING = "the blocking all-reduces after backward (one per tensor)"


@verdict(
    same=dict(manual=[5.0, 6.0, 7.0, 8.0], ddp=[5.5, 6.5, 7.5, 8.5],
              ddp_way="DDP's buckets (started during backward)"),
    ddp_less=dict(manual=[9.0, 9.5, 10.0, 11.0], ddp=[6.0, 6.5, 7.0, 7.5],
                  ddp_way="DDP's buckets (started during backward)"),
    manual_less=dict(manual=[4.0, 4.2, 4.4, 4.6], ddp=[6.0, 6.5, 7.0, 7.5],
                     ddp_way="DDP's buckets (started during backward)"),
)
def averaging(manual: Sequence[float], ddp: Sequence[float], ddp_way: str) -> Verdict:
    """What averaging by hand cost against DDP's way (``ddp_averaging``), per step (ms)."""
    saved = statistics.median(manual) - statistics.median(ddp)
    if not apart(manual, ddp):
        return Verdict("same", f"Here {BLOCKING} cost about as much as {ddp_way}.")
    if saved > 0:
        return Verdict("ddp_less", f"Here {ddp_way} saved {saved:.1f} ms a step against "
                                   f"{BLOCKING}.")
    return Verdict("manual_less", f"Here {BLOCKING} took {-saved:.1f} ms a step less than "
                                  f"{ddp_way}.")


def threads(count: int) -> str:
    return f"{count} thread" + "s" * (count != 1)


@verdict(
    cpu=dict(backend="gloo", single_threads=2, rank_threads=1, cores=2),
    gpu=dict(backend="nccl", single_threads=16, rank_threads=8, cores=16),
)
def hardware(backend: str, single_threads: int, rank_threads: int, cores: int) -> Verdict:
    """What the three ways of training computed on: the ranks' backend decides it, and the
    one process ran on the ranks' device."""
    if backend == "nccl":
        return Verdict("gpu", "All three computed on GPUs: the one process on one GPU, "
                              "each rank on a GPU of its own, with nccl.")
    return Verdict("cpu", f"All three computed on the CPU: the one process with "
                          f"{threads(single_threads)}, each rank with "
                          f"{threads(rank_threads)}, on the {cores} cores this build may "
                          "use.")


@verdict(
    cpu=dict(backend="gloo"),
    gpu=dict(backend="nccl"),
)
def what_it_shows(backend: str) -> Verdict:
    """What one process against two ranks measures on that hardware."""
    if backend == "nccl":
        return Verdict("gpu", "Each GPU computed half of every global batch, which is what "
                              "data parallelism buys, and paid an all-reduce per step for "
                              "it; for a model this small a GPU step may cost more in "
                              "kernel launches than in arithmetic, and halving the images "
                              "does not halve those.")
    return Verdict("cpu", "Two ranks sharing one CPU have no more arithmetic between them "
                          "than one process on the same cores, so what this comparison "
                          "shows is how the machine treats one process's threads against "
                          "two processes (the threads of one process wait for each other "
                          "in every operation, which costs most on a busy machine), not "
                          "what data parallelism buys: that pays off when each rank brings "
                          "its own processor, as on a machine with one GPU per rank, where "
                          "the work per GPU falls with the number of ranks.")
