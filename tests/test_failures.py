"""workers.failures beyond what its chapter runs: a hung rank under torchrun (the page hangs it
under mp.spawn only), the scenarios' refusals (a wrong world size), each demo's --help, and
bad input."""

from __future__ import annotations

import pytest

from helpers import assert_one_line_error, cli_in_process, help_options, quiet_run

TORCHRUN = ("torch.distributed.run", "--standalone", "--nproc-per-node", "2")


def test_a_hung_rank_under_torchrun_ends_the_job_at_the_timeout():
    hung = quiet_run(*TORCHRUN, "-m", "workers.failures", "crash", "--hang",
                     "--collective-timeout", "2", expect_returncode=1,
                     expect_output=r"Timed out waiting 2000ms[\s\S]*ChildFailedError")
    [hang] = hung.events_named("hang")
    waited = hung.ended - hang["t"]
    assert 2 <= waited < 20, waited  # the timeout, then the agent stops the hung rank
    assert "rank      : 0" in hung.output  # the root cause is the rank that timed out


@pytest.mark.parametrize(
    "demo, options",
    [
        ("crash", {"--no-record", "--hang", "--crash-at-step", "--collective-timeout",
                   "--events", "--timeout"}),
        ("timeout", {"--collective-timeout", "--events", "--timeout"}),
    ],
)
def test_each_demo_documents_only_its_own_options(demo, options, capsys):
    completed = cli_in_process("workers.failures", demo, "--help", capsys=capsys)
    assert help_options(completed) == options


@pytest.mark.parametrize(
    "args, fragment",
    [
        (["timeout", "--collective-timeout", "0"], "must be above 0"),
        (["crash", "--launcher", "ssh"], "unrecognized arguments: --launcher"),
        (["uneven", "--no-record"], "unrecognized arguments: --no-record"),
        (["timeout", "--hang"], "unrecognized arguments: --hang"),
        (["elastic"], "invalid choice: 'elastic'"),  # the checkpoints chapter's now
    ],
)
def test_bad_input_gets_one_line(args, fragment, capsys):
    assert_one_line_error(cli_in_process("workers.failures", *args, capsys=capsys), fragment)


def test_every_scenario_has_exactly_two_ranks(monkeypatch, capsys):
    for name, value in {"RANK": "0", "LOCAL_RANK": "0", "WORLD_SIZE": "3"}.items():
        monkeypatch.setenv(name, value)  # as torchrun --nproc-per-node 3 would set them
    completed = cli_in_process("workers.failures", "crash", capsys=capsys)
    assert_one_line_error(completed, "use --nproc-per-node 2")
