"""Start three child processes, wait for each with a time limit, and read how
each one ended."""

import multiprocessing as mp
import os
import sys
import time


def work(child: int, seconds: float) -> None:
    print(f"[rank {child}] pid {os.getpid()}, working {seconds} s", flush=True)
    time.sleep(seconds)
    print(f"[rank {child}] done", flush=True)


if __name__ == "__main__":  # a spawned child imports this file: no children
    ctx = mp.get_context("spawn")  # a fresh interpreter per child, on any OS
    children = [ctx.Process(target=work, args=(child, 1.5 - 0.5 * child))
                for child in range(3)]  # the first one started works longest
    for child in children:
        child.start()  # returns at once: the child starts up on its own
    # No flush=True, on purpose: into a pipe or a file, print() keeps this
    # line in a buffer, until the next flush=True, after the children's lines.
    alive = [child.is_alive() for child in children]
    print(f"[main] started 3 children; is_alive() = {alive}")
    for number, child in enumerate(children):
        child.join(timeout=10)  # never wait for ever
        if child.is_alive():  # still running after 10 s: stop it
            child.kill()
            child.join()
        print(f"[main] child {number} exitcode {child.exitcode}", flush=True)
    sys.exit(0 if all(child.exitcode == 0 for child in children) else 1)
