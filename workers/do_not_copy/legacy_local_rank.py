"""A script written for ``torch.distributed.launch`` before PyTorch 2.0: do not copy it.

It reads its local rank from an ``--local_rank`` option, which the old launcher passed. The
launcher now passes ``--local-rank`` (with a dash), and ``torchrun`` passes nothing at all: it
sets ``LOCAL_RANK`` in the environment. ``--migrated`` shows the fix.

    python -m torch.distributed.launch --nproc-per-node 2 -m workers.legacy_local_rank
    torchrun --standalone --nproc-per-node 2 -m workers.legacy_local_rank --migrated
"""

from __future__ import annotations

import argparse
import os
import sys

from workers.ranks import say


def main() -> None:
    parser = argparse.ArgumentParser(prog="legacy_local_rank")
    if "--migrated" in sys.argv:
        # Accept both spellings for old launchers, but prefer the environment.
        parser.add_argument("--local-rank", "--local_rank", type=int, default=None)
        parser.add_argument("--migrated", action="store_true")
    else:
        parser.add_argument("--local_rank", type=int, default=0)  # the old, broken way
    args = parser.parse_args()
    local_rank = int(os.environ.get("LOCAL_RANK", args.local_rank or 0))
    say(int(os.environ.get("RANK", 0)), f"running with local rank {local_rank} "
        f"(LOCAL_RANK in the environment: {os.environ.get('LOCAL_RANK', 'not set')})")  # fmt: skip


if __name__ == "__main__":
    main()
