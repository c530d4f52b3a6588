"""Every kind of job the book starts on one machine listens on 127.0.0.1 only, and connects
nowhere else: the shared job (workers/job.py's ``joined``), a process-groups job, each
init-methods route, a hang, and a job under torchrun. While each runs, its whole process
tree is sampled with psutil: a listening socket on any address outside 127.0.0.0/8 and ::1,
or a connection to one, fails the test, unless it is one of the two the book documents:

- torchrun's own store, served by its agent on every address (the launchers chapter says
  so; the book cannot change it without patching torchrun);
- the store of the init-methods chapter's ``env://`` and ``tcp://`` routes, which the page
  shows listening on every address (its security section).

gloo binds the address this machine's hostname resolves to unless GLOO_SOCKET_IFNAME names
an interface, and on many machines (this one among them) the hostname resolves to 127.0.0.1,
which would hide a gloo left on its default. So, where the machine allows it (root, or user
namespaces), each job runs in a mount and UTS namespace of its own whose hostname resolves
to one of this machine's non-loopback addresses, as a cluster node's does.
"""

from __future__ import annotations

import ipaddress
import json
import os
import shutil
import signal
import subprocess
import sys
import time
import uuid
from dataclasses import dataclass, field

import psutil
import pytest
from workers.ranks import free_port

from helpers import ROOT

SAMPLE_EVERY = 0.05  # seconds between looks at the job's sockets
JOB_TIMEOUT = 180  # a run of 15 s alone took over 60 s beside other tests in CI
HOSTNAME = "loopback-test-node"


def is_loopback(address: str) -> bool:
    """127.0.0.0/8 and ::1, also as an IPv6 socket writes an IPv4 peer (::ffff:127.0.0.1)."""
    ip = ipaddress.ip_address(address.split("%")[0])
    return (getattr(ip, "ipv4_mapped", None) or ip).is_loopback


def address_elsewhere() -> str | None:
    """An IPv4 address of this machine outside 127.0.0.0/8, as a cluster node's hostname
    resolves to; None on a machine with none."""
    for addresses in psutil.net_if_addrs().values():
        for address in addresses:
            if address.family.name == "AF_INET" and not is_loopback(address.address):
                return address.address
    return None


def hostname_wrapper(tmp_path_factory) -> list[str]:
    """A command prefix that runs a command with its hostname resolving to a non-loopback
    address of this machine ([] where this machine cannot: no such address, no unshare,
    or namespaces refused)."""
    address = address_elsewhere()
    if address is None or shutil.which("unshare") is None:
        return []
    hosts = tmp_path_factory.mktemp("hosts") / "hosts"
    hosts.write_text(f"127.0.0.1 localhost\n::1 localhost\n{address} {HOSTNAME}\n")
    script = 'mount --bind "$0" /etc/hosts && hostname "$1" && shift && exec "$@"'
    probe = [sys.executable, "-c",
             "import socket; print(socket.gethostbyname(socket.gethostname()))"]
    for namespaces in (["--mount", "--uts"], ["--user", "--map-root-user", "--mount", "--uts"]):
        wrapper = ["unshare", *namespaces, "sh", "-c", script, str(hosts), HOSTNAME]
        try:
            seen = subprocess.run([*wrapper, *probe], capture_output=True, text=True,
                                  timeout=30)
        except (OSError, subprocess.TimeoutExpired):
            continue
        if seen.returncode == 0 and seen.stdout.strip() == address:
            return wrapper
    return []


@pytest.fixture(scope="module")
def wrapper(tmp_path_factory) -> list[str]:
    return hostname_wrapper(tmp_path_factory)


@dataclass
class Seen:
    """What the job's processes had open while it ran."""

    listening: dict = field(default_factory=dict)  # (ip, port) -> command lines
    connections: list = field(default_factory=list)  # (who, laddr, raddr, status)
    samples: int = 0
    root: int = 0  # the pid of the command started

    def beyond_loopback(self) -> dict:
        return {where: who for where, who in self.listening.items() if not is_loopback(where[0])}

    def on_loopback(self) -> set:
        return {where for where in self.listening if is_loopback(where[0])}

    def elsewhere(self, but_ports=()) -> set:
        """Connections to an address outside loopback, but those to or from ``but_ports``
        and the machine's own name lookups (see ``is_name_lookup``)."""
        return {f"{who}: {laddr.ip}:{laddr.port} -> {raddr.ip}:{raddr.port} ({status})"
                for who, laddr, raddr, status in self.connections
                if not is_loopback(raddr.ip) and not is_name_lookup(raddr)
                and laddr.port not in but_ports and raddr.port not in but_ports}


