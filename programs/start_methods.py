"""Start a child three times with each start method: what does a start cost,
and what does the child see of a global the parent changed at run time?"""

import time

import torch  # every spawned child imports this file again, and so torch
import torch.multiprocessing as mp

SETTING = "as written in the source"


def report(started) -> None:
    started.put((time.time(), SETTING))


if __name__ == "__main__":
    SETTING = "changed by the parent at run time"
    print(f"[main] torch {torch.__version__}; the methods here, default "
          f"first: {mp.get_all_start_methods()}", flush=True)
    for method in mp.get_all_start_methods():
        ctx = mp.get_context(method)  # changes nothing global
        started = ctx.SimpleQueue()
        costs = []
        for _ in range(3):
            child = ctx.Process(target=report, args=(started,))
            asked = time.time()
            child.start()
            began, seen = started.get()
            child.join(timeout=60)
            costs.append(f"{1000 * (began - asked):.0f}")
        print(f"[main] {method:<10} starts took {', '.join(costs)} ms; the "
              f"child saw SETTING {seen!r}", flush=True)
