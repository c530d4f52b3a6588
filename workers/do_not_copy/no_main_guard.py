"""A script that forgets the ``if __name__ == "__main__":`` guard. Do not copy it.

    python -m workers.do_not_copy.no_main_guard

Under spawn (and forkserver) the child imports the main module to find ``greet``. Without
the guard that import runs the lines at the bottom again, inside the child, which tries to
start a process of its own before it has finished starting: multiprocessing refuses, with a
RuntimeError.
"""

import multiprocessing as mp  # torch.multiprocessing fails the same way
import sys


def greet() -> None:
    print("hello from the child")


# Top-level code: runs on every import of this module, in the child too.
child = mp.get_context("spawn").Process(target=greet)
child.start()
child.join(timeout=30)
print(f"the child exited with code {child.exitcode}")
sys.exit(child.exitcode)
