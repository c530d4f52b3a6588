"""Ranks times threads stay within the cores: how the workers count cores and share them.

A many-core reader's box must not be slower than CI's 2 cores: a rank that starts a thread per
logical CPU while other ranks do the same oversubscribes the machine, and two hyper-threads of
one core share its arithmetic. ``physical_cores`` counts a core's hyper-threads once, within the
CPUs this process may use and no more than its CPU quota allows, and ``share_cores`` gives each
rank its share of them."""

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

    def make(allowed: set[int], cores_of: dict[int, tuple[int, int]],
             quota: float | None = None) -> None:
        fake_sysfs(tmp_path, cores_of)
        monkeypatch.setattr(os, "sched_getaffinity", lambda pid: allowed)
        monkeypatch.setattr(workers.ranks, "cpu_quota", lambda: quota)
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


@pytest.mark.parametrize("quota, cores", [(4.0, 4), (1.5, 2), (0.5, 1), (100.0, 32)])
def test_a_cpu_quota_caps_the_cores(machine, quota, cores):
    # 64 logical CPUs, 32 cores, as a container limited by docker --cpus sees them
    machine(set(range(64)), {cpu: (0, cpu % 32) for cpu in range(64)}, quota)
    assert workers.ranks.affinity_cores() == 32
    assert workers.ranks.physical_cores() == cores


def fake_cgroups(root: Path, groups: str, files: dict[str, str]) -> float | None:
    """The quota ``cpu_quota`` reads from a fake /proc/self/cgroup and cgroup mount."""
    for name, text in files.items():
        root.joinpath(name).parent.mkdir(parents=True, exist_ok=True)
        root.joinpath(name).write_text(text)
    root.joinpath("self-cgroup").write_text(groups)
    return workers.ranks.cpu_quota(str(root / "self-cgroup"), str(root / "mount"))


def test_cgroup_v2_quota_of_a_container(tmp_path):
    # docker --cpus=1.5 with its own cgroup namespace: the process sees its group as /
    assert fake_cgroups(tmp_path, "0::/\n", {"mount/cpu.max": "150000 100000\n"}) == 1.5


def test_cgroup_v2_the_smallest_quota_up_the_tree_counts(tmp_path):
    # a pod limited to 2 CPUs, its container to 4: the pod's limit binds
    assert fake_cgroups(tmp_path, "0::/kubepods/pod1/c1\n", {
        "mount/kubepods/pod1/c1/cpu.max": "400000 100000\n",
        "mount/kubepods/pod1/cpu.max": "200000 100000\n",
        "mount/kubepods/cpu.max": "max 100000\n",
    }) == 2.0


def test_cgroup_v2_without_a_quota(tmp_path):
    assert fake_cgroups(tmp_path, "0::/user.slice\n",
                        {"mount/user.slice/cpu.max": "max 100000\n"}) is None


def test_cgroup_v1_quota_at_the_root_of_a_containers_mount(tmp_path):
    # cgroup v1 without a namespace: /proc/self/cgroup names the host's path, which the
    # container's mount (rooted at its own group) does not show
    assert fake_cgroups(tmp_path, "4:memory:/docker/abc\n2:cpu,cpuacct:/docker/abc\n", {
        "mount/cpu,cpuacct/cpu.cfs_quota_us": "100000\n",
        "mount/cpu,cpuacct/cpu.cfs_period_us": "100000\n",
    }) == 1.0


def test_cgroup_v1_without_a_quota(tmp_path):
    assert fake_cgroups(tmp_path, "1:cpu:/\n", {
        "mount/cpu/cpu.cfs_quota_us": "-1\n", "mount/cpu/cpu.cfs_period_us": "100000\n",
    }) is None


def test_no_cgroups_no_quota(tmp_path):
    assert workers.ranks.cpu_quota(str(tmp_path / "absent"), str(tmp_path)) is None


def fake_memory(root: Path, groups: str, files: dict[str, str]) -> int | None:
    """The limit ``memory_limit`` reads from a fake /proc/self/cgroup and cgroup mount."""
    fake_cgroups(root, groups, files)
    return workers.ranks.memory_limit(str(root / "self-cgroup"), str(root / "mount"))


def test_cgroup_v2_the_smallest_memory_limit_up_the_tree_counts(tmp_path):
    # docker -m 4g inside a slice limited to 2 GiB; the root has no limit ("max")
    assert fake_memory(tmp_path, "0::/slice/c1\n", {
        "mount/slice/c1/memory.max": f"{4 * 2**30}\n",
        "mount/slice/memory.max": f"{2 * 2**30}\n",
        "mount/memory.max": "max\n",
    }) == 2 * 2**30


def test_cgroup_v1_memory_limit_and_none(tmp_path):
    # v1 writes a huge number where there is no limit
    assert fake_memory(tmp_path, "4:memory:/docker/abc\n", {
        "mount/memory/memory.limit_in_bytes": f"{2**30}\n"}) == 2**30
    assert fake_memory(tmp_path / "none", "4:memory:/\n", {
        "mount/memory/memory.limit_in_bytes": "9223372036854771712\n"}) is None
    assert workers.ranks.memory_limit(str(tmp_path / "absent"), str(tmp_path)) is None


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


@pytest.mark.parametrize("affinity, quota, said", [
    (16, 15.5, "a run of more than 15 ranks keeps more processes busy"),
    (2, 1.5, "a run of two or more ranks keeps more processes busy"),
    (16, 0.5, "even one busy rank is held to part of a core"),
])
def test_a_quota_just_below_the_affinity_is_named(affinity, quota, said):
    """A fractional quota below the cores allowed limits the ranks a run keeps busy."""
    from workers.verdicts.intro import cores_for_ranks

    text = str(cores_for_ranks(affinity, quota))
    assert said in text and f"quota of {quota:g} CPUs" in text, text
