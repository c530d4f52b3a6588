"""workers.tensor_parallel beyond what its chapter runs: three ranks (a degree the page does
not use, in the bytes-per-layer formula and in the split MLP), the mlp demo under torchrun,
and sizes a degree does not divide (one line, exit 2)."""

from __future__ import annotations

import pytest

from helpers import assert_one_line_error, cli_in_process, quiet_run


def test_three_ranks_send_what_the_formula_says_and_hold_a_third():
    # messages of S/3 bytes: large enough that gloo's few hundred bytes per message stay
    # under the page's 3 %
    result = quiet_run("workers.tensor_parallel", "scaling", "--world-size", "3",
                       "--width", "192", "--tokens", "64", "--layers", "2", timeout=120)
    records = {(e["rank"], e["degree"]): e for e in result.events_named("scaling")}
    assert set(records) == {(r, t) for r in (0, 1, 2) for t in (1, 3)}
    activation = 64 * 192 * 4
    for (rank, degree), e in records.items():
        expected = 2 * 2 * (degree - 1) / degree * activation * 2  # two layers
        assert e["written_bytes"] == pytest.approx(expected, rel=0.03, abs=4096), (rank, degree)
        # up's weight and bias and down's weight split; down's bias replicated
        assert e["local_parameters"] == 2 * ((2 * 192 * 768 + 768) // degree + 192)


def test_mlp_under_torchrun_on_three_ranks_equals_the_whole_mlp():
    result = quiet_run("torch.distributed.run", "--standalone", "--nproc-per-node", "3",
                       "-m", "workers.tensor_parallel", "mlp", "--width", "48", timeout=120)
    records = result.events_named("mlp")
    assert sorted(e["rank"] for e in records) == [0, 1, 2]
    for e in records:
        assert e["forward"] == e["backward"] == {"all_reduce": 1}
        assert e["output_difference"] < 1e-5 and e["gradient_difference"] < 1e-5
        assert e["local_shapes"] == {"up.weight": [64, 48], "up.bias": [64],
                                     "down.weight": [48, 64], "down.bias": [48]}


@pytest.mark.parametrize(
    "args, fragment",
    [
        (["mlp", "--world-size", "3"], "degree of 3 does not divide the 1024 features"),
        (["mlp", "--width", "10", "--hidden", "9"], "degree of 2 does not divide the 9"),
        (["scaling", "--world-size", "4", "--degrees", "3"],
         "degree of 3 does not divide the world size 4"),
        (["placements", "--world-size", "3"], "degree of 3 does not divide the 512"),
        (["loss", "--world-size", "3"], "degree of 3 does not divide the 8192"),
        (["mlp", "--world-size", "0"], "must be at least 1"),
        (["split"], "invalid choice: 'split'"),
    ],
)
def test_bad_input_gets_one_line(args, fragment, capsys):
    completed = cli_in_process("workers.tensor_parallel", *args, capsys=capsys)
    assert_one_line_error(completed, fragment)
