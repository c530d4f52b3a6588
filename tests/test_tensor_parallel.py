"""workers.tensor_parallel beyond what its chapter runs: three ranks (a degree the page does
not use, in the bytes-per-layer formula, the split MLP and sequence parallelism), a 2-D mesh of
six ranks (the page's has four), the mlp demo under torchrun, the fake backend's rank 0 at
degrees the page does not use, and sizes a degree does not divide (one line, exit 2)."""

from __future__ import annotations

import pytest

from helpers import assert_one_line_error, cli_in_process, quiet_run


def test_three_ranks_send_what_the_formula_says_and_hold_a_third():
    # messages of S/3 bytes: large enough that gloo's few hundred bytes per message stay
    # under the page's 3 %
    result = quiet_run("workers.tensor_parallel", "scaling", "--world-size", "3",
                       "--width", "192", "--tokens", "64", "--layers", "2", "--backend",
                       "gloo", timeout=120)  # bytes on the wire: gloo's
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
        # no ReLU input within rounding of its kink: the differences are rounding alone
        assert e["smallest_relu_input"] > 1e-6
        assert e["output_difference"] < 1e-5 and e["gradient_difference"] < 1e-5
        assert e["local_shapes"] == {"up.weight": [64, 48], "up.bias": [64],
                                     "down.weight": [48, 64], "down.bias": [48]}


def test_at_scale_rank_0_of_3_and_12_ranks_in_one_process_makes_the_real_ranks_calls():
    """The fake backend at degrees the page does not use: each degree issues the same two
    all-reduces per layer of the whole activations and holds a t-th of the split weights:
    at 3, what three real ranks held and were handed (the test above)."""
    result = quiet_run("workers.tensor_parallel", "at-scale", "--degrees", "1", "3", "12",
                       "--width", "192", "--tokens", "64", "--layers", "2", timeout=120)
    records = {e["degree"]: e for e in result.events_named("at_scale")}
    assert set(records) == {1, 3, 12} and result.ranks == []  # no rank was started
    activation = 64 * 192 * 4
    assert records[1]["collectives"] == {} and records[1]["handed_bytes"] == 0
    for degree in (3, 12):
        e = records[degree]
        assert e["collectives"] == {"all_reduce": 4}
        assert e["handed_bytes"] == 4 * activation
        assert e["local_parameters"] == 2 * ((2 * 192 * 768 + 768) // degree + 192)


def test_sequence_parallelism_on_three_ranks_keeps_two_thirds_less_of_the_norms_input():
    result = quiet_run("workers.tensor_parallel", "sequence", "--world-size", "3",
                       "--width", "96", "--tokens", "96", "--backend", "gloo", timeout=120)
    records = {(e["rank"], e["way"]): e for e in result.events_named("sequence")}
    assert set(records) == {(r, w) for r in (0, 1, 2)
                            for w in ("tensor parallel", "sequence parallel")}
    S = 96 * 96 * 4
    for rank in (0, 1, 2):
        tp, sp = records[rank, "tensor parallel"], records[rank, "sequence parallel"]
        for e in (tp, sp):
            assert e["smallest_relu_input"] > 1e-6, e  # so no gate differs: rounding alone
            assert e["output_difference"] < 1e-5 and e["gradient_difference"] < 1e-5, e
        assert tp["forward"] == tp["backward"] == {"all_reduce": 1}
        assert sp["forward"] == sp["backward"] == {"all_gather_into_tensor": 1,
                                                   "reduce_scatter_tensor": 1}
        assert sp["input_shape"] == [32, 96] and tp["input_shape"] == [96, 96]
        assert sp["norm_gradient"] == "Partial(sum)" and tp["norm_gradient"] == "a plain tensor"
        assert tp["written_bytes"] == pytest.approx(2 * 2 * 2 / 3 * S, rel=0.03, abs=4096)
        # gloo's reduce-scatter sends an all-reduce's bytes
        assert sp["written_bytes"] == pytest.approx(2 * (2 / 3 + 4 / 3) * S, rel=0.03,
                                                    abs=4096)
        # the norm's input and its two numbers per token (mean, 1/std), two thirds of them
        kept_less = 2 / 3 * (S + 2 * 4 * 96)
        assert tp["saved_bytes"] - sp["saved_bytes"] == pytest.approx(kept_less, rel=0.01)


def test_a_2d_mesh_of_six_ranks_trains_like_one_process():
    result = quiet_run("workers.tensor_parallel", "mesh-2d", "--world-size", "6", "--tp", "3",
                       "--width", "48", "--tokens", "24", "--steps", "2", timeout=120)
    steps = result.events_named("mesh_2d")
    assert sorted((e["rank"], e["step"]) for e in steps) == [
        (r, s) for r in range(6) for s in (1, 2)]
    for e in steps:
        assert e["smallest_relu_input"] > 1e-6 and e["weight_difference"] < 1e-5, e
        assert (e["rows"], e["tp"]) == (2, 3)
    held = result.events_named("mesh_2d_placements")
    assert sorted((e["dp_rank"], e["tp_rank"]) for e in held) == [
        (d, t) for d in (0, 1) for t in (0, 1, 2)]
    for e in held:
        assert e["placements"] == ["_StridedShard(dim=0, sf=3)", "Shard(dim=0)"], e
        assert e["local_shape"] == [32, 48]  # 192 hidden units: a third, then a half
        assert e["first_row"] == 64 * e["tp_rank"] + 32 * e["dp_rank"], e


@pytest.mark.parametrize(
    "args, fragment",
    [
        (["mlp", "--world-size", "3"], "degree of 3 does not divide the 1024 features"),
        (["mlp", "--width", "10", "--hidden", "9"], "degree of 2 does not divide the 9"),
        (["scaling", "--world-size", "4", "--degrees", "3"],
         "degree of 3 does not divide the world size 4"),
        (["placements", "--world-size", "3"], "degree of 3 does not divide the 512"),
        (["loss", "--world-size", "3"], "degree of 3 does not divide the 8192"),
        (["sequence", "--world-size", "3"], "degree of 3 does not divide the 256 tokens"),
        (["sequence", "--world-size", "4", "--hidden", "6"],
         "degree of 4 does not divide the 6 features"),
        (["mesh-2d", "--world-size", "4", "--tp", "3"],
         "degree of 3 does not divide the world size 4"),
        (["mesh-2d", "--world-size", "4", "--tokens", "3"], "cannot share 3 tokens"),
        (["mlp", "--world-size", "0"], "must be at least 1"),
        (["at-scale", "--degrees", "2", "48"], "degree of 48 does not divide the 1024"),
        (["at-scale", "--degrees", "0"], "must be at least 1"),
        (["split"], "invalid choice: 'split'"),
    ],
)
def test_bad_input_gets_one_line(args, fragment, capsys):
    completed = cli_in_process("workers.tensor_parallel", *args, capsys=capsys)
    assert_one_line_error(completed, fragment)
