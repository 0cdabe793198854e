"""Python programs under join mode (docs/kubernetes.md): three independent hvdrun
processes, one per "node", started in random order with random delays, run a Horovod-API
training program (hvdrun.torch) and a plain torch DDP program (gloo, from MASTER_ADDR,
MASTER_PORT, RANK, WORLD_SIZE); both reach the weights one process computes for the
average gradient. A rank that raises ends every node with its traceback quoted once; a
node killed with SIGKILL ends the job on every other node, which names it; nothing of a
job is left running. Nodes that count different numbers of GPUs make a job every rank of
which says it is not homogeneous."""
import os
import signal
import sys

import pytest
import torch

from _jobs import WORKERS
from _join import JoinJob, python, wait_until

sys.path.insert(0, WORKERS)
import _tiny_model as tiny  # noqa: E402

NODES, PER_NODE = 3, 2
SIZE = NODES * PER_NODE


def train(jobs, tmp_path, worker):
    job = JoinJob(tmp_path, NODES, PER_NODE,
                  [python(), os.path.join(WORKERS, worker), str(tmp_path)]).start()
    jobs.append(job)
    assert job.wait() == {0: 0, 1: 0, 2: 0}, job.describe()
    job.assert_nothing_left()
    trained = [dict(w.split("=") for w in line.split() if "=" in w)
               for line in job.out(0).splitlines() if "<stdout>:trained rank" in line]
    assert len(trained) == SIZE, job.describe()
    # MASTER_PORT is one port for every rank, and a port of its own: not the join port
    # node 0's hvdrun holds, nor hvdrun's or Horovod's rendezvous.
    assert len({t["MASTER_PORT"] for t in trained}) == 1, job.describe()
    for t in trained:
        assert t["MASTER_PORT"] not in (str(job.port), t["HVDRUN_RENDEZVOUS_PORT"],
                                        t["HOROVOD_GLOO_RENDEZVOUS_PORT"]), job.describe()
    return job


def weights(tmp_path, program):
    return [torch.load(tmp_path / f"{program}-{r}.pt") for r in range(SIZE)]


def test_horovod_and_ddp_programs_train_to_the_same_weights(jobs, tmp_path):
    """Every rank of a program holds the same bits (each step's averaged gradient is one
    result given to every rank). Across the two programs, and against the one-process
    reference, the weights agree within 1e-6, not bit for bit: hvdrun and Gloo's DDP add the
    six ranks' gradients in different orders, and float32 addition is not associative."""
    train(jobs, tmp_path, "join_horovod_worker.py")
    train(jobs, tmp_path, "join_ddp_worker.py")
    expected = tiny.reference(SIZE)
    for program in ("horovod", "ddp"):
        ranks = weights(tmp_path, program)
        for r, state in enumerate(ranks):
            for name, value in state.items():
                assert torch.equal(value, ranks[0][name]), (program, r, name)
                assert torch.allclose(value, expected[name], rtol=0, atol=1e-6), \
                    (program, name, (value - expected[name]).abs().max())
    # The training moved the weights: the comparison above is not of untouched ones.
    assert not torch.allclose(expected["0.weight"], tiny.model().state_dict()["0.weight"])


def test_a_rank_raising_ends_every_node_with_its_traceback_once(jobs, tmp_path):
    job = JoinJob(tmp_path, NODES, 1,
                  [python(), os.path.join(WORKERS, "raising_worker.py"), "plain"]).start()
    jobs.append(job)
    assert job.wait() == {0: 1, 1: 1, 2: 1}, job.describe()
    job.assert_nothing_left()
    for r in range(NODES):
        err = job.err(r)
        verdict = err[err.index("hvdrun: rank 1 on host node1 exited with code 1"):]
        assert "its traceback (from its error file, TORCHELASTIC_ERROR_FILE):" in verdict, \
            job.describe()
        assert verdict.count("ValueError: deliberate failure from rank 1") == 1, job.describe()
    # The other nodes print the verdict only: the traceback once in all they print.
    for r in (1, 2):
        assert job.err(r).count("ValueError: deliberate failure from rank 1") == 1, \
            job.describe()
    assert "node rank 1: the failure above is this node's" in job.err(1), job.describe()


@pytest.mark.parametrize("killed", [2, 0])
def test_a_node_killed_ends_the_job_on_every_node_and_is_named(jobs, tmp_path, killed):
    # Each rank leaves a child of its own behind it: the whole tree must go.
    job = JoinJob(tmp_path, NODES, PER_NODE,
                  ["--no-python", "sh", "-c",
                   'sleep 120 & echo "ready $RANK"; wait']).start()
    jobs.append(job)
    wait_until("every rank ready on node 0's output",
               lambda: job.out(0).count("<stdout>:ready ") == SIZE, 30)
    job.procs[killed].send_signal(signal.SIGKILL)
    codes = job.wait()
    assert codes.pop(killed) == -signal.SIGKILL, job.describe()
    assert set(codes.values()) == {255}, job.describe()
    for r in codes:
        err = job.err(r)
        if killed == 0:
            assert f"hvdrun: node rank {r}: node 0 closed the connection without the job's " \
                "result" in err, job.describe()
            continue
        assert "hvdrun: host node2, node rank 2's hvdrun on " in err, job.describe()
        assert "ended unexpectedly (it closed its connection) while ranks 4, 5 were running" \
            in err, job.describe()
        assert "that node's own log (its pod's) says why it ended" in err, job.describe()
    job.assert_nothing_left()


@pytest.mark.parametrize("counts,even", [((2, 1, 3), False), ((2, 2, 2), True)])
def test_nodes_counting_their_own_ranks_agree_whether_the_job_is_homogeneous(
        jobs, tmp_path, counts, even):
    # Each node counts its GPUs (--nproc-per-node gpu): fake ones, unless this machine has
    # GPUs of its own (or an inherited CUDA_VISIBLE_DEVICES), which come first; then each
    # node is given its list in CUDA_VISIBLE_DEVICES, which wins over both.
    fake = "CUDA_VISIBLE_DEVICES" not in os.environ and not os.path.exists("/dev/nvidiactl")
    var = "HVDRUN_FAKE_GPUS" if fake else "CUDA_VISIBLE_DEVICES"
    node_env = {r: {var: ",".join(str(g) for g in range(n))} for r, n in enumerate(counts)}
    job = JoinJob(tmp_path, len(counts), "gpu",
                  [python(), os.path.join(WORKERS, "homogeneous_worker.py")],
                  node_env=node_env).start()
    jobs.append(job)
    assert job.wait() == {r: 0 for r in range(len(counts))}, job.describe()
    job.assert_nothing_left()
    said = [line.split("<stdout>:", 1)[1] for line in job.out(0).splitlines()
            if "<stdout>:rank " in line]
    assert sorted(said) == [f"rank {r}: homogeneous={even}" for r in range(sum(counts))], \
        job.describe()
