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
import random
import re
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
        "wrong_sleep_after_open": "slept 0.05 s (time.sleep) in barrier 1: a barrier blocks",
        "wrong_reused_key": "keys an earlier barrier left in the store",
        "wrong_gen_after_open": ("deadlock: after",  # or, as the ranks' timing falls:
                                 "it found the keys an earlier barrier left"),
        "wrong_no_wait": "a rank must wait until every rank has entered",
        "wrong_key_off_by_one": "which no rank ever set or added",
        "wrong_polls": "polls the store in a loop",
        "wrong_sleeps": "slept 0.50 s (time.sleep) instead of blocking in store.wait",
        "wrong_sleeps_after": "the last to arrive, stayed inside",
        "wrong_polls_slowly": "polls the store in a loop",
        "wrong_spins_on_check": "polls the store in a loop",
        "wrong_waits_for_rank0": "a rank must wait until every rank has entered",
        "wrong_one_short": "a rank must wait until every rank has entered",
        "wrong_waits_for_neighbour": ("a rank must wait until every rank has entered",
                                      # or, where the late ranks fall so that each waits
                                      # for the other's key (seed 59754 at 2 ranks):
                                      "deadlock: after"),
        "wrong_wait_timeout_one_second": "its store.wait was given a timeout",
        "wrong_wait_timeout": "and it went on when that ran out",
        "wrong_keys_in_turn": "it found the keys an earlier barrier left",
        "wrong_private_torch_barrier": "called torch.distributed at line",
    },
    "two_collectives": {
        "wrong_always_pad": "already divide by",
        "wrong_all_reduce_when_tiny": "rank 0 called all_reduce: this lab builds",
        "wrong_mean": "holds the mean, not the sum",
        "wrong_no_padding": "elements do not divide by 2: pad the tensor",
        "wrong_reduce_broadcast": "called reduce and broadcast",
        "wrong_rebinds": "tensor is unchanged",
        "wrong_c10d_all_reduce": "called all_reduce: this lab builds all_reduce from one",
        "wrong_process_group": "called all_reduce (through the process group's allreduce",
        "wrong_partial": "called all_reduce: this lab builds all_reduce from one",
        "wrong_async_never_waited": "forgotten wait(): rank 0 never waited for 1 Work(s), "
                                    "the first from all_gather_into_tensor(",
        "wrong_pads_a_whole_part": "already divide by 5, so pad by (-length) % N",
        "wrong_extra_barrier": "called barrier: this lab builds all_reduce",
        "wrong_parts_reversed": "which part of the gathered tensor belongs where",
        "wrong_rounded_share": "kept their start values: the padded tensor was shorter",
    },
    "ring": {
        "wrong_tiny_shortcut": "whole tensors went round the ring",
        "wrong_whole_tensor": "whole tensors went round the ring",
        "wrong_chunk_index": "a chunk index is off",
        "wrong_forgotten_wait": "forgotten wait()",
        "wrong_deadlock": "every rank was waiting to receive, so none was sending",
        "wrong_reuses_buffer": "received into a buffer that its earlier isend(",
        "wrong_changes_sent_chunk": "changed a tensor that its isend(",
        "wrong_c10d_all_reduce": "called all_reduce: a ring by hand uses only isend",
        "wrong_gather_collective": "called all_gather_into_tensor: a ring by hand",
        "wrong_irecv_not_waited": "never waited for the Work of its irecv(",
        "wrong_half_chunks": "the right bytes in more messages than a ring sends",
        "wrong_rebinds_data": "assigning to the name or to tensor.data gives it new",
        "wrong_reads_before_wait": "it read a buffer that an irecv was still receiving",
    },
    "pair_groups": {
        "wrong_destroy_groups": "called destroy_process_group: this lab sums each pair",
        "wrong_float32_copy": "to float32's precision only",
        "wrong_no_group": "ran without group=",
        "wrong_own_group_only": "the ranks made different new_group calls",
        "wrong_neighbours": "its pair is ranks 0 and 1",
        "wrong_swap_with_partner": "no rank made a group with dist.new_group (it used "
                                   "irecv and isend)",
        "wrong_all_gather_object": "no rank made a group with dist.new_group (it used "
                                   "all_gather_object)",
        "wrong_send_in_group": "called send: this lab sums each pair with all_reduce",
        "wrong_barrier_after": "called barrier: this lab sums each pair",
        "wrong_own_pair_first": "the ranks made different new_group calls",
        "wrong_local_sync_neighbours": "with use_local_synchronization every member of a "
                                       "group must make it",
        "wrong_reshape_copy": "(a transposed view, not contiguous) is unchanged",
        "wrong_device_mesh": "(it used all_reduce and init_device_mesh)",
    },
    "average_gradients": {
        "wrong_reshape_copy": "a channels_last gradient is not contiguous",
        "wrong_poll_completed": "done through is_completed() and never called wait()",
        "wrong_missing_divide": "not the mean: divide by the world size",
        "wrong_averaging_twice": "averaged twice",
        "wrong_weights_only": "average every parameter, biases too",
        "wrong_data_not_grad": "not into its .data",
        "wrong_reduce_broadcast": "called reduce and broadcast",
        "wrong_async_never_waited": "forgotten wait(): rank 0 never waited for 21 Work(s)",
        "wrong_divides_before_wait": "changed a tensor that its all_reduce(",
        "wrong_all_gather_mean": "called all_gather: this lab averages with "
                                 "dist.all_reduce only",
        "wrong_reduces_a_copy": "nor into a copy",
        "wrong_c10d_broadcast": "called broadcast: this lab averages with dist.all_reduce",
        "wrong_divides_by_two": "the mean times 1.5: divide the sum by the world size",
        "wrong_skip_zero_grads": "every rank must all-reduce every gradient",
        "wrong_also_averages_weights": "weights changed inside average_gradients",
        "wrong_layers_only": "the gradients of scale: not averaged",
        "wrong_float32_buffer": "the mean to float32's precision only",
    },
    "comm_hook": {
        "wrong_divides_by_two": "gradients are DDP's average times 1.5: divide by the world",
        "wrong_skip_zero_bucket": "the ranks were in different calls",
        "wrong_shared_cache": "it had handed that Work on with get_future(), whose future "
                              "no one had waited for yet",
        "wrong_no_divide": "the sum over the 2 ranks, not the mean",
        "wrong_float32": "all-reduced float32, not float16",
        "wrong_forgotten_wait": "forgotten wait()",
        "wrong_blocking": "ran synchronously",
        "wrong_bfloat16": "all-reduced bfloat16, not float16",
        "wrong_waits_for_work": "hook waited inside itself (work.wait())",
        "wrong_waits_for_future": "hook waited inside itself (future.wait())",
        "wrong_spins_until_done": "hook waited inside itself (work.is_completed()",
        "wrong_c10d_blocking": "ran synchronously",
        "wrong_library_hook": "made by PyTorch's torch.distributed.algorithms."
                              "ddp_comm_hooks.default_hooks",
        "wrong_broadcast_rank0": "called broadcast: the hook averages each bucket",
        "wrong_divide_after_sum": "the sum over the ranks overflowed float16",
        "wrong_returns_float16": "cast the result back to the buffer's dtype",
    },
    "zero1": {
        "wrong_sliding_last_part": "both hold Adam state for the same weight",
        "wrong_adamw": "made torch.optim.AdamW, where this lab asks for torch.optim.Adam",
        "wrong_float32_parts": "Adam's state is float32 on a float64 model",
        "wrong_fresh_adam_each_step": "inside step(), so Adam's moments started again",
        "wrong_gather_before_update": "behind its parts: all-gather the parts after Adam's step",
        "wrong_skip_zero_part": "where every rank's gradient was all zeros; Adam steps",
        "wrong_skip_zero_grad": "the ranks were in different calls",
        "wrong_full_state": "ZeRO-1 keeps about 1/N on each rank",
        "wrong_no_gather": "all-gather the updated shards",
        "wrong_sum": "summed over the ranks, not averaged",
        "wrong_owner_broadcasts": "every rank must make the same collective calls",
        "wrong_zero_redundancy_optimizer": "used PyTorch's ZeroRedundancyOptimizer",
        "wrong_whole_parameters": "of the Adam state (",
        "wrong_state_twice": "ZeRO-1 keeps about 1/N on each rank",
        "wrong_local_gradients": "no rank summed the gradients over the ranks",
        "wrong_gather_objects": "called all_gather_object: ZeRO-1 needs",
        "wrong_gather_never_waited": "forgotten wait(): rank 0 never waited for",
        "wrong_small_kept_whole": "a small parameter's too",
        "wrong_small_params_whole": "a value's state lives on one rank, a small",
    },
    "hogwild": {
        "wrong_one_big_batch": "inputs that are none of its batches: one forward per batch",
        "wrong_loss_float32": "computed its loss in float32 on a float64 model",
        "wrong_cast_float": "replaced the model's weight with a new tensor",
        "wrong_file_lock": "took a lock, fcntl.flock at line 21",
        "wrong_weight_decay": "made an SGD with weight_decay=0.0001",
        "wrong_zero_grad_last": "wrote into the .grad the model arrived with",
        "wrong_zero_in_place": "wrote into the .grad the model arrived with",
        "wrong_copy": "it trained a copy",
        "wrong_out_of_place": "replaced the model's weight with a new tensor",
        "wrong_no_zero_grad": ("drop it before each backward", "zero them before each backward"),
        "wrong_skips_first": "never ran batch 0 of its",
        "wrong_reversed": "took its batches in reverse order",
        "wrong_shuffled": "took its batches in another order",
        "wrong_momentum": "made an SGD with momentum=0.9: this lab asks for plain SGD",
        "wrong_sum_loss": "F.mse_loss with its default mean",
        "wrong_one_step": "updated the shared weight 1 time for its",
        "wrong_steps_every_other": "one SGD step per batch",
        "wrong_new_parameter": "replaced the model's weight with a new tensor",
        "wrong_stops_when_converged": "never ran batch",
        "wrong_lr_tensor_float32": "run alone on a private float64 model",
        "wrong_weight_only": "made an SGD without the model's bias",
        "wrong_manual_weight_only": "the bias 0: every step updates every parameter",
    },
    "uneven": {
        "wrong_agree_once": "agree once before each step, and once more to learn",
        "wrong_polling": "a loop that polls keeps a core busy",
        "wrong_returns_tensor": "returned a Tensor equal to",
        "wrong_no_agreement": "agree before each step whether every rank still has a batch",
        "wrong_until_last": "ran past its last batch",
        "wrong_off_by_one": "too few (an off-by-one",
        "wrong_model_join": "used Join (model.join(), or Join([...]))",
        "wrong_flag_not_waited": "forgotten wait()",
        "wrong_gathers_counts": "called all_gather_object: this lab agrees with all_reduce",
        "wrong_returns_nothing": "returned None, not the number of steps taken",
        "wrong_agrees_after_step": "agree once before each step, and once more",
        "wrong_last_batches_first": "trained on its batches",
        "wrong_empty_returns_early": "without joining the all_reduce the other ranks were "
                                     "waiting in",
        "wrong_agree_through_store": "never called all_reduce: the ranks must agree",
        "wrong_pop_from_end": "in that order: each step takes the next batch, from the first",
        "wrong_read_before_wait": "read a tensor with .item() that its all_reduce",
    },
    "cost_fit": {
        "wrong_unweighted": "that is the fit with each absolute error weighed alike",
        "wrong_sqrt_weights": "each error divided by the square root of its time",
        "wrong_averages_trials": "the mean of its trials (each trial is a point)",
        "wrong_ring_reduce_scatter": "a ring reduce-scatter's counts for reduce_scatter",
        "wrong_log2_unrounded": "log2(N) for broadcast, not rounded up",
        "wrong_broadcast_chain": "N - 1 steps for broadcast, as a chain would take",
        "wrong_whole_bytes": "the whole of n bytes for every collective, not its share",
        "wrong_returns_per_byte": "that is 1 / beta (seconds per byte) where beta goes",
        "wrong_microseconds": "that is alpha in microseconds",
        "wrong_float32": "that is what float32 gives: compute in double precision",
        "wrong_borrows_the_book": "imported workers.cost_model: the fit is the lab",
        "wrong_tensor_values": "you returned torch.Tensor values: return (alpha, beta), two",
        "wrong_set_of_points": "identical points kept once, as a set keeps them",
        "wrong_floor_log2": "log2(N) rounded down for broadcast",
        "wrong_imports_numpy": "your file imports numpy: the contract allows the standard",
    },
    "backend_allreduce": {
        "wrong_own_first": "the order in which the parts are combined depends on the rank",
        "wrong_float32_total": "that is float32's rounding of a float64 sum",
        "wrong_float64_total": "an int64 sum rounded through a float",
        "wrong_rebinds": "the tensor is unchanged, seen by the caller",
        "wrong_always_sum": "the reduction is MIN; read it from opts.reduceOp",
        "wrong_first_tensor_only": "reduce every tensor of the list",
        "wrong_no_refusal": "ReduceOp.BAND returned without an error",
        "wrong_in_the_call": "do the communication inside run",
        # its raw threads' store calls may also block each other: the job then hangs
        # after every rank returned, and its results name the thread of its own
        "wrong_done_too_early": ("wait() returned before the result was there",
                                 "called self.put() on a thread of your own"),
        "wrong_empty_tensor_returns": "reduce every tensor of the list",
        "wrong_puts_in_the_call": "called self.put() in the call itself",
        "wrong_numbers_on_the_thread": "called self.next_seq() inside run",
        "wrong_future_holds_none": "the Work's future holds NoneType, not the list of the",
        "wrong_averages": "all_reduce with ReduceOp.AVG returned without an error",
        "wrong_widens_and_clamps": "an integer sum past its dtype's range wraps round",
        "wrong_one_buffer_of_all": "each tensor of the list is reduced in its own dtype",
        "wrong_a_number_per_tensor": "numbers (self.next_seq()) in one call: take one per",
    },
    "hung_rank": {
        "wrong_trust_retired": "both calls at that number finished, as nccl can let them",
        "wrong_skips_retired": "that is the next number, where they hang",
        "wrong_latest_collective": ("that is the next number, where they hang",
                                   "going on to wait in an all_reduce: you answered [1] and"),
        "wrong_returns_set": "you named the right ranks, as a set: return them as a sorted",
        "wrong_behind_and_odd": "in whose place rank",
        "wrong_tie_rank0_always": "(two against two: the call of the lowest of the tied",
        "wrong_last_call": ("that is the next number, where they hang",
                           "going on to wait in an all_reduce: you answered [1] and 'all_r"),
        "wrong_tie_dict_order": "one call against one: rank 0's call is the rule",
        "wrong_prefix_gloo": "you answered [1] and 'nccl:all_reduce', the answer is [1] and "
                             "'all_reduce'",
        "wrong_lstrip_prefix": "you answered [1] and 'ather', the answer is [1] and "
                               "'gather'",
        "wrong_last_rank": "the rank behind is not always the last one",
        "wrong_fewest_entries": "you named every rank",
        "wrong_own_collective": "not the culprit's own",
        "wrong_by_position": "not by their place in the list",
        "wrong_rank0_rule": "you named the majority",
        "wrong_last_seq": "you named every rank",
        "wrong_retired": "you named no rank",
        "wrong_tie_highest": "rank 0's call is the rule",
        "wrong_first_culprit_only": "more than one rank can be behind or out of step",
        "wrong_keeps_prefix": "drop the backend's prefix",
        "wrong_min_of_empty": "your function raised ValueError: min()",
        "wrong_skips_empty_recorder": "a rank that reached no collective is behind",
        "wrong_lowest_rank_call_when_behind": "and 'barrier', the answer is",
    },
}
# The labs whose wrong solutions issue 42 added, six or more each beyond the first ones.
BEYOND_THE_FIRST = {"barrier": 4, "two_collectives": 4, "ring": 4, "pair_groups": 3,
                    "average_gradients": 4, "comm_hook": 4, "zero1": 4, "hogwild": 3,
                    "uneven": 3, "cost_fit": 6, "backend_allreduce": 6}
