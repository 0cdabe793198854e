"""alltoall and reducescatter from hvdrun.torch at np 1 to 4 on one host (the shared
segment) and over loopback SSH hosts (host leaders relaying over their authenticated mesh), against values a
single process computes: scatter_worker.py."""
import pytest

from _jobs import expect_ok, run_job
from test_ssh import ssh_config  # noqa: F401 - the loopback sshd fixture


@pytest.mark.parametrize("np", [1, 2, 3, 4])
def test_scatter_on_one_host(np):
    expect_ok(run_job(np, "scatter_worker.py", timeout=120), np, "scatter checks passed")


@pytest.mark.parametrize("np,hosts", [(2, "node1:1,node2:1"), (4, "node1:2,node2:2"),
                                     (5, "localhost:1,node1:2,node2:2")])
def test_scatter_across_hosts(ssh_config, np, hosts):  # noqa: F811
    job = run_job(np, "scatter_worker.py", hosts=hosts, ssh_config=ssh_config, timeout=150)
    expect_ok(job, np, "scatter checks passed")
