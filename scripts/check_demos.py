"""Run every demo of every worker with this Python's torch, at small sizes: one line each.

    python scripts/check_demos.py                  # every demo, two at a time
    python scripts/check_demos.py --only hogwild failures --jobs 1

Each demo is started as its chapter starts it (``workers.runner.run``: a process group of
its own, a timeout, nothing left behind) and must end as its chapter says: exit code 0, or,
for a demo that shows a failure, the exit code and the message the page expects. Demos
that need GPUs run where there are enough and are reported as skipped elsewhere; on a
machine without a GPU, the CUDA-only demos must refuse with their one-line message.
The exit code is 1 when any demo did not end as expected.

``scripts/check_torch_versions.sh`` runs this in a throwaway environment for another torch
release, which is how the book checks the oldest release it supports.
"""

from __future__ import annotations

import argparse
import importlib.util
import os
import shlex
import signal
import sys
import tempfile
import time
from concurrent.futures import FIRST_COMPLETED, ThreadPoolExecutor, wait
from dataclasses import dataclass

import psutil
import torch

from workers.mnist import DEFAULT_DATA_ROOT, prepare_mnist
from workers.runner import WorkerError, run

TORCHRUN = ("torch.distributed.run", "--standalone", "--nproc-per-node", "2")
SCRATCH = "{scratch}"  # replaced by an empty folder of the demo's own
SMALL_MNIST = ("--epochs", "1", "--train-images", "400")
SMALL_TOWER = ("--width", "256", "--depth", "4", "--steps", "2")
SMALL_PIPELINE = ("--width", "128", "--micro-batch-size", "16", "--repeats", "1")
SMALL_OVERLAP = ("--small-count", "4", "--large-count", "2", "--large-mib", "1",
                 "--trials", "3")


@dataclass(frozen=True)
class Demo:
    """One command of the book, and how its chapter says it ends."""

    chapter: str
    module: str
    args: tuple[str, ...]
    returncode: int = 0
    output: str | None = None  # a regular expression the output must contain
    gpus: int = 0  # runs only where at least this many GPUs are visible
    refusal: str | None = None  # with too few GPUs: the one-line error it must exit 2 with
    events: bool = True  # False for the scripts that take no --events
    timeout: float = 60
    first: tuple[str, ...] = ()  # the module's arguments for a run that must come before
    env: tuple[tuple[str, str], ...] = ()  # environment variables its chapter sets

    @property
    def worker_and_demo(self) -> tuple[str, str]:
        return worker_and_demo(["python", "-m", self.module, *self.args])

    def command(self) -> str:
        return shlex.join(["python", "-m", self.module, *self.args])


def worker_and_demo(command: list[str]) -> tuple[str, str]:
    """Which worker's which subcommand a command line runs, through torchrun and the shell
    launcher too: ``("workers.x", "demo")``, demo "" for a script without subcommands."""
    if "-m" in command:
        rest = command[command.index("-m") + 1:]
        while rest[0].startswith("torch.distributed.") and "-m" in rest:
            rest = rest[rest.index("-m") + 1:]
        scripts = [i for i, word in enumerate(rest) if word.endswith(".py")]
        if rest[0].startswith("torch.distributed.") and scripts:  # torchrun ... x.py ARGS
            rest = rest[scripts[0]:]
    elif len(command) > 1 and command[1].endswith(".py"):  # python programs/x.py ARGS...
        rest = command[1:]
    else:  # scripts/launch_local.sh NPROC MODULE ARGS...
        rest = command[2:]
    module, args = rest[0], rest[1:]
    return module, (args[0] if args and not args[0].startswith("-") else "")


def workers_demo(chapter, *args, **expected) -> Demo:
    return Demo(chapter, f"workers.{chapter}", args, **expected)


def lab_check(chapter, lab) -> Demo:
    """A chapter's lab, checked on its reference solution (tests/labs/<lab>/), at two ranks
    only: every lab's first world size, and the same calls as at its others, which the
    tests check."""
    return Demo(chapter, "workers.labs", ("check", lab, "--file",
                                          f"tests/labs/{lab}/reference.py",
                                          "--world-sizes", "2"),
                output="PASSED: ")


def under_torchrun(chapter, *args, module=None, **expected) -> Demo:
    module = module or f"workers.{chapter}"
    return Demo(chapter, TORCHRUN[0], (*TORCHRUN[1:], "-m", module, *args), **expected)