def nameservers(path: str = "/etc/resolv.conf") -> set[str]:
    """The DNS servers this machine's resolver asks."""
    try:
        lines = open(path).read().splitlines()
    except OSError:
        return set()
    return {line.split()[1] for line in lines if line.split()[:1] == ["nameserver"]
            and len(line.split()) > 1}


NAMESERVERS = nameservers()


def is_name_lookup(raddr) -> bool:
    """A query to one of this machine's DNS servers (port 53). c10d's TCP store names each
    peer it connects to with a reverse lookup of its address (strace shows a rank asking
    for 1.0.0.127.in-addr.arpa, the ::ffff:127.0.0.1 it dialled, which no hosts file line
    answers); where the DNS server is slow to answer, as in one CI run, the query's socket
    lives long enough to be sampled. That is the machine's resolver, not the job talking
    to a peer."""
    return raddr.port == 53 and raddr.ip in NAMESERVERS


def look(process: psutil.Process, seen: Seen) -> None:
    try:
        connections = process.net_connections(kind="inet")
        command = " ".join(process.cmdline())[:100]
    except (psutil.Error, OSError):
        return  # ended meanwhile
    for connection in connections:
        if connection.status == psutil.CONN_LISTEN:
            where = (connection.laddr.ip, connection.laddr.port)
            seen.listening.setdefault(where, set()).add(f"{process.pid} {command}")
        elif connection.raddr:
            seen.connections.append((f"{process.pid} {command}", connection.laddr,
                                     connection.raddr, connection.status))


def run_and_watch(command: list[str], wrapper: list[str], returncodes=(0,)) -> Seen:
    """Run ``command`` from the repository's root and look at the sockets of its process
    tree every SAMPLE_EVERY seconds until it ends."""
    env = {**os.environ, "MASTER_PORT": str(free_port()), "PYTHONUNBUFFERED": "1",
           "LOOPBACK_TEST": uuid.uuid4().hex}
    env.pop("GLOO_SOCKET_IFNAME", None)  # the book's own setting is what is tested
    job = subprocess.Popen([*wrapper, *command], cwd=ROOT, env=env, stdout=subprocess.PIPE,
                           stderr=subprocess.STDOUT, text=True, start_new_session=True)
    seen = Seen(root=job.pid)
    deadline = time.monotonic() + JOB_TIMEOUT
    try:
        root = psutil.Process(job.pid)
        while job.poll() is None and time.monotonic() < deadline:
            try:
                tree = [root, *root.children(recursive=True)]
            except psutil.Error:
                tree = []
            for process in tree:
                look(process, seen)
            seen.samples += 1
            time.sleep(SAMPLE_EVERY)
        output = job.communicate(timeout=max(1, deadline - time.monotonic()))[0]
    finally:
        if job.poll() is None:
            os.killpg(job.pid, signal.SIGKILL)
            job.wait()
    assert job.returncode in returncodes, output[-3000:]
    return seen


def python(*args: str) -> list[str]:
    return [sys.executable, *args]


def test_the_shared_job_listens_on_loopback_only(wrapper, tmp_path):
    """workers/job.py's joined(): its store and gloo on 127.0.0.1, ranks started by the
    worker itself."""
    seen = run_and_watch(python("-m", "workers.collectives", "p2p", "--world-size", "3"),
                         wrapper)
    assert seen.on_loopback(), "the job was never seen listening: too short to sample?"
    assert seen.beyond_loopback() == {}
    assert seen.elsewhere() == set()


def test_a_backend_of_ones_own_listens_on_loopback_only(wrapper):
    """The backend chapter's job: its own backend's bytes go through the job's store, a gloo
    group of the same ranks beside it."""
    seen = run_and_watch(python("-m", "workers.backend", "values", "--world-size", "3"),
                         wrapper)
    assert seen.on_loopback()
    assert seen.beyond_loopback() == {}
    assert seen.elsewhere() == set()


