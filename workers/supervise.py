"""Run one command for the runner, and end its whole process group if the runner dies.

The runner (``workers/runner.py``) starts ``[python, "-m", "workers.supervise", RUNNER_PID,
*COMMAND]`` in a process group of its own; this starts the command in the same group and
waits for it. A notebook kernel that is killed outright (restarted, or chosen by the
out-of-memory killer) cannot stop the jobs it started, and a job that prints nothing would
not even notice that nobody reads its output: this process sees that its parent is gone
and kills the group, children, ranks and all. It exits as the command did: with its exit
code, or by the signal that ended it.
"""

import os
import signal
import subprocess
import sys
import time


def main() -> int:
    runner, command = int(sys.argv[1]), sys.argv[2:]
    child = subprocess.Popen(command)
    # The runner stops a run by signalling the whole group: the command gets the signal
    # itself, and this process waits to report how it ended.
    for name in ("SIGTERM", "SIGINT", "SIGHUP"):
        signal.signal(getattr(signal, name), signal.SIG_IGN)
    while child.poll() is None:
        if os.getppid() != runner:  # the runner is gone
            os.killpg(0, signal.SIGKILL)
        time.sleep(0.1)
    if child.returncode < 0:  # end by the same signal, so the runner sees what happened
        number = -child.returncode
        if number != signal.SIGKILL:  # (whose action cannot be set, nor ignored)
            signal.signal(number, signal.SIG_DFL)
        os.kill(os.getpid(), number)
    return child.returncode


if __name__ == "__main__":
    sys.exit(main())
