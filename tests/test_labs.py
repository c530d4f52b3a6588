"""The labs' checkers (``python -m workers.labs``) are right about real solutions.

For every lab, the reference solution in tests/labs/<lab>/ passes, and each realistic
wrong solution beside it fails with a verdict that names its mistake. A deadlocking
solution is stopped within its timeout with no rank left; a stub still raising
NotImplementedError, and every kind of bad input, get one line and exit code 2.

The checks run in this process (``workers.labs.check``): the forkserver the first one
starts serves them all, so a check costs its jobs, not a Python and a torch import.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
import uuid
from multiprocessing import forkserver

import psutil
import pytest
from workers.labs import LABS, check, lab_module

from helpers import ROOT, assert_one_line_error, cli_in_process, processes_marked

SOLUTIONS = ROOT / "tests" / "labs"

# Each wrong solution, and what its verdict must say: the mistake, in the reader's words.
WRONG = {
    "barrier": {
        "wrong_reused_key": "keys an earlier barrier left in the store",
        "wrong_no_wait": "a rank must wait until every rank has entered",
        "wrong_key_off_by_one": "which no rank ever set or added",
        "wrong_polls": "polls the store in a loop",
    },
    "two_collectives": {
        "wrong_mean": "holds the mean, not the sum",
        "wrong_no_padding": "10 elements do not divide by 3: pad the tensor",
        "wrong_reduce_broadcast": "called reduce and broadcast",
        "wrong_rebinds": "tensor is unchanged",
    },
    "ring": {
        "wrong_whole_tensor": "whole tensors went round the ring",
        "wrong_chunk_index": "a chunk index is off",
        "wrong_forgotten_wait": "forgotten wait()",
        "wrong_deadlock": "deadlock: the ranks were still running",
    },
    "pair_groups": {
        "wrong_no_group": "ran without group=",
        "wrong_own_group_only": "the ranks made different new_group calls",
        "wrong_neighbours": "its pair is ranks 0 and 1",
    },
    "average_gradients": {
        "wrong_missing_divide": "not the mean: divide by the world size",
        "wrong_averaging_twice": "averaged twice",
        "wrong_weights_only": "average every parameter, biases too",
        "wrong_data_not_grad": "not its .data",
    },
    "comm_hook": {
        "wrong_no_divide": "the sum over the 2 ranks, not the mean",
        "wrong_float32": "sent 4 bytes per gradient value",
        "wrong_forgotten_wait": "forgotten wait()",
        "wrong_blocking": "ran synchronously",
    },
    "zero1": {
        "wrong_full_state": "ZeRO-1 keeps about 1/N on each rank",
        "wrong_no_gather": "all-gather the updated shards",
        "wrong_sum": "summed over the ranks, not averaged",
        "wrong_owner_broadcasts": "every rank must make the same collective calls",
    },
    "hogwild": {
        "wrong_copy": "it trained a copy",
        "wrong_out_of_place": "replaced the model's weight with a new tensor",
        "wrong_no_zero_grad": "zero them before each backward",
    },
    "uneven": {
        "wrong_no_agreement": "agree before each step whether every rank still has a batch",
        "wrong_until_last": "ran past its last batch",
        "wrong_off_by_one": "too few (an off-by-one",
    },
    "hung_rank": {
        "wrong_last_rank": "the rank behind is not always the last one",
        "wrong_fewest_entries": "you named every rank",
        "wrong_own_collective": "not the culprit's own",
        "wrong_by_position": "not by their place in the list",
        "wrong_rank0_rule": "you named the majority",
        "wrong_last_seq": "you named every rank",
        "wrong_retired": "you named no rank",
        "wrong_tie_highest": "rank 0's call is the rule",
    },
}


def ranks_left() -> list[psutil.Process]:
    """The forkserver's live children: the ranks of a job that were not stopped."""
    pid = getattr(forkserver._forkserver, "_forkserver_pid", None)
    if not pid or not psutil.pid_exists(pid):
        return []
    return [child for child in psutil.Process(pid).children()
            if child.status() != psutil.STATUS_ZOMBIE]


def test_every_lab_has_a_reference_and_three_wrong_solutions_listed_here():
    assert sorted(WRONG) == sorted(LABS)
    for lab in LABS:
        folder = SOLUTIONS / lab
        assert (folder / "reference.py").exists(), lab
        on_disk = {path.stem for path in folder.glob("wrong_*.py")}
        assert on_disk == set(WRONG[lab]), lab  # none left unchecked
        assert len(on_disk) >= 3, lab


def test_list_names_the_labs_and_their_chapters(capsys):
    completed = cli_in_process("workers.labs", "list", capsys=capsys)
    assert completed.returncode == 0
    rows = [line.split(maxsplit=2) for line in completed.stdout.splitlines()]
    assert [row[0] for row in rows] == list(LABS)
    assert len(rows) >= 8
    assert len({row[1] for row in rows}) >= 6  # chapters
    for name, chapter, asks in rows:
        assert (ROOT / "book" / f"{chapter}.md").exists(), chapter
        assert (ROOT / "labs" / f"{name}.py").exists(), name
        assert asks == lab_module(name).ASKS


