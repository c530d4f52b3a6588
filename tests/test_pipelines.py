"""workers.pipelines beyond what its chapter runs: three stages (the page uses two), the
schedules under torchrun, and bad input (more stages than layers, too few micro-batches,
a number the interleaved schedules cannot split into rounds)."""

from __future__ import annotations

import pytest

from helpers import assert_one_line_error, cli_in_process, quiet_run

SMALL = ("--width", "64", "--micro-batch-size", "8", "--repeats", "1")


def test_three_stages_by_hand_give_one_process_gradients_in_gpipe_order():
    result = quiet_run("workers.pipelines", "gpipe", "--world-size", "3", "--layers", "3",
                       "--micro-batches", "1", "3", *SMALL)
    checked = result.events_named("checked")
    assert sorted((e["rank"], e["micro_batches"]) for e in checked) == [
        (rank, m) for rank in range(3) for m in (1, 3)]
    assert max(e["difference"] for e in checked) < 1e-5
    for rank in range(3):
        spans = [e for e in result.events if e["rank"] == rank and e.get("micro_batches") == 3]
        forwards = [e for e in spans if e["event"] == "forward"]
        backwards = [e for e in spans if e["event"] == "backward"]
        assert [e["micro_batch"] for e in forwards] == [0, 1, 2]
        assert [e["micro_batch"] for e in backwards] == [0, 1, 2]
        assert max(e["t_end"] for e in forwards) <= min(e["t"] for e in backwards)
        # every rank but the first waits for activations; every rank but the last for gradients
        waits = [e for e in spans if e["event"] == "waiting"]
        assert len(waits) == 3 * ((rank > 0) + (rank < 2)) and all(e["queued"] for e in waits)
    # rank 0 prints the bubble beside the formula; with one micro-batch the three stages take
    # turns, so their busy times add up to at most the step: on average over the ranks they
    # are idle at least two thirds of it, on any machine
    said = {int(line.split()[0]): line for line in result.lines_of(0) if ": bubble " in line}
    assert sorted(said) == [1, 3], result.lines_of(0)
    assert said[1].startswith("1 micro-batch: ") and said[3].startswith("3 micro-batches: ")
    assert said[1].endswith("= 0.67") and said[3].endswith("= 0.40"), said
    assert float(said[1].split("bubble ")[1].split()[0]) > 0.6, said[1]


def test_schedules_under_torchrun_give_one_process_gradients():
    result = quiet_run("torch.distributed.run", "--standalone", "--nproc-per-node", "2",
                       "-m", "workers.pipelines", "schedules", "--schedules", "1F1B",
                       "InterleavedZeroBubble", "--layers", "4", "--micro-batches", "2",
                       *SMALL)
    checked = {(e["rank"], e["schedule"]): e for e in result.events_named("checked")}
    assert {key: e["stages"] for key, e in checked.items()} == {
        (0, "1F1B"): [0], (1, "1F1B"): [1],
        (0, "InterleavedZeroBubble"): [0, 2], (1, "InterleavedZeroBubble"): [1, 3]}
    assert max(e["difference"] for e in checked.values()) < 1e-5
    split = {e["event"] for e in result.events if e.get("schedule") == "InterleavedZeroBubble"}
    assert {"backward (inputs)", "backward (weights)"} <= split
    # step(losses=...) fills the list on the last stage's rank only: the micro-batches' mean
    # is one process's loss on the whole batch
    losses = result.events_named("loss")
    assert sorted((e["rank"], e["schedule"]) for e in losses) == [
        (1, "1F1B"), (1, "InterleavedZeroBubble")]
    assert all(e["micro_batches"] == 2 and abs(e["mean"] - e["whole_batch"])
               < 1e-5 * e["whole_batch"] for e in losses), losses


@pytest.mark.parametrize(
    "args, fragment",
    [
        (["gpipe", "--world-size", "4", "--layers", "3"], "4 stages need at least 4 layers"),
        (["schedules", "--layers", "3"], "4 stages need at least 4 layers"),
        (["schedules", "--schedules", "1F1B", "--world-size", "3", "--micro-batches", "2"],
         "at least as many micro-batches as ranks (3), got 2"),
        # PyTorch's interleaved schedules split M into max(1, M // ranks) equal rounds
        (["schedules", "--micro-batches", "5"],
         "multiple of max(1, micro-batches // ranks) = 2, got 5"),
        (["schedules", "--schedules", "InterleavedZeroBubble", "--world-size", "3",
          "--layers", "6", "--micro-batches", "7"], "= 2, got 7"),
        (["schedules", "--schedules", "DualPipe"], "invalid choice: 'DualPipe'"),
        (["gpipe", "--world-size", "1"], "needs a world size of at least 2"),
        (["gpipe", "--micro-batches", "0"], "must be at least 1"),
    ],
)
def test_bad_input_gets_one_line(args, fragment, capsys):
    completed = cli_in_process("workers.pipelines", *args, capsys=capsys)
    assert_one_line_error(completed, fragment)
