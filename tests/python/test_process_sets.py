"""Process sets from hvdrun.torch (process_set_worker.py): sets of different shapes on one
host and across loopback SSH hosts, every collective and DistributedOptimizer inside them."""
import pytest

from _jobs import expect_ok, run_job
from test_ssh import ssh_config  # noqa: F401 - the loopback sshd fixture

DYNAMIC = {"HOROVOD_DYNAMIC_PROCESS_SETS": "1"}
FORWARD = ("HOROVOD_DYNAMIC_PROCESS_SETS",)


@pytest.mark.parametrize("np", [1, 2, 3, 4])
def test_process_sets_on_one_host(np):
    job = run_job(np, "process_set_worker.py", env=DYNAMIC, forward=FORWARD, timeout=150)
    expect_ok(job, np, "process set checks passed")


@pytest.mark.parametrize("np,hosts", [(4, "node1:2,node2:2"), (5, "localhost:1,node1:2,node2:2")])
def test_process_sets_across_hosts(ssh_config, np, hosts):  # noqa: F811
    job = run_job(np, "process_set_worker.py", hosts=hosts, ssh_config=ssh_config, env=DYNAMIC,
                  forward=FORWARD, timeout=200)
    expect_ok(job, np, "process set checks passed")


def test_add_needs_dynamic_process_sets():
    """As in Horovod: adding a set after init() needs HOROVOD_DYNAMIC_PROCESS_SETS=1."""
    job = run_job(2, "process_set_worker.py", env={"HOROVOD_DYNAMIC_PROCESS_SETS": "0"},
                  forward=FORWARD, timeout=60)
    assert job.code != 0
    assert "set HOROVOD_DYNAMIC_PROCESS_SETS=1" in job.err, job.describe()


def test_a_call_outside_the_set_is_the_programs_mistake_not_a_failed_job():
    """Rank 1 calls a collective of a set it is not in, inside hvd.elastic.run: ValueError
    on the first call, which the program sees; no restore, and rank 0's result stands."""
    job = run_job(2, "set_mistake_worker.py", env=DYNAMIC, forward=FORWARD, timeout=60)
    assert job.code == 0, job.describe()
    assert "rank 0: reduced 1.0" in job.out, job.describe()
    assert "rank 1: ValueError on call 1" in job.out, job.describe()
