"""The failures and hangs chapters' demos, each ten times with two copies side by side: what
the pages assert must follow from each run's inputs, not from an idle machine (slow; run by
``pytest -m repeats``, not by the README's test command). The hang kinds of ``every`` at 2, 3
and 4 ranks are in test_hangs_ten_runs.py, the fault-tolerance runs in
test_fault_tolerance_ten_runs.py.
"""

from __future__ import annotations

import re
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from helpers import ROOT, quiet_run

pytestmark = [pytest.mark.slow, pytest.mark.repeats]

RUNS = 10
TORCHRUN = ("torch.distributed.run", "--standalone", "--nproc-per-node", "2")


def crash():
    crashed = quiet_run("workers.failures", "crash",
                        expect_output=r"exit codes \[1, 1\][\s\S]*mp.spawn raised Process")
    peer = [line for line in crashed.lines_of(0) if "all_reduce failed" in line]
    assert re.search(r"Connection (closed|reset) by peer", peer[0]), peer


def hang():
    hung = quiet_run("workers.failures", "crash", "--hang",
                     expect_output=r"Timed out waiting 1000ms")
    assert "mp.spawn raised Process" in hung.lines_of("main")[-1]
    [job] = [e for e in hung.events_named("launcher done") if e["launcher"] == "mp.spawn"]
    waits = [e for e in hung.events if e["rank"] == 0 and e["event"] == "all_reduce"
             and job["t"] <= e["t"] <= job["t_end"]]
    assert "Timed out" in waits[-1]["error"] and waits[-1]["t_end"] - waits[-1]["t"] >= 1.0
    assert job["t_end"] >= waits[-1]["t_end"]


def under_torchrun():
    quiet_run(*TORCHRUN, "-m", "workers.failures", "crash", expect_returncode=1,
              expect_output=r"ChildFailedError[\s\S]*RuntimeError: rank 1")
    quiet_run(*TORCHRUN, "-m", "workers.failures", "crash", "--no-record",
              expect_returncode=1, expect_output=r"error_file: <N/A>")


def timeout():
    timed_out = quiet_run("workers.failures", "timeout", expect_output=(
        r"Timed out waiting 1000ms[\s\S]*Rank 1 failed to pass monitoredBarrier"))
    waits = {e["monitored"]: e for e in timed_out.events_named("timed out")}
    assert "Rank 1" in waits[True]["error"] and "Rank 1" not in waits[False]["error"]


def mismatch():
    mismatched = quiet_run("workers.failures", "mismatch", expect_output=(
        r"Timed out waiting 1000ms[\s\S]*Detected mismatch between collectives"))
    plain = sorted((e for e in mismatched.events_named("mismatch") if not e["detail"]),
                   key=lambda e: e["rank"])
    out = ["Timed out" in e["error"] for e in plain]
    assert [e["rank"] for e in plain] == [0, 1] and any(out)
    assert all(e["seconds"] >= 1.0 for e, late in zip(plain, out) if late)
    trace = {e["rank"]: e["entries"] for e in mismatched.events_named("flight recorder")
             if not e["detail"]}
    last = {rank: entries[-1] for rank, entries in trace.items()}
    assert last[0]["collective_seq_id"] == last[1]["collective_seq_id"]
    assert last[0]["profiling_name"] != last[1]["profiling_name"]


def uneven():
    unequal = quiet_run("workers.failures", "uneven", expect_output=r"after 5 steps, stuck for")
    outcome = {(e["join"], e["rank"]): (e["steps"], e["error"])
               for e in unequal.events_named("uneven")}
    assert outcome[(True, 0)] == (5, None) and outcome[(True, 1)] == (6, None)
    assert all(outcome[(False, rank)][1] for rank in (0, 1))


def second_terminal():
    """The hangs page's first run: py-spy reads a hung plain program from outside."""
    outside = quiet_run("workers.hangs", "second-terminal", timeout=180)
    lines = Path(ROOT, "programs", "hang.py").read_text().splitlines()
    reduce_line = 1 + next(i for i, t in enumerate(lines) if "dist.all_reduce" in t)
    spied = [line.text.strip() for line in outside.lines
             if re.match(r"\s+main \(hang\.py:\d+\)", line.text)]
    assert spied == [f"main (hang.py:{reduce_line})"], spied


DEMOS = {"crash": crash, "hang": hang, "under torchrun": under_torchrun, "timeout": timeout,
         "mismatch": mismatch, "uneven": uneven, "hangs second-terminal": second_terminal}


@pytest.mark.parametrize("demo", DEMOS)
def test_ten_runs_two_at_a_time(demo):
    with ThreadPoolExecutor(2) as pool:
        list(pool.map(lambda _: DEMOS[demo](), range(RUNS)))