def torchft_demo(*args, **expected) -> Demo:
    """A demo of the fault-tolerance chapter. Where torchft is not installed (it has no
    wheel for Python 3.14), the demos that need it must say so in one line instead."""
    if importlib.util.find_spec("torchft") is not None or args[0] == "compare":
        return workers_demo("fault_tolerance", *args, **expected)
    return workers_demo("fault_tolerance", *args, returncode=2,
                        output="torchft is not installed for this Python")


def cuda_only(chapter, name) -> Demo:
    """A demo that needs a GPU: run where there is one, refused in one line elsewhere."""
    return Demo(chapter, f"workers.{chapter}", (name,), gpus=1,
                refusal=r"needs a (CUDA )?GPU")


DEMOS = [
    workers_demo("start_join", "join", "--processes", "2"),
    workers_demo("start_join", "no-join", "--processes", "2"),
    workers_demo("start_join", "daemon", "--processes", "2", "--seconds", "1"),
    workers_demo("start_join", "exit-codes"),
    workers_demo("start_join", "fail", returncode=1, output="rank 2 failed on purpose"),
    workers_demo("start_join", "first-failure", "--step", "5", returncode=1,
                 output="child 2 exited with code 1"),
    workers_demo("start_join", "threads-or-processes", "--millions", "1", "--repeats", "1"),
    workers_demo("start_join", "orphans", "--timeout", "1"),
    workers_demo("start_join", "orphans", "--daemon", "--kill-parent", "TERM"),
    workers_demo("start_methods", "startup", "--processes", "1"),
    workers_demo("start_methods", "inherit"),
    workers_demo("start_methods", "context"),
    workers_demo("start_methods", "fork-with-threads", "--deadlock-after", "1"),
    workers_demo("start_methods", "queue-threads"),
    workers_demo("start_methods", "fork-thread-pool", "--deadlock-after", "1"),
    workers_demo("start_methods", "ranks", "--processes", "2"),
    cuda_only("start_methods", "cuda-fork"),
    Demo("start_methods", "workers.do_not_copy.no_main_guard", (), events=False,
         returncode=1, output="finished its bootstrapping phase"),
    workers_demo("init_methods", "join", "--method", "env", "tcp", "file", "store"),
    under_torchrun("init_methods", "join"),
    workers_demo("init_methods", "store"),
    workers_demo("init_methods", "missing-rank", "--timeout", "2", returncode=1,
                 output="clients joined"),
    workers_demo("init_methods", "port-in-use", returncode=1,
                 output="EADDRINUSE|[Aa]ddress already in use"),
    workers_demo("init_methods", "leftover-file", "--timeout", "2",
                 output="after job 1: the file exists: True"),
    workers_demo("init_methods", "pitfalls", output="Unable to find address for"),
    workers_demo("init_methods", "arrival", "--world-size", "2", "--repeats", "1"),
    workers_demo("init_methods", "no-backend", "--world-size", "2"),
    workers_demo("collectives", "p2p", "--world-size", "3"),
    workers_demo("collectives", "ones", "--world-size", "4"),
    workers_demo("collectives", "collectives", "--world-size", "3", "--roots", "0", "2"),
    workers_demo("collectives", "collectives", "--world-size", "1", "--backend", "nccl",
                 gpus=1),
    workers_demo("collectives", "ring", "--world-size", "3", "--numel", "65536"),
    workers_demo("collectives", "bandwidth", "--sizes", "1024", "65536"),
    workers_demo("collectives", "bandwidth", "--sizes", "1024", "65536",
                 "--backend", "nccl", gpus=2),
    workers_demo("process_groups", "groups", "--world-size", "4"),
    workers_demo("process_groups", "groups", "--backend", "nccl", "--world-size", "2",
                 gpus=2),
    workers_demo("process_groups", "missing-group", "--world-size", "3",
                 returncode=1, output="DistStoreError: wait timeout after 1000ms"),
    workers_demo("process_groups", "missing-group", "--world-size", "3", "--local-sync",
                 returncode=1, output="named .*, used it"),
    workers_demo("process_groups", "mesh", "--world-size", "4"),
    workers_demo("process_groups", "split", "--world-size", "4"),
    workers_demo("process_groups", "backends"),
    workers_demo("process_groups", "backends", "--backend", "nccl", gpus=2),
    workers_demo("process_groups", "threads"),
    workers_demo("ddp_mnist", "single", *SMALL_MNIST),
    workers_demo("ddp_mnist", "manual", *SMALL_MNIST),
    workers_demo("ddp_mnist", "ddp", *SMALL_MNIST),
    workers_demo("ddp_mnist", "ddp", "--world-size", "1", "--backend", "nccl", *SMALL_MNIST,
                 gpus=1),
    workers_demo("ddp_mnist", "compare", *SMALL_MNIST, "--checkpoint-dir", SCRATCH),
    workers_demo("ddp_mnist", "mistakes",
                 output="device_ids and output_device arguments only work"),
    workers_demo("ddp_internals", "buckets", *SMALL_TOWER, "--caps", "default", "1", "25"),
    workers_demo("ddp_internals", "overlap", *SMALL_OVERLAP),
    under_torchrun("ddp_internals", "overlap", *SMALL_OVERLAP),
    workers_demo("ddp_internals", "overlap", "--world-size", "1", "--backend", "nccl",
                 gpus=1),
    workers_demo("ddp_internals", "no-sync", *SMALL_TOWER),
    workers_demo("ddp_internals", "compression", timeout=150),  # 55 s alone, 60+ beside CI
    workers_demo("ddp_internals", "options", *SMALL_TOWER),
    workers_demo("ddp_internals", "compile", *SMALL_TOWER, "--compiler", "aot_eager"),
    workers_demo("sharding", "compare", *SMALL_TOWER),
    workers_demo("sharding", "compare", *SMALL_TOWER,
                 "--world-size", "1", "--backend", "nccl", gpus=1),
    workers_demo("sharding", "mistakes",
                 output=r"pin_memory=True\): error: .*(NVIDIA|CUDA)"
                 if not torch.cuda.is_available() else "sharded parameters kept on cpu"),
    workers_demo("pipelines", "gpipe", "--micro-batches", "1", "4", *SMALL_PIPELINE),
    workers_demo("pipelines", "schedules", *SMALL_PIPELINE),
    workers_demo("tensor_parallel", "mlp", output="backward {'all_reduce': 1}"),
    workers_demo("tensor_parallel", "placements", "--world-size", "4",
                 output=r"Partial → Replicate .*all_reduce"),
    workers_demo("tensor_parallel", "scaling", "--world-size", "4", "--layers", "2"),
    under_torchrun("tensor_parallel", "mlp"),
    workers_demo("tensor_parallel", "loss", "--vocabulary", "1024",
                 output="loss_parallel .*all_reduce"),
    workers_demo("tensor_parallel", "sequence", output="sequence parallel: .* KiB sent"),
    workers_demo("tensor_parallel", "mesh-2d", "--world-size", "4", output="holds rows"),
    workers_demo("tensor_parallel", "at-scale", "--degrees", "1", "2", "64",
                 output="degree 64: 8 collectives"),
    workers_demo("cost_model", "grid", "--world-size", "3", "--sizes", "1024", "65536",
                 "--trials", "2", output="broadcast +65532 B:"),
    workers_demo("cost_model", "uses", "--link", "1e-4", "2e9", "--caps", "25",
                 "--tokens", "64", "--trials", "2", "--warmup", "1",
                 output="64 tokens x 256: measured"),
    workers_demo("backend", "values", "--world-size", "3",
                 output="18 checks at 3 ranks: [0-9]+ bit for bit as gloo's, 18 within"),
    under_torchrun("backend", "values", output="18 bit for bit as gloo's"),
    workers_demo("backend", "overlap", "--mebibytes", "1", "--trials", "2",
                 output="all-reduced while"),
    workers_demo("backend", "ddp", "--steps", "3",
                 output="mine, allreduce_hook +3 steps: final weights equal to gloo's"),
    workers_demo("backend", "speed", "--sizes", "1024", "65536", "--trials", "2",
                 output="mine +65536 B: fastest"),
    workers_demo("backend", "mistakes", output="a rank skips it: mine: wait timeout"),
    workers_demo("hogwild", "train", "--steps", "10", "--threads", "1"),
    workers_demo("hogwild", "shared", "--processes", "2"),
    workers_demo("hogwild", "queue", "--items", "50"),
    workers_demo("hogwild", "fd-limit", "--nofile", "64",
                 output="received 0 items of ancdata|Too many open files"),
    workers_demo("hogwild", "grid", "--grid-processes", "1", "2", "--steps", "4"),
    under_torchrun("hogwild", "threads"),
    cuda_only("hogwild", "cuda"),
    workers_demo("launchers", "environments", timeout=180),  # three launchers, one by one
    under_torchrun("launchers", "ddp", *SMALL_MNIST, module="workers.ddp_mnist"),
    Demo("launchers", "torch.distributed.launch",
         ("--nproc-per-node", "2", "-m", "workers.do_not_copy.legacy_local_rank"),
         events=False, returncode=1, output="unrecognized arguments: --local-rank="),
    under_torchrun("launchers", "--migrated", events=False,
                   module="workers.do_not_copy.legacy_local_rank"),
    workers_demo("multi_node", "two-nodes", timeout=120),
    workers_demo("multi_node", "spawn-nodes", timeout=120),
    workers_demo("failures", "crash",
                 output=r"exit codes \[1, 1\][\s\S]*mp.spawn raised Process"),
    under_torchrun("failures", "crash", returncode=1, output="ChildFailedError"),
    workers_demo("failures", "timeout", output="Rank 1 failed to pass monitoredBarrier"),
    workers_demo("failures", "mismatch", output="Detected mismatch between collectives"),
    workers_demo("failures", "uneven", output="after 5 steps, stuck for"),
    *[workers_demo("hangs", kind, "--diagnose", output=r"verdict: rank 2 is (behind|out)")
      for kind in ("skip", "order", "stuck", "dead", "unwaited")],
    workers_demo("hangs", "every", "--world-size", "2", output="5 of 5 hangs diagnosed"),
    workers_demo("hangs", "diagnose", "999999999", returncode=2,
                 output="no process 999999999"),  # a job to diagnose: the other demos
    workers_demo("hangs", "second-terminal", output="verdict: rank 1 is behind"),
    workers_demo("checkpoints", "load", "--world-size", "3", "--checkpoint", SCRATCH,
                 output="16 tensors, 0 different",
                 first=("save", "--world-size", "2", "--checkpoint", SCRATCH)),
    workers_demo("checkpoints", "load", "--width", "256", "--checkpoint", SCRATCH,
                 returncode=1, output="Size mismatch between saved",
                 first=("save", "--checkpoint", SCRATCH)),
    Demo("checkpoints", TORCHRUN[0],
         (*TORCHRUN[1:], "--max-restarts", "1", "-m", "workers.checkpoints", "elastic",
          "--steps", "8", "--checkpoint-every", "4", "--crash-at-step", "6",
          "--checkpoint-dir", SCRATCH), timeout=90,
         env=(("TORCH_DISABLE_SHARE_RDZV_TCP_STORE", "1"),)),
    torchft_demo("torchft", "--steps", "100", "--kill-at-step", "20",
                 "--rejoin-after", "10", output="healed"),
    torchft_demo("torchft", "--heal-model-only", "--steps", "80", "--kill-at-step", "10",
                 "--rejoin-after", "10", returncode=1, output="final weights differ"),
    torchft_demo("by-hand", "--steps", "500", "--kill-at-step", "200", "--timeout", "150",
                 timeout=180),  # beside the tests, in CI, it took 72 s: over its default 60
    torchft_demo("compare", "--steps", "60", "--kill-at-step", "25", "--checkpoint-every",
                 "10", "--rejoin-after", "10", "--timeout", "150",
                 timeout=400),  # under load, torchrun's restart outlived the 90 s default
    Demo("fault_tolerance", TORCHRUN[0],
         (*TORCHRUN[1:], "--max-restarts", "1", "-m", "workers.fault_tolerance", "elastic",
          "--steps", "40", "--kill-at-step", "15", "--checkpoint-every", "10",
          "--checkpoint-dir", SCRATCH), timeout=90, output="resumed",
         env=(("TORCH_DISABLE_SHARE_RDZV_TCP_STORE", "1"),)),
    *[lab_check(chapter, lab) for chapter, lab in (
        ("init_methods", "barrier"), ("collectives", "two_collectives"),
        ("collectives", "ring"), ("process_groups", "pair_groups"),
        ("ddp_mnist", "average_gradients"), ("ddp_internals", "comm_hook"),
        ("sharding", "zero1"), ("cost_model", "cost_fit"), ("backend", "backend_allreduce"),
        ("hogwild", "hogwild"),
        ("failures", "uneven"),
        ("hangs", "hung_rank"))],
]


