"""The timeline (HOROVOD_TIMELINE, start_timeline/stop_timeline): rank 0's files parse as
Chrome trace JSON and hold every collective's rows and phases (timeline_worker.py)."""
import json

import pytest

from _jobs import expect_ok, run_job
from test_ssh import ssh_config  # noqa: F401 - the loopback sshd fixture

# What rank 0's timeline shows inside a 1 MiB allreduce and inside a 64 KiB alltoall's
# data step: one rank moves nothing; ranks of one host go through the shared segment; with
# several ranks per host, rank 0 (a host leader) reduces in its segment, relays over Gloo
# and hands the result back; with one rank per host, Gloo alone.
ONE_HOST = ("SHM_ALLREDUCE", "SHM_ALLTOALL")
RELAYED = ("SHM_ALLREDUCE,TCP_ALLREDUCE,SHM_BCAST", "SHM_GATHER,TCP_ALLTOALL,SHM_SCATTER")


@pytest.mark.parametrize("np,expected", [(1, ("", "")), (2, ONE_HOST), (3, ONE_HOST)])
def test_timeline_records_every_collective(tmp_path, np, expected):
    first, second = tmp_path / "timeline.json", tmp_path / "again.json"
    job = run_job(np, "timeline_worker.py", str(second), *expected,
                  env={"HOROVOD_TIMELINE": str(first)}, forward=("HOROVOD_TIMELINE",),
                  timeout=90)
    expect_ok(job, np, "timeline checks passed")
    assert isinstance(json.loads(first.read_text()), list)


@pytest.mark.parametrize("np,hosts,expected", [
    (4, "node1:2,node2:2", RELAYED),
    (2, "node1:1,node2:1", ("TCP_ALLREDUCE", "TCP_ALLTOALL"))])
def test_timeline_activities_across_hosts(tmp_path, ssh_config, np, hosts,  # noqa: F811
                                          expected):
    first, second = tmp_path / "timeline.json", tmp_path / "again.json"
    job = run_job(np, "timeline_worker.py", str(second), *expected, hosts=hosts,
                  ssh_config=ssh_config, env={"HOROVOD_TIMELINE": str(first)},
                  forward=("HOROVOD_TIMELINE",), timeout=150)
    expect_ok(job, np, "timeline checks passed")