# Every check in this file uses one seed (LABS_SEED replays a run's): the verdicts say it.
SEED = int(os.environ.get("LABS_SEED") or random.SystemRandom().randrange(1, 100_000))


def right_solutions(lab: str) -> list[str]:
    """The solutions that must pass: the reference, and the others written differently
    (single_names, which needs PyTorch 2.13's names, has a test of its own)."""
    folder = SOLUTIONS / lab
    return sorted(path.stem for path in folder.glob("*.py")
                  if not path.stem.startswith("wrong_") and path.stem != "single_names")


def ranks_left() -> list[psutil.Process]:
    """The forkserver's live children: the ranks of a job that were not stopped."""
    pid = getattr(forkserver._forkserver, "_forkserver_pid", None)
    if not pid or not psutil.pid_exists(pid):
        return []
    return [child for child in psutil.Process(pid).children()
            if child.status() != psutil.STATUS_ZOMBIE]


def test_every_lab_has_its_solutions_listed_here():
    assert set(LABS) <= set(WRONG)
    for lab in LABS:
        folder = SOLUTIONS / lab
        assert (folder / "reference.py").exists(), lab
        on_disk = {path.stem for path in folder.glob("wrong_*.py")}
        assert on_disk == set(WRONG[lab]), lab  # none left unchecked
        assert len(on_disk) >= 3 + 6 * (lab in BEYOND_THE_FIRST), lab
        if lab in BEYOND_THE_FIRST:  # two right ones written unlike the reference
            assert len([name for name in right_solutions(lab)
                        if name.startswith("alt_")]) >= 2, lab


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
    verdict = check(lab, SOLUTIONS / lab / "reference.py", seed=SEED)
    seconds = time.monotonic() - begin
    assert verdict.code == 0, str(verdict)
    assert verdict.lines[-1].startswith("PASSED: "), str(verdict)
    assert "FAIL" not in str(verdict)
    assert f"seed {SEED}" in verdict.lines[0]
    sizes = lab_module(lab).WORLD_SIZES
    assert [outcome.world_size for outcome in verdict.outcomes] == list(sizes)
    assert len(sizes) >= 2
    assert seconds < 60, f"{lab}: {seconds:.1f} s"
    assert ranks_left() == []


