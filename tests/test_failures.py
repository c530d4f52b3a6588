"""workers.failures beyond what its chapter runs: an elastic restart ends with exactly the weights
of an uninterrupted run, the scenarios' refusals (elastic without torchrun, a wrong world size),
each demo's --help, and bad input."""

from __future__ import annotations

import pytest
import torch

from helpers import assert_one_line_error, cli_in_process, help_options, quiet_run

TORCHRUN = ("torch.distributed.run", "--standalone", "--nproc-per-node", "2")


def test_an_elastic_restart_ends_like_an_uninterrupted_run(tmp_path):
    restarted, plain = tmp_path / "restarted", tmp_path / "plain"
    restarted.mkdir()
    plain.mkdir()
    elastic = ("-m", "workers.failures", "elastic", "--steps", "12", "--checkpoint-every", "4")
    interrupted = quiet_run(*TORCHRUN, "--max-restarts", "1", *elastic, "--checkpoint-dir",
                            str(restarted), "--crash-at-step", "6", timeout=120)
    straight = quiet_run(*TORCHRUN, *elastic, "--checkpoint-dir", str(plain),
                         "--crash-at-step", "1000", timeout=120)
    assert [e["step"] for e in interrupted.events_named("resumed")] == [4, 4]
    finished = {(e["rank"], e["step"], e["attempt"]) for e in interrupted.events_named("finished")}
    assert finished == {(0, 12, 1), (1, 12, 1)}
    assert {e["step"] for e in straight.events_named("finished")} == {12}
    a = torch.load(restarted / "final.pt", weights_only=True)
    b = torch.load(plain / "final.pt", weights_only=True)
    assert max((a[k] - b[k]).abs().max().item() for k in a) == 0  # no progress lost or changed


@pytest.mark.parametrize(
    "demo, options",
    [
        ("crash", {"--no-record", "--crash-at-step", "--collective-timeout", "--events",
                   "--timeout"}),
        ("pitfalls", {"--events", "--timeout"}),
        ("elastic", {"--crash-at-step", "--steps", "--checkpoint-every", "--checkpoint-dir",
                     "--data-root", "--events", "--timeout"}),
    ],
)
def test_each_demo_documents_only_its_own_options(demo, options, capsys):
    completed = cli_in_process("workers.failures", demo, "--help", capsys=capsys)
    assert help_options(completed) == options


@pytest.mark.parametrize(
    "args, fragment",
    [
        (["elastic", "--checkpoint-dir", "/tmp"], "torchrun --max-restarts 1"),
        (["elastic"], "required: --checkpoint-dir"),
        (["timeout", "--collective-timeout", "0"], "must be above 0"),
        (["crash", "--launcher", "ssh"], "unrecognized arguments: --launcher"),
        (["uneven", "--no-record"], "unrecognized arguments: --no-record"),
    ],
)
def test_bad_input_gets_one_line(args, fragment, capsys):
    assert_one_line_error(cli_in_process("workers.failures", *args, capsys=capsys), fragment)


def test_every_scenario_has_exactly_two_ranks(monkeypatch, capsys):
    for name, value in {"RANK": "0", "LOCAL_RANK": "0", "WORLD_SIZE": "3"}.items():
        monkeypatch.setenv(name, value)  # as torchrun --nproc-per-node 3 would set them
    completed = cli_in_process("workers.failures", "crash", capsys=capsys)
    assert_one_line_error(completed, "use --nproc-per-node 2")
