"""A tiny module for runner tests: prints the port it was given (and FORCE_COLOR, which a
notebook kernel sets, and two variables a launcher sets), then sleeps ``argv[1]`` seconds."""

import os
import sys
import time

print(
    f"[main] MASTER_ADDR={os.environ['MASTER_ADDR']} MASTER_PORT={os.environ['MASTER_PORT']}"
    f" FORCE_COLOR={os.environ.get('FORCE_COLOR')} RANK={os.environ.get('RANK')}"
    f" TORCHELASTIC_RUN_ID={os.environ.get('TORCHELASTIC_RUN_ID')}",
    flush=True,
)
time.sleep(float(sys.argv[1]) if len(sys.argv) > 1 else 0)
