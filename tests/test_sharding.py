"""workers.sharding beyond what its chapter runs: every strategy equal to DDP at 3 ranks
(the page's padded run has three strategies only) with a width that needs padding (in
float64, where rounding cannot tip a ReLU), each holding and sending what the padded
formulas say; the compare demo under torchrun; each demo's --help; bad input."""

from __future__ import annotations

import math

import pytest
import torch
from workers.sharding import storage_bytes

from helpers import assert_one_line_error, cli_in_process, help_options, quiet_run

WIDTH, DEPTH = 7, 3  # 49 weights per layer: 3 ranks need padding
LAYER = WIDTH * WIDTH
PSI = LAYER * DEPTH
P, G, K = 8, 8, 16  # float64: bytes per parameter, gradient and Adam's two averages
KINDS = ["parameters", "gradients", "optimizer state"]


def test_a_view_costs_no_bytes_of_its_own():
    whole = torch.zeros(10)
    assert storage_bytes([whole, whole[:5], whole.view(2, 5), None]) == 40
    assert storage_bytes([whole, torch.zeros(3)]) == 52


def test_every_strategy_equals_ddp_and_holds_what_the_padded_formulas_say():
    n = 3  # one job: the formulas below hold for any n (2 and 4 pad too, the same way)
    # 3 ranks, 7 strategies: slow on a busy machine; gloo, whose bytes are written to sockets
    result = quiet_run("workers.sharding", "compare", "--world-size", str(n), "--width",
                       str(WIDTH), "--depth", str(DEPTH), "--steps", "3", "--dtype", "float64",
                       "--backend", "gloo", timeout=180)
    records = {(e["rank"], e["name"]): e for e in result.events_named("strategy")}
    assert len(records) == 7 * n
    padded = DEPTH * n * math.ceil(LAYER / n)  # the flat buffers, padded to n equal parts
    chunk = math.ceil(WIDTH / n)  # FSDP2 splits rows: its shards are padded to equal sizes,
    rows = DEPTH * chunk * WIDTH  # but Adam's state is the size of the rows a rank really has
    expected = {"DDP": (P * PSI, G * PSI, K * PSI),
                "ZeRO-1": (P * padded, G * PSI, K * padded // n),
                "ZeRO-2": (P * padded, G * padded // n, K * padded // n),
                "ZeRO-3": (P * padded // n, G * padded // n, K * padded // n),
                "FSDP2": (P * rows, G * rows, K * rows),
                "FSDP2 with reshard_after_forward=False": (P * rows, G * rows, K * rows)}
    share = (n - 1) / n  # of S bytes, what a ring sends from each rank for one transfer
    transfers = {"DDP": 2 * P * PSI, "ZeRO-1": 2 * P * padded, "ZeRO-2": 2 * P * padded,
                 "ZeroRedundancyOptimizer": 3 * P * PSI, "ZeRO-3": 3 * P * padded,
                 "FSDP2": 3 * P * rows * n, "FSDP2 with reshard_after_forward=False":
                 2 * P * rows * n}
    for (rank, name), e in records.items():
        assert e["largest_weight_difference"] < 1e-12, (rank, name)
        assert e["losses"] == pytest.approx(records[(rank, "DDP")]["losses"], rel=1e-12)
        assert e["counted_bytes"] == pytest.approx(share * transfers[name]), (rank, name)
        assert e["written_bytes"] > 0
        if name.startswith("FSDP2"):
            mine = DEPTH * min(chunk, max(0, WIDTH - rank * chunk)) * WIDTH
            assert e["optimizer state"] == K * mine, (rank, name)
            assert (e["parameters"], e["gradients"]) == expected[name][:2], (rank, name)
        elif name in expected:
            assert tuple(e[kind] for kind in KINDS) == expected[name], (rank, name)
    # ZeroRedundancyOptimizer gives each rank whole parameters: together, each one once
    owned = [records[(rank, "ZeroRedundancyOptimizer")]["optimizer state"] for rank in range(n)]
    assert sum(owned) == K * PSI and all(b % (K * LAYER) == 0 for b in owned)


def test_compare_under_torchrun_gives_every_rank_ddps_weights():
    result = quiet_run("torch.distributed.run", "--standalone", "--nproc-per-node", "2",
                       "-m", "workers.sharding", "compare", "--strategies", "zero2", "fsdp2",
                       "--width", "64", "--depth", "2", "--steps", "2", "--dtype", "float64")
    records = {(e["rank"], e["strategy"]): e for e in result.events_named("strategy")}
    assert set(records) == {(r, s) for r in (0, 1) for s in ("ddp", "zero2", "fsdp2")}
    # float64: no ReLU input within its rounding of the kink, so rounding alone (1e-16)
    assert max(e["largest_weight_difference"] for e in records.values()) < 1e-12


@pytest.mark.parametrize(
    "demo, options",
    [
        ("compare", {"--width", "--depth", "--batch-size", "--steps", "--lr", "--strategies",
                     "--dtype", "--world-size", "--backend", "--events", "--timeout"}),
        ("mistakes", {"--width", "--depth", "--batch-size", "--steps", "--lr",
                      "--world-size", "--backend", "--events", "--timeout"}),
    ],
)
def test_each_demo_documents_only_its_own_options(demo, options, capsys):
    completed = cli_in_process("workers.sharding", demo, "--help", capsys=capsys)
    assert help_options(completed) == options


@pytest.mark.parametrize(
    "args, fragment",
    [
        (["compare", "--strategies", "zero4"], "invalid choice: 'zero4'"),
        (["compare", "--dtype", "float16"], "invalid choice: 'float16'"),
        (["compare", "--world-size", "0"], "must be at least 1"),
        (["compare", "--steps", "none"], "expected a whole number"),
        (["compare", "--lr", "0"], "must be above 0"),
        (["compare", "--checkpoint", "x"], "unrecognized arguments: --checkpoint"),
        (["mistakes", "--world-size", "65"], "at most 64 ranks"),
        (["offload"], "invalid choice: 'offload'"),
    ],
)
def test_bad_input_gets_one_line(args, fragment, capsys):
    completed = cli_in_process("workers.sharding", *args, capsys=capsys)
    assert_one_line_error(completed, fragment)
