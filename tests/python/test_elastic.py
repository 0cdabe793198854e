"""hvdrun's elastic mode seen from hvdrun.torch: a rank that fails restarts the job in
generation 1, where hvd.generation() says so and the program resumes from its
checkpoint; and Horovod's elastic API (hvd.elastic.run, TorchState, ElasticSampler): a
failed collective restores the last commit and re-initialises in the same processes, a
host update interrupts every rank at the same commit, and a program using the API whose
rank crashes is run again by the restart mode."""
import re

from _jobs import run_job

# What each rank of elastic_api_worker.py saw: the injected failure at step 5, the restore
# to the commit at step 3 (its weights too), the host update acted on at the commit at
# step 9 without a restore, all in the same processes and at the same size.
API_EVENTS = ("events=['fail at steps=5', "
              "'reset size=2 steps=3 restored=3 weights_as_committed=True', "
              "'hosts updated at steps=9', 'reset size=2 steps=9']")


def test_a_failed_generation_resumes_from_its_checkpoint(tmp_path):
    job = run_job(2, "elastic_worker.py", tmp_path / "ckpt.pt",
                  launcher_args=["--max-restarts", "1"])
    assert job.code == 0, job.describe()
    assert job.rank_lines("generation 1 resumed at step 42") == {0, 1}, job.describe()
    assert "rank 1 on host localhost exited with code 3" in job.err, job.describe()
    assert "elastic: generation 1 starts with 2 ranks" in job.err, job.describe()


def api_results(job, generation):
    """{rank: line} of the worker's final lines in `generation`."""
    found = {}
    for line in job.out.splitlines():
        m = re.search(r"rank (\d) generation (\d+) (steps=.*)$", line)
        if m and int(m.group(2)) == generation:
            found[int(m.group(1))] = m.group(3)
    return found


def test_elastic_run_restores_the_last_commit_in_the_same_processes():
    job = run_job(2, "elastic_api_worker.py")
    assert job.code == 0, job.describe()
    results = api_results(job, 0)
    assert set(results) == {0, 1}, job.describe()
    assert "hvdrun.torch.elastic: generation" not in job.err, job.describe()
    for line in results.values():
        # 2 epochs of 96 samples in batches of 4 on 2 ranks: 24 steps, the 2 redone after
        # the restore not counted twice; the weights are the same on every rank.
        assert line == f"steps=24 identical=True {API_EVENTS}", job.describe()


def test_a_crashed_rank_of_an_elastic_api_program_is_replaced_by_the_restart_mode():
    job = run_job(2, "elastic_api_worker.py", "crash", launcher_args=["--max-restarts", "1"])
    assert job.code == 0, job.describe()
    assert "rank 1 on host localhost exited with code 7" in job.err, job.describe()
    # Rank 0 of generation 1 says, once, that the state did not come from the last commit.
    note = "hvdrun.torch.elastic: generation 1: hvdrun restarted every process"
    assert job.err.count(note) == 1, job.describe()
    assert api_results(job, 0) == {}, job.describe()
    results = api_results(job, 1)
    assert set(results) == {0, 1}, job.describe()
    for line in results.values():
        assert line == f"steps=24 identical=True {API_EVENTS}", job.describe()


# A Horovod elastic program that hvdrun's agent moves in process (the agent played by the
# test over the rank's control channel, common/control_protocol.h): it says it is elastic,
# is placed in generation 1 with hosts added, acts on it at its next commit without a
# restore, joins generation 1 in the same process and says so again there.
INPROCESS_PROGRAM = """
import sys
import hvdrun.torch as hvd
hvd.init()
state = hvd.elastic.ObjectState(step=0)
resets = []
state.register_reset_callbacks([lambda: resets.append(hvd.generation())])

@hvd.elastic.run
def train(state):
    while hvd.generation() == 0 and state.step < 100000:
        state.step += 1
        state.commit()
    return state.step

steps = train(state)
print(f"generation {hvd.generation()} steps {steps} kept {state.step == steps} "
      f"resets {resets}", flush=True)
"""


def _read_frame(sock):
    """(type, payload) of the next control frame from the rank."""
    def exact(n):
        data = b""
        while len(data) < n:
            chunk = sock.recv(n - len(data))
            assert chunk, "the rank closed its control channel"
            data += chunk
        return data
    length = int.from_bytes(exact(4), "big")
    frame = exact(length)
    return frame[0], frame[1:]


def _placement(generation, added):
    fields = b"".join(v.to_bytes(4, "big", signed=True) for v in (generation, 0, 1, 0, 1, 0, 1))
    fields += (0).to_bytes(4, "big") + (0).to_bytes(4, "big") + (0).to_bytes(4, "big")
    fields += bytes([1 if added else 0, 0, 0])
    return (len(fields) + 1).to_bytes(4, "big") + bytes([4]) + fields


def test_an_elastic_program_moves_to_its_placement_in_the_same_process():
    import os
    import socket
    import subprocess
    import sys
    agent, rank_end = socket.socketpair()
    env = {k: v for k, v in os.environ.items() if not k.startswith("HVDRUN_")
           or k == "HVDRUN_LIBRARY"}
    env["HVDRUN_CONTROL_FD"] = str(rank_end.fileno())
    proc = subprocess.Popen([sys.executable, "-c", INPROCESS_PROGRAM], env=env,
                            pass_fds=[rank_end.fileno()], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    rank_end.close()
    try:
        agent.settimeout(120)
        assert _read_frame(agent) == (1, (0).to_bytes(4, "big"))  # elastic, generation 0
        agent.sendall(_placement(1, added=True))
        assert _read_frame(agent) == (2, (0).to_bytes(4, "big"))  # left generation 0
        assert _read_frame(agent) == (1, (1).to_bytes(4, "big"))  # elastic, generation 1
        out, err = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
        agent.close()
    assert proc.returncode == 0, err
    m = re.search(r"generation (\d+) steps (\d+) kept (\w+) resets (\[.*\])", out)
    assert m, out + err
    assert m.group(1) == "1" and int(m.group(2)) >= 1 and m.group(3) == "True", out
    assert m.group(4) == "[1]", out  # one reset, into generation 1
