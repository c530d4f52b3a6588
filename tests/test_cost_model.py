"""workers.cost_model beyond its chapter: the fit against timings made from known parameters
with noise, the model's terms against the algorithms' counts, the worker at a world size
the page does not run, and bad input."""

from __future__ import annotations

import json
import math
import random

import pytest
from workers.cost_model import COLLECTIVES, fit, terms

from helpers import assert_one_line_error, cli_in_process, help_options, quiet_run


def synthetic(alpha, beta, noise, world_sizes=(2, 3, 4), collective="all_reduce", seed=0):
    """Timings the model would give, each scaled by a random factor within ``noise``."""
    rng = random.Random(seed)
    points = []
    for n in world_sizes:
        steps, share = terms(collective, n)
        for k in range(10, 24, 2):
            size = 1 << k
            exact = steps * alpha + share * size / beta
            points.append((steps, share, size, exact * (1 + rng.uniform(-noise, noise))))
    return points


@pytest.mark.parametrize("collective", COLLECTIVES)
@pytest.mark.parametrize("alpha, beta", [(50e-6, 2e9), (5e-6, 25e9), (300e-6, 0.5e9)])
def test_the_fit_recovers_known_parameters_exactly_without_noise(collective, alpha, beta):
    fitted = fit(synthetic(alpha, beta, 0.0, collective=collective))
    assert fitted.alpha == pytest.approx(alpha, rel=1e-9)
    assert fitted.beta == pytest.approx(beta, rel=1e-9)
    assert fitted.alpha_error == pytest.approx(0, abs=1e-15)
    assert max(abs(r) for r in fitted.residuals) < 1e-9


def test_with_noise_the_truth_lies_within_a_few_standard_errors():
    misses = 0
    for seed in range(50):
        fitted = fit(synthetic(50e-6, 2e9, 0.2, seed=seed))
        assert max(abs(r) for r in fitted.residuals) < 0.6
        if abs(fitted.alpha - 50e-6) > 3 * fitted.alpha_error or \
                abs(fitted.per_byte - 1 / 2e9) > 3 * fitted.per_byte_error:
            misses += 1
    assert misses <= 3, misses  # three standard errors: rarely outside


def test_relative_weights_keep_the_latency_of_small_messages():
    # a 10% error on the largest time must not swamp the latency of the smallest
    points = synthetic(20e-6, 1e9, 0.0, world_sizes=(2,))
    points[-1] = (*points[-1][:3], points[-1][3] * 1.1)
    assert fit(points).alpha == pytest.approx(20e-6, rel=0.1)


def test_the_terms_count_the_algorithms_messages_and_bytes():
    # ring all-reduce: 2(N-1) steps of n/N bytes each
    assert terms("all_reduce", 4) == (6, 1.5)
    assert terms("all_gather", 4) == (3, 0.75)
    # gloo's reduce-scatter is a whole all-reduce
    assert terms("reduce_scatter", 8) == terms("all_reduce", 8)
    # a binomial tree: ceil(log2 N) rounds of the whole tensor
    assert [terms("broadcast", n) for n in (2, 3, 4, 5, 8)] == [
        (1, 1), (2, 2), (2, 2), (3, 3), (3, 3)]
    with pytest.raises(ValueError, match="no model"):
        terms("all_to_all", 4)


@pytest.mark.parametrize("points, message", [
    ([(2, 1.0, 1024, 1e-3)] * 2, "at least 3 points"),
    ([(2, 1.0, 1024, 1e-3)] * 4, "cannot separate alpha from beta"),
])
def test_a_fit_that_cannot_be_made_says_why(points, message):
    with pytest.raises(ValueError, match=message):
        fit(points)


