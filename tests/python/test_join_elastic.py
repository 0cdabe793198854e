"""Elastic join (docs/kubernetes.md): `--nnodes MIN:MAX` on independent hvdrun processes,
one per "node", running a Horovod elastic program (hvd.elastic.run). Node 2's hvdrun is
killed with SIGKILL and the job goes on in process on nodes 0 and 1 (the same processes,
from the last commit); node 2 started again (its pod recreated) joins the running job, its
new rank joining the survivors in process; all finish with exit 0 and the same weights on
every rank. A node that comes after the start joins the running job; a rank that raises is
replaced on its node; a second hvdrun of a node rank still running is asked to try again;
fewer nodes than MIN end the job. Nothing of a job is left running."""
import os
import signal
import subprocess

from _jobs import WORKERS, launcher
from _join import JoinJob, python, wait_until

# elastic_inprocess_worker.py: one file of records per process, "stop" in the directory
# ends the training at the next commit.
from test_elastic import _first, _records


def _worker(tmp_path):
    return [python(), os.path.join(WORKERS, "elastic_inprocess_worker.py"), str(tmp_path)]


def _in_generation(tmp_path, generation, count, job):
    """Waits until `count` processes have made a commit in `generation`; the records."""
    def there():
        recs = _records(tmp_path)
        return sum(1 for r in recs.values() if _first(r, "step", generation)) >= count
    wait_until(f"{count} ranks training in generation {generation}\n{job.describe()}", there, 120)
    return _records(tmp_path)


def test_a_node_killed_leaves_the_job_running_in_process_and_rejoins(jobs, tmp_path):
    job = JoinJob(tmp_path, 3, 1, _worker(tmp_path), flags=("--log-level", "info"),
                  node_range=(2, 3), timeout=60, env={"HVDRUN_JOIN_LAST_CALL": "60"}).start()
    jobs.append(job)
    recs = _in_generation(tmp_path, 0, 3, job)
    assert "node 0: 3 nodes joined; 3 ranks laid out" in job.err(0), job.describe()
    by_rank = {_first(r, "start", 0)[3]: pid for pid, r in recs.items()}
    assert sorted(by_rank) == [0, 1, 2], recs
    # Node 2's hvdrun is the agent of rank 2 (node by node: node 2 runs rank 2).
    assert _first(recs[by_rank[2]], "start", 0)[1] == job.procs[2].pid, recs
    killed = job.procs[2]
    killed.send_signal(signal.SIGKILL)
    assert killed.wait(timeout=30) == -signal.SIGKILL
    _in_generation(tmp_path, 1, 2, job)
    # The pod is recreated: node rank 2 joins the running job, its rank started anew.
    job.start_node(2)
    _in_generation(tmp_path, 2, 3, job)
    open(tmp_path / "stop", "w").close()
    codes = job.wait(timeout=120)
    assert codes == {0: 0, 1: 0, 2: 0}, job.describe()
    job.assert_nothing_left()
    recs = _records(tmp_path)
    assert len(recs) == 4, recs  # the three at the start and one on the node that came back
    for rank in (0, 1):
        pid = by_rank[rank]
        start = _first(recs[pid], "start", 1)
        assert start and start[3] == rank and start[4] == 2 and start[5] > 0, recs[pid]
        assert _first(recs[pid], "start", 2)[3:5] == (rank, 3), recs[pid]
    assert _first(recs[by_rank[2]], "final") is None, recs
    back = next(pid for pid in recs if pid not in by_rank.values())
    assert _first(recs[back], "start", 2)[1:5] == (job.procs[2].pid, 2, 2, 3), recs[back]
    for pid in recs:
        if pid == by_rank[2]:
            continue
        final = _first(recs[pid], "final")
        assert final and final[4] == 3 and final[6] == 1, recs[pid]  # weights identical
    err = job.err(0)
    assert "hvdrun: host node2, node rank 2's hvdrun on " in err, job.describe()
    assert "generation 1 runs in process with 2 ranks (2 kept, 0 started anew)" in err, \
        job.describe()
    assert "generation 2 runs in process with 3 ranks (2 kept, 1 started anew)" in err, \
        job.describe()


