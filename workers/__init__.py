"""The book's workers: one module per chapter, ``python -m workers.<chapter> <demo>``.

Ranks come from a forkserver: a fresh Python that imports torch once and forks every rank
from itself (``workers.ranks.launch``). Importing torch takes a second or two, and a demo's
own process imports it too, before it ever asks for the forkserver; one after the other,
those two imports are most of a small demo's time. So when ``python -m workers.<chapter>``
starts a chapter whose demos launch ranks, this file, which Python runs before the chapter's
first line, starts the forkserver at once, and the two imports run side by side. The
chapters that measure start methods themselves are left alone, and so are those whose ranks
come from elsewhere (the launchers and multi-machine chapters: mp.spawn, torchrun, a shell
loop) and a process started as a rank (``RANK`` set by torchrun or a script): it starts no
ranks.

The forkserver is stopped when the demo's process exits, even a demo that only printed
``--help`` or refused its arguments.
"""

import atexit
import os
import signal
import sys

# The chapters whose demos launch ranks, and what their ranks import beyond torch and
# torch.distributed (the chapter passes it to launch() as ``preload``): the forkserver
# started here imports it once, up front, instead of every rank after its start.
PRELOADS = {
    "init_methods": (), "collectives": (), "process_groups": (), "failures": (),
    "ddp_mnist": ("torchvision", "workers.mnist", "torch._dynamo"),
    "ddp_internals": ("torchvision", "workers.mnist", "torch._dynamo"),
    "hogwild": ("workers.mnist", "torch._dynamo"),
    "sharding": ("torch._dynamo", "torch.distributed.fsdp", "torch.distributed.checkpoint"),
    "checkpoints": ("torch._dynamo", "torch.distributed.fsdp",
                    "torch.distributed.checkpoint"),
    "tensor_parallel": ("torch.distributed.tensor", "torch.distributed.tensor.parallel",
                        "torch.distributed.tensor.debug"),
    "pipelines": ("torch.distributed.pipelining",),
    "hangs": ("torch._dynamo",),  # a flight recorder's first dump with frames imports it
    "fault_tolerance": ("torch._dynamo",),
}


# Demos that start no ranks: the process plays one rank itself (the fake backend).
IN_ONE_PROCESS = {("tensor_parallel", "at-scale")}
# ... or looks at ranks that another process started
IN_ONE_PROCESS |= {("hangs", "diagnose"), ("hangs", "second-terminal")}
# ... or starts its processes as plain programs, each importing what it needs
IN_ONE_PROCESS |= {("fault_tolerance", "by-hand")}


def _started_chapter() -> str | None:
    """``collectives`` for ``python -m workers.collectives ...``; None otherwise, and None
    for a demo that runs in one process."""
    argv = sys.orig_argv
    if "-m" not in argv or argv.index("-m") + 1 == len(argv):
        return None
    package, _, chapter = argv[argv.index("-m") + 1].partition(".")
    demo = argv[argv.index("-m") + 2] if argv.index("-m") + 2 < len(argv) else None
    if package != __name__ or (chapter, demo) in IN_ONE_PROCESS:
        return None
    return chapter


def _start_forkserver_now(chapter: str) -> None:
    import multiprocessing
    from multiprocessing import forkserver

    multiprocessing.get_context("forkserver").set_forkserver_preload(
        ["torch", "torch.distributed", *PRELOADS[chapter]])
    forkserver.ensure_running()
    server_pid = forkserver._forkserver._forkserver_pid  # no public name for it
    atexit.register(_stop_forkserver, server_pid)


def _stop_forkserver(server_pid: int) -> None:
    try:  # it may still be importing torch; its ranks, if any, have been joined
        os.kill(server_pid, signal.SIGKILL)
        os.waitpid(server_pid, 0)
    except (ProcessLookupError, ChildProcessError):
        pass


_chapter = _started_chapter()
if _chapter in PRELOADS and "RANK" not in os.environ:
    _start_forkserver_now(_chapter)