def test_five_ranks_time_every_collective_and_name_what_gloo_ran(tmp_path):
    predictions = tmp_path / "predicted.json"
    predictions.write_text(json.dumps({"all_reduce": {"1020": 0.001}}))
    result = quiet_run("workers.cost_model", "grid", "--world-size", "5", "--backend", "gloo",
                       "--sizes", "1024", "65536", "--trials", "2", "--warmup", "1",
                       "--predictions", str(predictions))
    timings = result.events_named("timing")
    assert {(e["collective"], e["size"]) for e in timings} == {
        (c, s) for c in COLLECTIVES for s in (1020, 65520)}  # whole elements per rank
    assert {e["rank"] for e in timings} == set(range(5))
    assert all(len(e["seconds"]) == 2 and min(e["seconds"]) > 0 for e in timings)
    guessed = [e for e in timings if e["predicted"] is not None]
    assert {(e["collective"], e["size"], e["predicted"]) for e in guessed} == {
        ("all_reduce", 1020, 0.001)}
    assert "predicted 1000 us" in "\n".join(result.lines_of(0))
    records = [e["records"] for e in result.events_named("gloo records")]
    assert len(records) == 5 and all(r == records[0] for r in records)
    assert records[0]["reduce_scatter"] == ["gloo:all_reduce"]
    assert records[0]["broadcast"] == ["gloo:broadcast"]


def test_the_demo_documents_its_options(capsys):
    completed = cli_in_process("workers.cost_model", "grid", "--help", capsys=capsys)
    assert help_options(completed) == {"--collectives", "--sizes", "--warmup", "--trials",
                                       "--predictions", "--world-size", "--backend",
                                       "--events", "--timeout"}


@pytest.mark.parametrize("args, fragments", [
    (["grid", "--world-size", "1"], ["at least 2", "got 1"]),
    (["grid", "--collectives", "all_to_all"], ["invalid choice: 'all_to_all'"]),
    (["grid", "--sizes", "0"], ["--sizes"]),
    (["grid", "--warmup", "-1"], ["--warmup must be 0 or more"]),
    (["grid", "--predictions", "/nonexistent/p.json"], ["cannot read the predictions file"]),
])
def test_bad_input_gets_one_clear_line(args, fragments, capsys):
    assert_one_line_error(cli_in_process("workers.cost_model", *args, capsys=capsys),
                          *fragments)


@pytest.mark.parametrize("text, fragment", [
    ("{", "is not JSON"),
    ('{"all_reduce": [1, 2]}', "must map each collective"),
])
def test_a_predictions_file_that_is_wrong_says_so(tmp_path, capsys, text, fragment):
    path = tmp_path / "p.json"
    path.write_text(text)
    completed = cli_in_process("workers.cost_model", "grid", "--predictions", str(path),
                               capsys=capsys)
    assert_one_line_error(completed, fragment)


def test_beta_of_a_fit_with_no_byte_cost_is_infinite():
    points = [(2, 1.0, size, 1e-4) for size in (1024, 4096, 65536)]
    assert fit(points).beta == math.inf or fit(points).beta > 1e15


def test_a_tensor_parallel_layer_at_three_ranks_is_predicted_from_the_fits_file(tmp_path):
    """At a degree the page does not run: every rank all-reduces tokens x width floats, and
    the prediction printed is the fits file's all_reduce terms at that world size."""
    fits = {name: {"alpha": 1e-4, "per_byte": 1e-9} for name in COLLECTIVES}
    path = tmp_path / "fits.json"
    path.write_text(json.dumps(fits))
    result = quiet_run("workers.cost_model", "uses", "--world-size", "3", "--backend", "gloo",
                       "--uses", "tensor-parallel", "--tokens", "6", "--width", "32",
                       "--trials", "2", "--warmup", "1", "--fits", str(path))
    records = result.events_named("tensor parallel")
    assert {e["rank"] for e in records} == {0, 1, 2}
    assert not result.events_named("ddp buckets") and not result.events_named("zero2")
    steps, share = terms("all_reduce", 3)
    for e in records:
        assert (e["tokens"], e["width"], e["size"]) == (6, 32, 6 * 32 * 4)
        assert math.isclose(e["predicted"], steps * 1e-4 + share * 6 * 32 * 4 * 1e-9)
        assert len(e["seconds"]) == 2 and min(e["seconds"]) > 0


def test_the_uses_demo_documents_its_options(capsys):
    completed = cli_in_process("workers.cost_model", "uses", "--help", capsys=capsys)
    assert help_options(completed) == {"--fits", "--link", "--caps", "--warmup", "--trials",
                                       "--uses",
                                       "--tokens", "--width", "--world-size", "--backend",
                                       "--events", "--timeout"}
