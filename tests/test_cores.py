"""Ranks times threads stay within the cores: how the workers count cores and share them.

A many-core reader's box must not be slower than CI's 2 cores: a rank that starts a thread per
logical CPU while other ranks do the same oversubscribes the machine, and two hyper-threads of
one core share its arithmetic. ``physical_cores`` counts a core's hyper-threads once, within the
CPUs this process may use, and ``share_cores`` gives each rank its share of them."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
import torch
import workers.job
import workers.ranks


def fake_sysfs(root: Path, cores_of: dict[int, tuple[int, int]]) -> None:
    for cpu, (package, core) in cores_of.items():
        topology = root / f"cpu{cpu}" / "topology"
        topology.mkdir(parents=True)
        topology.joinpath("physical_package_id").write_text(f"{package}\n")
        topology.joinpath("core_id").write_text(f"{core}\n")


@pytest.fixture
def machine(tmp_path, monkeypatch):
    """A machine of fake CPUs: ``machine(allowed, cores_of)`` sets what this process sees."""
    real_path = workers.ranks.Path

    def make(allowed: set[int], cores_of: dict[int, tuple[int, int]]) -> None:
        fake_sysfs(tmp_path, cores_of)
        monkeypatch.setattr(os, "sched_getaffinity", lambda pid: allowed)
        monkeypatch.setattr(workers.ranks, "Path", lambda text: real_path(
            str(text).replace("/sys/devices/system/cpu", str(tmp_path))))
    return make


def test_hyper_threads_of_one_core_count_once(machine):
    # 8 logical CPUs: 4 cores with two hyper-threads each (Linux numbers siblings n and n+4)
    machine(set(range(8)), {cpu: (0, cpu % 4) for cpu in range(8)})
    assert workers.ranks.physical_cores() == 4


def test_only_the_cpus_this_process_may_use_count(machine):
    # a cpuset of CPUs 2, 3 and 6 (the sibling of 2), on two sockets' numbering
    machine({2, 3, 6}, {cpu: (cpu // 8, cpu % 4) for cpu in range(16)})
    assert workers.ranks.physical_cores() == 2


def test_without_topology_every_allowed_cpu_counts(machine):
    machine({0, 1, 2}, {})
    assert workers.ranks.physical_cores() == 3


@pytest.mark.parametrize("cores", [1, 2, 16, 64])
def test_ranks_times_threads_stay_within_the_cores(cores, monkeypatch):
    monkeypatch.delenv("OMP_NUM_THREADS", raising=False)
    monkeypatch.delenv("LOCAL_WORLD_SIZE", raising=False)
    monkeypatch.setattr(workers.job, "physical_cores", lambda: cores)
    before = torch.get_num_threads()
    try:
        for ranks in range(1, 9):
            workers.job.share_cores(ranks)
            threads = torch.get_num_threads()
            assert threads >= 1 and (ranks * threads <= cores or threads == 1), (ranks, threads)
            assert ranks * (threads + 1) > cores  # and no core is left idle by the share
    finally:
        torch.set_num_threads(before)


def test_a_thread_count_the_reader_set_is_kept(monkeypatch):
    monkeypatch.setenv("OMP_NUM_THREADS", "3")
    monkeypatch.setattr(workers.job, "physical_cores", lambda: 64)
    before = torch.get_num_threads()
    try:
        torch.set_num_threads(3)
        workers.job.share_cores(2)
        assert torch.get_num_threads() == 3
    finally:
        torch.set_num_threads(before)
