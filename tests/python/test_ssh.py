"""hvdrun.torch and hvdrun.run on the loopback SSH cluster (real sshd on 127.0.0.2 and
127.0.0.3, aliases node1 and node2, started by tests/support's hvdrun_test_cluster):
ranks on "remote" hosts run the same hvdrun binary and reach the caller and each other
over TCP. Needs root (sshd) like the C++ ssh tests."""
import os

import pytest

import hvdrun
from _jobs import expect_ok, run_job, ssh_config  # noqa: F401 (a fixture)


@pytest.mark.parametrize("np,hosts", [(1, "node1:1"), (2, "node1:1,node2:1"),
                                     (4, "localhost:2,node1:1,node2:1")])
def test_api_over_ssh(ssh_config, np, hosts):
    expect_ok(run_job(np, "api_worker.py", hosts=hosts, ssh_config=ssh_config), np)


def test_optimizer_over_ssh(ssh_config):
    job = run_job(4, "optimizer_worker.py", 30, hosts="node1:2,node2:2", ssh_config=ssh_config)
    expect_ok(job, 4)


def where():
    import socket

    import torch

    import hvdrun.torch as hvd
    hvd.init()
    total = hvd.allreduce(torch.tensor([1.0]), op=hvd.Sum).item()
    return os.environ["HVDRUN_HOSTNAME"], hvd.rank(), hvd.cross_rank(), total, socket.gethostname()


def test_run_over_ssh(ssh_config):
    results = hvdrun.run(where, np=3, hosts="localhost:1,node1:1,node2:1", ssh_config=ssh_config)
    assert [r[:4] for r in results] == [("localhost", 0, 0, 3.0), ("node1", 1, 1, 3.0),
                                        ("node2", 2, 2, 3.0)]


@pytest.mark.parametrize("np,hosts", [(2, "node1:1,node2:1"), (4, "localhost:2,node1:1,node2:1")])
@pytest.mark.parametrize("mode", ["mismatch", "join"])
def test_negotiation_over_ssh(ssh_config, mode, np, hosts):
    """Mismatches raise on every rank naming both sides, and join stands in, when the
    ranks' rounds cross hosts (the host leaders' authenticated mesh)."""
    job = run_job(np, "negotiation_worker.py", mode, hosts=hosts, ssh_config=ssh_config,
                  timeout=120)
    expect_ok(job, np, marker="negotiation checks passed")