def check(demo: Demo, gpus: int) -> tuple[str, str]:
    """Run one demo; return its verdict ("ok", "FAILED" or "skipped") and a note."""
    expected, note = (demo.returncode, demo.output), ""
    if demo.gpus > gpus:
        if demo.refusal is None:
            return "skipped", f"needs {demo.gpus} GPU(s), {gpus} visible"
        expected, note = (2, demo.refusal), f"refused with {gpus} GPU(s), as it should"
    with tempfile.TemporaryDirectory(prefix="check-") as scratch:
        args = [arg.replace(SCRATCH, scratch) for arg in demo.args]
        try:
            if demo.first:
                run(demo.module, *[arg.replace(SCRATCH, scratch) for arg in demo.first],
                    timeout=demo.timeout, stream=False)
            result = run(demo.module, *args, timeout=demo.timeout,
                         expect_returncode=expected[0], expect_output=expected[1],
                         events=demo.events, stream=False, env=dict(demo.env))
        except WorkerError as error:
            return "FAILED", f"{why(error)}; last line: {last_line(error.result)}"
    if note and len(result.lines) != 1:
        return "FAILED", f"the refusal is {len(result.lines)} lines, not one"
    return "ok", note


def why(error: WorkerError) -> str:
    return str(error).split(";")[0].split(": ", 1)[-1]