def test_a_node_that_comes_after_the_start_joins_the_running_job(jobs, tmp_path):
    # Nodes 0 and 1 start the job (no last call); node 2, up to MAX, comes later.
    job = JoinJob(tmp_path, 2, 1, _worker(tmp_path), node_range=(2, 3), timeout=60,
                  env={"HVDRUN_JOIN_LAST_CALL": "0"}).start()
    jobs.append(job)
    _in_generation(tmp_path, 0, 2, job)
    job.start_node(2)
    _in_generation(tmp_path, 1, 3, job)
    open(tmp_path / "stop", "w").close()
    codes = job.wait(timeout=120)
    assert codes == {0: 0, 1: 0, 2: 0}, job.describe()
    job.assert_nothing_left()
    recs = _records(tmp_path)
    assert len(recs) == 3, recs
    for pid, r in recs.items():
        final = _first(r, "final")
        assert final and final[2] == 1 and final[4] == 3 and final[6] == 1, r
    assert "generation 1 runs in process with 3 ranks (2 kept, 1 started anew)" in job.err(0), \
        job.describe()


def test_a_rank_that_raises_is_replaced_on_its_node(jobs, tmp_path):
    # Rank 1 (node 1's) raises at step 7: a new process takes its place on node 1, which
    # stays in the job (no node is excluded in a join), and rank 0 goes on in its process.
    job = JoinJob(tmp_path, 2, 1, _worker(tmp_path) + ["raise"], node_range=(2, 3), timeout=60,
                  env={"HVDRUN_JOIN_LAST_CALL": "0"}).start()
    jobs.append(job)
    _in_generation(tmp_path, 1, 2, job)
    open(tmp_path / "stop", "w").close()
    codes = job.wait(timeout=120)
    assert codes == {0: 0, 1: 0}, job.describe()
    job.assert_nothing_left()
    recs = _records(tmp_path)
    assert len(recs) == 3, recs
    fresh = [pid for pid, r in recs.items() if _first(r, "start", 0) is None]
    assert len(fresh) == 1 and _first(recs[fresh[0]], "start", 1)[1] == job.procs[1].pid, recs
    assert "generation 1 runs in process with 2 ranks (1 kept, 1 started anew)" in job.err(0), \
        job.describe()


def test_a_node_rank_still_running_makes_its_double_wait(jobs, tmp_path):
    # A second hvdrun of node rank 1 (a pod recreated before node 0 saw the last one go)
    # is asked to try again, not refused: it keeps trying until its --rdzv-timeout.
    job = JoinJob(tmp_path, 2, 1, _worker(tmp_path), node_range=(2, 3), timeout=60,
                  env={"HVDRUN_JOIN_LAST_CALL": "0"}).start()
    jobs.append(job)
    _in_generation(tmp_path, 0, 2, job)
    args = list(job.args)
    args[args.index("--rdzv-timeout") + 1] = "3"
    double = subprocess.run([launcher(), "--node-rank", "1", *args], stdin=subprocess.DEVNULL,
                            capture_output=True, text=True, timeout=60)
    assert double.returncode == 255, double.stderr
    assert "hvdrun: node rank 1: could not join node 0 at 127.0.0.2:" in double.stderr, \
        double.stderr
    assert "within 3 s (--rdzv-timeout): node 0 says: node rank 1 already joined from " in \
        double.stderr, double.stderr
    open(tmp_path / "stop", "w").close()
    assert job.wait(timeout=120) == {0: 0, 1: 0}, job.describe()
    job.assert_nothing_left()


def test_fewer_nodes_than_min_end_the_job_as_without_a_range(jobs, tmp_path):
    job = JoinJob(tmp_path, 2, 1, _worker(tmp_path), node_range=(2, 3), timeout=60,
                  env={"HVDRUN_JOIN_LAST_CALL": "0"}).start()
    jobs.append(job)
    _in_generation(tmp_path, 0, 2, job)
    job.procs[1].send_signal(signal.SIGKILL)
    codes = job.wait(timeout=60)
    assert codes == {0: 255, 1: -signal.SIGKILL}, job.describe()
    assert ("hvdrun: elastic: only 1 node left for generation 1, fewer than the 2 nodes that "
            "--nnodes MIN:MAX asks for (its MIN); ending the job") in job.err(0), job.describe()
    job.assert_nothing_left()