@pytest.mark.parametrize("lab, right", [
    (lab, right) for lab in LABS for right in right_solutions(lab) if right != "reference"])
def test_a_right_solution_written_another_way_passes(lab, right):
    """Another direction, blocking calls, another legal API, another import path: each is
    counted as the function it calls, and passes (at the lab's world sizes but the
    smallest, which the reference's test covers)."""
    sizes = lab_module(lab).WORLD_SIZES[1:]
    verdict = check(lab, SOLUTIONS / lab / f"{right}.py", world_sizes=sizes, seed=SEED)
    assert verdict.code == 0, str(verdict)
    assert verdict.lines[-1].startswith("PASSED: "), str(verdict)
    assert ranks_left() == []


def test_two_collectives_counts_the_2_13_names_too():
    import torch.distributed as dist

    if not hasattr(dist, "all_gather_single"):
        pytest.skip("this torch predates the *_single names")
    verdict = check("two_collectives", SOLUTIONS / "two_collectives" / "single_names.py",
                    seed=SEED)
    assert verdict.code == 0, str(verdict)
    names = {call["name"] for call in verdict.outcomes[0].calls(0)}
    assert names == {"reduce_scatter_single", "all_gather_single"}, names


def test_calls_are_counted_however_they_were_reached():
    """The same all_reduce, by four roads, counted as one all_reduce each: the function's
    own module, ``from torch.distributed import``, a partial, the process group."""
    for name, via in [("wrong_c10d_all_reduce", "function"), ("wrong_partial", "function"),
                      ("wrong_process_group", "method allreduce")]:
        verdict = check("two_collectives", SOLUTIONS / "two_collectives" / f"{name}.py",
                        world_sizes=(2,), seed=SEED)
        calls = verdict.outcomes[0].calls(0)
        assert [(call["name"], call["via"], call["by"]) for call in calls] == \
            [("all_reduce", via, "you")], (name, calls)
    verdict = check("two_collectives", SOLUTIONS / "two_collectives" / "alt_async.py",
                    world_sizes=(2,), seed=SEED)
    calls = verdict.outcomes[0].calls(0)
    assert [call["name"] for call in calls] == ["reduce_scatter_tensor",
                                                "all_gather_into_tensor"], calls
    assert all(call["waited"] for call in calls), calls


