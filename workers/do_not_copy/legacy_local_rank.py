"""A script written for ``torch.distributed.launch`` before PyTorch 2.0, and its migration.

The old script reads its local rank from an ``--local_rank`` option, which the old
launcher passed. The launcher now passes ``--local-rank`` (with a dash), and ``torchrun``
passes nothing at all: it sets ``LOCAL_RANK`` in the environment. ``--migrated`` runs the
fixed version.

    python -m torch.distributed.launch --nproc-per-node 2 \
        -m workers.do_not_copy.legacy_local_rank
    torchrun --standalone --nproc-per-node 2 \
        -m workers.do_not_copy.legacy_local_rank --migrated
"""

from __future__ import annotations

import argparse
import os
import sys

from workers.ranks import say


def local_rank_the_old_way() -> int:
    parser = argparse.ArgumentParser(prog="legacy_local_rank")
    parser.add_argument("--local_rank", type=int, default=0)  # what the old launcher passed
    return parser.parse_args().local_rank


def local_rank_migrated() -> int:
    parser = argparse.ArgumentParser(prog="legacy_local_rank")
    # Accept both spellings while old launch commands are around; prefer the environment.
    parser.add_argument("--local-rank", "--local_rank", type=int, default=None)
    parser.add_argument("--migrated", action="store_true")
    option = parser.parse_args().local_rank
    return int(os.environ.get("LOCAL_RANK", option or 0))


if __name__ == "__main__":
    if "--migrated" in sys.argv:
        local_rank = local_rank_migrated()
    else:
        local_rank = local_rank_the_old_way()
    found = os.environ.get("LOCAL_RANK", "not set")
    say(int(os.environ.get("RANK", 0)),
        f"running with local rank {local_rank} (LOCAL_RANK in the environment: {found})")