def last_line(result) -> str:
    """The line that says what went wrong: the last one naming an error, else the last."""
    texts = [line.text.strip() for line in result.lines if line.text.strip()]
    errors = [text for text in texts if "Error" in text or "error:" in text]
    return (errors or texts or ["(no output)"])[-1][:200]


def main(argv=None) -> int:
    chapters = sorted({d.chapter for d in DEMOS})
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--only", nargs="+", choices=chapters, metavar="CHAPTER",
                        help=f"only these chapters' workers ({', '.join(chapters)})")
    parser.add_argument("--jobs", type=int, choices=range(1, 9), default=2, metavar="N",
                        help="demos run at once, 1 to 8 (default 2)")
    args = parser.parse_args(argv)
    signal.signal(signal.SIGTERM, signal.default_int_handler)  # stopped like a Ctrl-C
    gpus = torch.cuda.device_count()
    # --jobs demos at once, most of them of two ranks: a thread per core in every rank would
    # oversubscribe the machine, and its compute would slow far more than --jobs times
    cores = len(os.sched_getaffinity(0))
    os.environ.setdefault("OMP_NUM_THREADS", str(max(1, cores // (2 * args.jobs))))
    chosen = [d for d in DEMOS
              if not args.only or d.chapter in args.only]
    print(f"torch {torch.__version__}, Python {sys.version.split()[0]}, {gpus} GPU(s), "
          f"{len(chosen)} demos, {args.jobs} at a time", flush=True)
    prepare_mnist(DEFAULT_DATA_ROOT)  # once, before demos that read it run side by side
    started = time.time()
    counts = {"ok": 0, "FAILED": 0, "skipped": 0}
    failures = []  # repeated after the count, where the tail of a long log shows them
    with ThreadPoolExecutor(args.jobs) as pool:
        pending = {pool.submit(timed, check, d, gpus): d for d in chosen}
        try:
            while pending:
                done, _ = wait(pending, return_when=FIRST_COMPLETED)
                for future in done:
                    demo = pending.pop(future)
                    (verdict, note), seconds = future.result()
                    counts[verdict] += 1
                    timing = f"{seconds:5.1f} s" if verdict != "skipped" else " " * 7
                    line = (f"{verdict:<8}{timing}  {demo.command()}"
                            + (f"  -- {note}" if note else ""))
                    print(line, flush=True)
                    if verdict == "FAILED":
                        failures.append(line)
        except KeyboardInterrupt:
            pool.shutdown(cancel_futures=True, wait=False)
            stop_running_demos()
            print("interrupted: the running demos were stopped", file=sys.stderr)
            return 130
    print(f"{counts['ok']} ok, {counts['FAILED']} failed, {counts['skipped']} skipped "
          f"in {time.time() - started:.0f} s with torch {torch.__version__}")
    if failures:
        print("failed:", *failures, sep="\n")
    return 1 if counts["FAILED"] else 0


def timed(function, *args):
    begin = time.time()
    return function(*args), time.time() - begin


def stop_running_demos() -> None:
    """Kill the process group of every demo still running (each leads its own)."""
    for child in psutil.Process().children():
        try:
            os.killpg(child.pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass


if __name__ == "__main__":
    sys.exit(main())