@pytest.mark.parametrize("lab, wrong", [(lab, wrong) for lab in LABS for wrong in WRONG[lab]])
def test_a_wrong_solution_fails_naming_its_mistake(lab, wrong):
    # the lab's own timeout, as a reader gets it: a wrong solution that does not hang must
    # still finish within it on a loaded machine (at 4 s, one of CI's runs did not)
    timeout = lab_module(lab).TIMEOUT
    verdict = check(lab, SOLUTIONS / lab / f"{wrong}.py", seed=SEED)
    text = str(verdict)
    assert verdict.code == 1, text
    assert verdict.lines[-1].startswith("FAILED: "), text
    assert "Reread " in verdict.lines[-1]
    assert f"--seed {SEED}" in verdict.lines[-1]
    failed = "\n".join(line for line in verdict.lines if "FAIL " in line)
    expected = WRONG[lab][wrong]  # the words, or a tuple of the ways they may come
    said = " ".join(text.split())
    assert any(words in said for words in
               (expected if isinstance(expected, tuple) else (expected,))), text
    assert failed, text
    assert "Traceback" not in text
    for machinery in ("Unable to cast", "harness.py", "workers/labs", "TrackedWork",
                      "counted(", "lab_solution"):
        assert machinery not in text, text  # the checker's own machinery, never
    hung = verdict.outcomes[-1]
    if hung.timed_out:  # stopped at its timeout, not later, and no rank left
        assert hung.seconds < timeout + 5, hung.seconds
    assert ranks_left() == []