@pytest.mark.parametrize("lab", LABS)
def test_the_reference_solution_passes(lab):
    begin = time.monotonic()
    verdict = check(lab, SOLUTIONS / lab / "reference.py")
    seconds = time.monotonic() - begin
    assert verdict.code == 0, str(verdict)
    assert verdict.lines[-1].startswith("PASSED: "), str(verdict)
    assert "FAIL" not in str(verdict)
    sizes = lab_module(lab).WORLD_SIZES
    assert [outcome.world_size for outcome in verdict.outcomes] == list(sizes)
    assert len(sizes) >= 2
    assert seconds < 60, f"{lab}: {seconds:.1f} s"
    assert ranks_left() == []


def test_two_collectives_counts_the_2_13_names_too():
    import torch.distributed as dist

    if not hasattr(dist, "all_gather_single"):
        pytest.skip("this torch predates the *_single names")
    verdict = check("two_collectives", SOLUTIONS / "two_collectives" / "single_names.py")
    assert verdict.code == 0, str(verdict)
    assert verdict.lines[-1].startswith("PASSED: "), str(verdict)
    names = {call["name"] for call in verdict.outcomes[0].calls(0)}
    assert names == {"reduce_scatter_single", "all_gather_single"}, names


@pytest.mark.parametrize("lab, wrong", [(lab, wrong) for lab in WRONG for wrong in WRONG[lab]])
def test_a_wrong_solution_fails_naming_its_mistake(lab, wrong):
    # the lab's own timeout, as a reader gets it: a wrong solution that does not hang must
    # still finish within it on a loaded machine (at 4 s, one of CI's runs did not)
    timeout = lab_module(lab).TIMEOUT
    verdict = check(lab, SOLUTIONS / lab / f"{wrong}.py")
    text = str(verdict)
    assert verdict.code == 1, text
    assert verdict.lines[-1].startswith("FAILED: "), text
    assert "Reread " in verdict.lines[-1]
    failed = "\n".join(line for line in verdict.lines if "FAIL " in line)
    assert WRONG[lab][wrong] in " ".join(text.split()), text
    assert failed, text
    assert "Traceback" not in text
    hung = verdict.outcomes[-1]
    if hung.timed_out:  # stopped at its timeout, not later, and no rank left
        assert hung.seconds < timeout + 5, hung.seconds
    assert ranks_left() == []


def test_a_deadlock_is_stopped_from_the_shell_with_no_process_left():
    """As a reader runs it: one line per rank says where it waited, and no process of the
    job (forkserver, resource tracker, ranks) outlives the command."""
    marker = f"LABS_TEST_RUN={uuid.uuid4().hex}"
    name, _, value = marker.partition("=")
    begin = time.monotonic()
    completed = subprocess.run(
        [sys.executable, "-m", "workers.labs", "check", "ring", "--file",
         "tests/labs/ring/wrong_deadlock.py", "--timeout", "2"],
        capture_output=True, text=True, timeout=90, cwd=ROOT,
        env={**os.environ, "PYTHONPATH": str(ROOT), name: value})
    seconds = time.monotonic() - begin
    assert completed.returncode == 1, completed.stderr
    assert "deadlock: the ranks were still running after" in completed.stdout
    assert "rank 0 was waiting in recv(src=1" in completed.stdout
    assert "rank 1 was waiting in recv(src=0" in completed.stdout
    assert completed.stderr == ""
    assert seconds < 60
    assert processes_marked(marker) == []


@pytest.mark.parametrize("lab", LABS)
def test_an_unfilled_stub_is_refused_in_one_line(lab, capsys):
    completed = cli_in_process("workers.labs", "check", lab, capsys=capsys)
    assert_one_line_error(completed, f"labs/{lab}.py", "is not implemented yet")


def test_a_function_that_raises_not_implemented_when_run_is_refused(tmp_path):
    path = tmp_path / "ring.py"
    path.write_text("def ring_all_reduce(tensor):\n    if tensor.numel():\n"
                    "        raise NotImplementedError('the all-gather half')\n")
    verdict = check("ring", path, world_sizes=(2,))
    assert verdict.code == 2, str(verdict)
    assert verdict.lines == [f"{path}: ring_all_reduce() is not implemented yet (it "
                             f"raises NotImplementedError): write its body, then check "
                             f"again"]
    assert ranks_left() == []


@pytest.mark.parametrize("args, fragments", [
    (["check", "rnig"], ["unknown lab 'rnig'", "ring"]),
    (["check", "ring", "--file", "no/such/file.py"], ["no file no/such/file.py"]),
    (["check", "ring", "--file", "tests/labs/barrier/reference.py"],
     ["defines no function ring_all_reduce()"]),
    (["check", "pair_groups", "--file", "tests/labs/pair_groups/reference.py",
      "--world-sizes", "3"], ["needs an even world size, got 3"]),
    (["check", "ring", "--world-sizes", "0"], ["every world size must be at least 1"]),
    (["check", "ring", "--timeout", "-1"], ["must be above 0"]),
    (["nonsense"], ["invalid choice: 'nonsense'"]),
])
def test_bad_input_gets_one_line_and_exit_code_2(args, fragments, capsys):
    completed = cli_in_process("workers.labs", *args, capsys=capsys)
    assert_one_line_error(completed, *fragments)


def test_a_file_python_cannot_read_is_refused_in_one_line(tmp_path, capsys):
    path = tmp_path / "ring.py"
    path.write_text("def ring_all_reduce(tensor):\n    return (\n")
    completed = cli_in_process("workers.labs", "check", "ring", "--file", str(path),
                               capsys=capsys)
    assert_one_line_error(completed, f"{path} line 2", "never closed")