def test_a_hang_listens_on_loopback_only(wrapper):
    # --timeout bounds the rendezvous too: 3 s failed it once here, beside other tests
    seen = run_and_watch(python("-m", "workers.hangs", "skip", "--world-size", "2",
                                "--timeout", "8"), wrapper)
    assert seen.on_loopback()
    assert seen.beyond_loopback() == {}
    assert seen.elsewhere() == set()


def test_process_groups_jobs_listen_on_loopback_only(wrapper):
    """The backends demo joins twice: a group with no backend named (its own set-up), then
    the shared job's."""
    seen = run_and_watch(python("-m", "workers.process_groups", "backends", "--world-size",
                                "2"), wrapper)
    assert seen.on_loopback()
    assert seen.beyond_loopback() == {}
    assert seen.elsewhere() == set()


def test_init_methods_routes_listen_on_loopback_but_the_default_store(wrapper, tmp_path):
    """Each route of the init-methods chapter, one job each. The store that env:// and
    tcp:// make listens on every address (the page shows it: its security section); nothing
    else does, gloo included."""
    events = tmp_path / "events.jsonl"
    seen = run_and_watch(python("-m", "workers.init_methods", "join", "--method", "env",
                                "tcp", "file", "store", "--world-size", "2", "--events",
                                str(events)), wrapper)
    joined = [json.loads(line) for line in events.read_text().splitlines()]
    listening = {e["method"]: e["listening"] for e in joined if e["listening"]}
    default_stores = {int(address.rsplit(":", 1)[1])
                      for method in ("env", "tcp") for address in listening[method]}
    assert len(default_stores) == 2
    assert {port for _, port in seen.beyond_loopback()} <= default_stores
    assert all(address.startswith("127.0.0.1:") for address in listening["store"])
    assert seen.elsewhere() == set()


def test_the_nosuch0_pitfall_still_fails_as_the_page_shows():
    """sockets_on_loopback gives way to an interface the rank names itself."""
    completed = subprocess.run(python("-m", "workers.init_methods", "pitfalls"), cwd=ROOT,
                               capture_output=True, text=True, timeout=JOB_TIMEOUT)
    assert completed.returncode == 0, completed.stdout + completed.stderr
    assert "Unable to find address for: nosuch0" in completed.stdout, completed.stdout


def test_under_torchrun_only_its_own_stores_listen_beyond_loopback(wrapper, tmp_path):
    """torchrun's agent serves two stores on every address: its rendezvous backend's
    (torch/distributed/elastic/rendezvous/c10d_rendezvous_backend.py, TCPStore) and the one
    its ranks meet at, on MASTER_PORT (dynamic_rendezvous.py, _create_tcp_store_server).
    They are the one exception, which the launchers chapter states. The ranks' gloo stays
    on 127.0.0.1, all of them on this machine."""
    events = tmp_path / "events.jsonl"
    torchrun = shutil.which("torchrun", path=os.path.dirname(sys.executable))
    seen = run_and_watch([torchrun, "--standalone", "--nproc-per-node", "2", "-m",
                          "workers.init_methods", "join", "--events", str(events)], wrapper)
    ranks = [json.loads(line) for line in events.read_text().splitlines()]
    assert len(ranks) == 2
    beyond = seen.beyond_loopback()
    assert int(ranks[0]["env"]["MASTER_PORT"]) in {port for _, port in beyond}, beyond
    assert len({port for _, port in beyond}) == 2, beyond
    listeners = {who.split()[0] for whom in beyond.values() for who in whom}
    assert listeners == {str(seen.root)}, beyond  # torchrun's agent, not a rank
    # torchrun's MASTER_ADDR is its hostname: the ranks reach its store there
    assert seen.elsewhere(but_ports={port for _, port in beyond}) == set()


def test_both_backends_are_told_loopback_unless_the_reader_names_an_interface(monkeypatch):
    """gloo's and nccl's sockets: `lo` where the reader named nothing, theirs where they did."""
    from workers.job import sockets_on_loopback

    monkeypatch.delenv("GLOO_SOCKET_IFNAME", raising=False)
    monkeypatch.setenv("NCCL_SOCKET_IFNAME", "ib0")
    sockets_on_loopback()
    assert os.environ["GLOO_SOCKET_IFNAME"] == "lo"
    assert os.environ["NCCL_SOCKET_IFNAME"] == "ib0"
    monkeypatch.delenv("NCCL_SOCKET_IFNAME")
    sockets_on_loopback()
    assert os.environ["NCCL_SOCKET_IFNAME"] == "lo"