def normalized(verdict) -> tuple:
    """A verdict without its clock: times and timings masked, what it found kept."""
    return verdict.code, tuple(re.sub(r"[+-]?\d+\.\d+|\d+(?= s\b)", "#", line)
                               for line in verdict.lines if not line.startswith("PASSED: "))


def test_a_verdict_is_the_same_in_ten_runs_of_one_seed():
    path = SOLUTIONS / "two_collectives" / "wrong_parts_reversed.py"
    verdicts = {normalized(check("two_collectives", path, world_sizes=(3,), seed=SEED))
                for _ in range(10)}
    assert len(verdicts) == 1, verdicts
    code, lines = verdicts.pop()
    assert code == 1 and any("belongs where" in line for line in lines), lines


def test_the_seed_chooses_the_inputs_alone():
    """--seed N gives the same inputs at a world size, whichever sizes are checked; other
    seeds give others, and the late rank, the shortest rank and the lengths vary."""
    from workers.labs import inputs

    for lab in ("barrier", "two_collectives", "uneven", "hogwild", "zero1", "cost_fit"):
        module = lab_module(lab)
        first, again = inputs(module, 3, SEED), inputs(module, 3, SEED)
        for drawn in (first, again):  # the shared tensors are made, not drawn
            drawn.pop("port", None), drawn.pop("model", None), drawn.pop("arrived", None)
        assert first == again, lab
    late = {tuple(inputs(lab_module("barrier"), 3, seed)["late"]) for seed in range(20)}
    assert len(late) > 3
    delays = inputs(lab_module("barrier"), 5, SEED)["delays"]
    assert max(delays) >= 0.7 and min(delays) < 0.3, delays
    counts = [inputs(lab_module("uneven"), 3, seed)["counts"] for seed in range(30)]
    assert all(0 in c for c in counts), counts  # a rank with no batch at 3 ranks
    assert {c.index(min(c)) for c in counts} == {0, 1, 2}  # the shortest rank varies
    two = [inputs(lab_module("uneven"), 2, seed)["counts"] for seed in range(30)]
    assert all(min(c) >= 1 and c[0] != c[1] for c in two)
    assert {c.index(min(c)) for c in two} == {0, 1}
    lengths = {inputs(lab_module("two_collectives"), 2, seed)["numel"] for seed in range(20)}
    assert len(lengths) > 5 and all(n % 2 for n in lengths)
    lengths = {inputs(lab_module("two_collectives"), 3, seed)["numel"] for seed in range(20)}
    assert lengths == {1, 2}  # shorter than the world size
    ring = [inputs(lab_module("ring"), n, seed)["numel"] // n for n in (2, 5)
            for seed in range(20)]
    assert set(ring[:20]) == {1} and min(ring[20:]) >= 2  # one element a chunk, or two


def test_seed_on_the_command_line(capsys):
    completed = cli_in_process("workers.labs", "check", "two_collectives", "--file",
                               "tests/labs/two_collectives/wrong_mean.py", "--world-sizes",
                               "2", "--seed", "4242", capsys=capsys)
    assert completed.returncode == 1
    assert "seed 4242" in completed.stdout.splitlines()[0]
    assert "--seed 4242 checks the same inputs again" in completed.stdout


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
    assert "deadlock: " in completed.stdout
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
    verdict = check("ring", path, world_sizes=(2,), seed=SEED)
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
    (["check", "ring", "--seed", "-3"], ["the seed must be 0 or more"]),
    (["check", "ring", "--seed", "x"], ["invalid int value: 'x'"]),
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
