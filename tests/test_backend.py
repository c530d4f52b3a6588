"""workers.backend beyond its chapter: the backend object on its own (its thread, its Work,
its errors and its timeout), a world size the page does not run, and bad input."""

from __future__ import annotations

import threading
import time
from datetime import timedelta

import pytest
import torch
import torch.distributed as dist
from workers.backend import BackendError, StoreBackend, from_bytes, python_backends

from helpers import assert_one_line_error, cli_in_process, help_options, quiet_run

pytestmark = pytest.mark.skipif(not python_backends(), reason="Backend needs torch 2.14+")


def options(op=dist.ReduceOp.SUM):
    opts = dist.AllreduceOptions()
    opts.reduceOp = op
    return opts


def one_rank(world_size=1, timeout=5.0, threaded=True):
    return StoreBackend(dist.HashStore(), 0, world_size, timedelta(seconds=timeout), threaded)


def test_one_rank_reduces_in_place_and_the_future_holds_the_tensors():
    backend = one_rank()
    x = torch.arange(6.0).view(2, 3).t()  # not contiguous: written through the view
    seen = x[0]  # a view taken before the call sees the result
    work = backend.allreduce([x], options(dist.ReduceOp.MAX))
    assert work.wait() is True
    assert torch.equal(x, torch.arange(6.0).view(2, 3).t()) and seen.data_ptr() == x.data_ptr()
    assert work.get_future().wait()[0] is x
    backend.shutdown()


def test_an_error_on_the_thread_reaches_wait_and_the_future():
    backend = one_rank()

    def fails():
        raise ValueError("bytes went missing")

    work = backend.submit(fails, [])
    with pytest.raises(BackendError, match="mine: bytes went missing"):
        work.wait()
    with pytest.raises(RuntimeError, match="bytes went missing"):
        work.get_future().wait()
    backend.shutdown()


def test_a_peer_that_never_comes_is_an_error_after_the_timeout_not_a_hang():
    backend = one_rank(world_size=2, timeout=0.5)
    began = time.monotonic()
    work = backend.allreduce([torch.ones(2)], options())
    with pytest.raises(BackendError, match="(?i)wait timeout"):
        work.wait()
    assert time.monotonic() - began < 5
    backend.shutdown()


def test_the_thread_ends_at_shutdown():
    before = {t for t in threading.enumerate() if t.name == "mine"}
    backend = one_rank()
    backend.allreduce([torch.ones(1)], options()).wait()
    backend.shutdown()
    for thread in set(threading.enumerate()) - before:
        if thread.name == "mine":
            thread.join(timeout=5)
            assert not thread.is_alive()


@pytest.mark.parametrize("op", [dist.ReduceOp.BAND, dist.ReduceOp.AVG])
def test_a_reduction_it_lacks_is_refused_in_the_call(op):
    with pytest.raises(BackendError, match="is not supported"):
        one_rank(threaded=False).allreduce([torch.ones(1)], options(op))


def test_bytes_of_another_size_name_the_sender():
    with pytest.raises(BackendError, match="rank 3 sent 8 bytes where this rank expected 12"):
        from_bytes(b"\0" * 8, torch.ones(3), 3)
    assert from_bytes(b"", torch.ones(0), 1).numel() == 0


def test_four_ranks_agree_with_gloo_and_with_each_other():
    """A world size the page does not run: every check inside the bound on every rank, the
    same bits of every all-reduce on every rank."""
    result = quiet_run("workers.backend", "values", "--world-size", "4")
    by_rank = {e["rank"]: e["checks"] for e in result.events_named("values")}
    assert sorted(by_rank) == [0, 1, 2, 3]
    for checks in by_rank.values():
        assert all(c["within_bound"] and c["own_order"] for c in checks), checks
    for index, check in enumerate(by_rank[0]):
        if check["check"].startswith(("all_reduce", "broadcast", "all_gather")):
            assert len({by_rank[r][index]["digest"] for r in by_rank}) == 1, check


def test_every_demo_documents_its_options(capsys):
    for demo, expected in [("values", {"--world-size", "--timeout", "--events"}),
                           ("overlap", {"--mebibytes", "--trials"}),
                           ("ddp", {"--steps", "--data-root"}),
                           ("speed", {"--sizes", "--trials"})]:
        completed = cli_in_process("workers.backend", demo, "--help", capsys=capsys)
        assert expected <= help_options(completed), (demo, completed.stdout)


@pytest.mark.parametrize("args, fragments", [
    (["mistakes", "--world-size", "3"], ["mistakes runs on 2 ranks"]),
    (["values", "--world-size", "0"], ["--world-size"]),
    (["ddp", "--steps", "-1"], ["--steps"]),
    (["nonsense"], ["invalid choice"]),
])
def test_bad_input_gets_one_clear_line(args, fragments, capsys):
    assert_one_line_error(cli_in_process("workers.backend", *args, capsys=capsys),
                          *fragments)


def test_the_store_does_not_grow_with_the_collectives():
    store = dist.HashStore()
    backend = StoreBackend(store, 0, 1, timedelta(seconds=5))
    before = store.num_keys()
    for _ in range(20):
        backend.allreduce([torch.ones(3), torch.ones(2)], options()).wait()
        backend.barrier(dist.BarrierOptions()).wait()
    assert store.num_keys() == before
    backend.shutdown()
