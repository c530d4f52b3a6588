"""Start three child processes, wait for each with a time limit, and read how it ended."""

import multiprocessing as mp
import os
import time


def work(child: int, seconds: float) -> None:
    # flush=True: through a pipe or a file, print() holds lines back until its buffer is full
    print(f"[rank {child}] pid {os.getpid()} working for {seconds} s", flush=True)
    time.sleep(seconds)
    print(f"[rank {child}] done", flush=True)


if __name__ == "__main__":  # each child imports this file: it must not start children too
    context = mp.get_context("spawn")  # a fresh interpreter per child, as on macOS and Windows
    children = [context.Process(target=work, args=(child, 1.0 - 0.3 * child))
                for child in range(3)]
    for child in children:
        child.start()  # returns at once: the child starts up on its own
    print("[main] started 3 children", flush=True)
    for child in children:
        child.join(timeout=10)  # never wait for ever
        if child.is_alive():  # still running after 10 s: stop it
            child.kill()
            child.join()
    print(f"[main] exit codes {[child.exitcode for child in children]}", flush=True)
