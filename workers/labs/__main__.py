"""``python -m workers.labs``: see ``workers/labs/__init__.py``."""

import importlib
import sys

import workers
from workers.labs import LABS, main
from workers.labs.harness import INDEXED, PRELOAD
from workers.ranks import exit_now

# Start the forkserver now, so that it imports torch while this process does (as
# workers/__init__.py does for a chapter's worker; "labs" is not one of its chapters).
if sys.argv[1:2] == ["check"] and sys.argv[2:3] and sys.argv[2] in LABS \
        and "labs" not in workers.PRELOADS:
    lab = importlib.import_module(f"workers.labs.{sys.argv[2]}")
    workers.PRELOADS["labs"] = (*PRELOAD, *lab.PRELOAD, INDEXED)
    workers._start_forkserver_now("labs")

exit_now(main())
