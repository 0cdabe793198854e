"""hvdrun's elastic mode seen from hvdrun.torch: a rank that fails restarts the job in
generation 1, where hvd.generation() says so and the program resumes from its
checkpoint; and Horovod's elastic API (hvd.elastic.run, TorchState, ElasticSampler): a
failed collective restores the last commit and re-initialises in the same processes, a
host update interrupts every rank at the same commit, and when a rank raises out of the
training loop or a host is lost, the surviving processes go on in process from the last
commit (a new rank started in place of the one that raised, none for the lost host); a
host that discovery offers anew, or one new to the job, joins the running ranks in
process, and each generation's ranks agree whether it is homogeneous."""
import contextlib
import os
import re
import select
import signal
import subprocess
import sys
import time

import pytest

from _jobs import WORKERS, launcher, loopback_cluster, run_job

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


# In-process recovery: elastic_inprocess_worker.py writes one file per process (see its
# docstring); the tests wait on those files with deadlines.
def _records(out_dir):
    """{pid: [(kind, agent, generation, rank, size, steps, extra...)]} of every process."""
    found = {}
    for name in os.listdir(out_dir):
        if not name.startswith("pid-"):
            continue
        with open(os.path.join(out_dir, name)) as f:
            lines = [line.split() for line in f.read().split("\n")[:-1]]  # whole lines
        found[int(name[4:])] = [(w[0],) + tuple(int(v) for v in w[2:]) for w in lines]
    return found


def _wait_for(what, test, proc, deadline_s=180):
    """Waits until test() returns something true (checked every 50 ms), failing with `what`
    when the deadline passes or the launcher ends first."""
    deadline = time.monotonic() + deadline_s
    while True:
        got = test()
        if got:
            return got
        if proc.poll() is not None:
            out, err = proc.communicate()
            pytest.fail(f"hvdrun ended (exit {proc.returncode}) before {what}\n{out}\n{err}")
        if time.monotonic() > deadline:
            pytest.fail(f"no {what} within {deadline_s} s")
        select.select([], [], [], 0.05)


def _start(out_dir, np, launcher_args, extra=(), ssh_config=None, env=None):
    cmd = [launcher(), "-np", str(np)] + list(launcher_args)
    if ssh_config:
        cmd += ["--ssh-config", ssh_config]
    for name in ("HVDRUN_LIBRARY", "PYTHONPATH", "PYTHONDONTWRITEBYTECODE"):
        if name in os.environ:
            cmd += ["-x", name]
    cmd += [sys.executable, os.path.join(WORKERS, "elastic_inprocess_worker.py"), str(out_dir)]
    return subprocess.Popen(cmd + list(extra), stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, env=dict(os.environ, **(env or {})))


@contextlib.contextmanager
def _killed_at_end(proc):
    """Around a test's part while the launcher `proc` runs: kills it on the way out if it
    still runs (the test failed before the job ended)."""
    try:
        yield proc
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()


def _finish(proc, out_dir):
    """Asks the ranks to stop at their next commit and returns (code, stdout, stderr)."""
    open(os.path.join(out_dir, "stop"), "w").close()
    try:
        out, err = proc.communicate(timeout=120)
    except subprocess.TimeoutExpired:
        proc.send_signal(signal.SIGINT)
        out, err = proc.communicate(timeout=30)
        pytest.fail(f"hvdrun did not end within 120 s of the stop file\n{out}\n{err}")
    return proc.returncode, out, err


def _alive(pid):
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    with open(f"/proc/{pid}/stat") as f:
        return f.read().split(")")[-1].split()[0] != "Z"


def _ranks_in(tmp_path, proc, generation, count):
    """Waits until `count` processes have started `generation`; returns the records."""
    def started():
        recs = _records(tmp_path)
        return recs if sum(1 for r in recs.values() if _first(r, "start", generation)) == count \
            else None
    return _wait_for(f"{count} ranks in generation {generation}", started, proc)


def _first(records, kind, generation=None):
    for r in records:
        if r[0] == kind and (generation is None or r[2] == generation):
            return r
    return None


def test_a_rank_that_raises_is_replaced_and_the_others_resume_in_process(tmp_path):
    proc = _start(tmp_path, 2, ["--min-np", "2", "--max-restarts", "2"], ["raise"])
    with _killed_at_end(proc):
        # Generation 1: the survivor (rank 0, its own process) and a new rank 1.
        def moved():
            recs = _records(tmp_path)
            starts = {pid: _first(r, "start", 1) for pid, r in recs.items()}
            return recs if sum(1 for s in starts.values() if s) == 2 else None
        recs = _wait_for("generation 1 with two ranks", moved, proc)
        code, out, err = _finish(proc, tmp_path)
    assert code == 0, out + err
    recs = _records(tmp_path)
    assert len(recs) == 3, recs  # two processes at the start, one started anew
    first = {pid: _first(r, "start", 0) for pid, r in recs.items()}
    survivor = next(pid for pid, s in first.items() if s and s[3] == 0)
    raised = next(pid for pid, s in first.items() if s and s[3] == 1)
    fresh = next(pid for pid, s in first.items() if s is None)
    # The survivor went on in the same process, from the last commit (step 6: the failure
    # came at step 7), and so did the new rank, synced from it.
    assert _first(recs[survivor], "start", 1)[2:6] == (1, 0, 2, 6), recs[survivor]
    assert _first(recs[fresh], "start", 1)[2:6] == (1, 1, 2, 6), recs[fresh]
    assert _first(recs[raised], "final") is None, recs[raised]
    for pid in (survivor, fresh):
        final = _first(recs[pid], "final")
        assert final and final[2] == 1 and final[6] == 1, recs[pid]  # weights identical
    assert "injected failure in the training loop" in err, err
    assert "generation 1 runs in process with 2 ranks (1 kept, 1 started anew)" in err, err
    assert not any(_alive(pid) for pid in recs), recs


def test_a_new_rank_that_never_joins_is_stopped_and_named(tmp_path):
    # Rank 1 raises; the process started in its place never calls hvd.init(). At the start
    # timeout the launcher leaves it out and names it; the survivor, waiting for it in its
    # init(), takes the next generation in its process and trains on.
    proc = _start(tmp_path, 2, ["--min-np", "1", "--max-np", "2", "--max-restarts", "4",
                                "--start-timeout", "5"], ["raise-late"])
    with _killed_at_end(proc):
        def survivor_alone():
            recs = _records(tmp_path)
            return recs if any(_first(r, "step", 2) and _first(r, "step", 2)[4] == 1
                               for r in recs.values()) else None
        recs = _wait_for("the survivor training alone in generation 2", survivor_alone, proc)
        code, out, err = _finish(proc, tmp_path)
    assert code == 0, out + err
    recs = _records(tmp_path)
    late = [pid for pid, r in recs.items() if _first(r, "late")]
    assert len(late) == 1 and _first(recs[late[0]], "start") is None, recs
    survivor = next(pid for pid, r in recs.items() if _first(r, "start", 0)
                    and _first(r, "start", 0)[3] == 0)
    assert _first(recs[survivor], "start", 2)[3:5] == (0, 1), recs[survivor]  # same process
    assert ("hvdrun: rank 1 (process 1 on host localhost) did not join generation 1 within "
            "--start-timeout (5 s); left out of the job and stopped\n") in err, err
    assert ("generation 1 ended: rank 1 (process 1 on host localhost) did not join generation 1 "
            "within --start-timeout (5 s); left out of the job and stopped; generation 2 runs in "
            "process with 1 rank (1 kept, 0 started anew)") in err, err
    assert not any(_alive(pid) for pid in recs), recs


@pytest.fixture(scope="module")
def three_hosts():
    yield from loopback_cluster(3)


def test_a_lost_host_keeps_the_surviving_processes_and_comes_back(tmp_path, three_hosts):
    discover = tmp_path / "discover.sh"
    discover.write_text("#!/bin/sh\necho node1:2; echo node2:2; echo node3:2\n")
    discover.chmod(0o755)
    # node3 is left out for 4 s after its agent is lost, then discovery offers it again.
    proc = _start(tmp_path, 6, ["--host-discovery-script", str(discover), "--min-np", "4",
                                "--max-np", "6", "--blacklist-cooldown-range", "4", "4"],
                  ssh_config=three_hosts, env={"HVDRUN_DISCOVERY_INTERVAL": "0.5"})
    with _killed_at_end(proc):
        def all_training():
            recs = _records(tmp_path)
            stepping = [r for r in recs.values() if any(x[0] == "step" for x in r)]
            return recs if len(recs) == 6 and len(stepping) == 6 else None
        recs = _wait_for("six ranks training", all_training, proc)
        by_rank = {_first(r, "start", 0)[3]: pid for pid, r in recs.items()}
        lost_agent = _first(recs[by_rank[5]], "start", 0)[1]
        lost = {pid for pid, r in recs.items() if _first(r, "start", 0)[1] == lost_agent}
        assert len(lost) == 2 and by_rank[0] not in lost, recs
        survivors = set(recs) - lost
        os.kill(lost_agent, signal.SIGKILL)

        def resumed():
            recs = _records(tmp_path)
            starts = [_first(recs[pid], "start", 1) for pid in survivors]
            return recs if all(starts) else None
        recs = _wait_for("the survivors in generation 1", resumed, proc)

        recs = _ranks_in(tmp_path, proc, 2, 6)
        code, out, err = _finish(proc, tmp_path)
    assert code == 0, out + err
    recs = _records(tmp_path)
    joined = set(recs) - survivors - lost
    assert len(joined) == 2, recs  # node3's two new processes, nothing else started anew
    last_commit = max(r[5] for r in recs[by_rank[0]] if r[0] == "step" and r[2] == 0)
    for pid in survivors:
        start = _first(recs[pid], "start", 1)
        assert start[4] == 4, recs[pid]  # size 6 -> 4
        # From the last commit (rank 0's, synced), not from step 0: the commit being made
        # when the host went may have been saved before its step line was written.
        assert start[5] in (last_commit, last_commit + 3) and start[5] > 0, (last_commit, recs)
    assert sorted(_first(recs[pid], "start", 1)[3] for pid in survivors) == [0, 1, 2, 3], recs
    assert _first(recs[by_rank[0]], "start", 1)[3] == 0, recs  # rank 0 holds the state
    assert "generation 1 runs in process with 4 ranks (4 kept, 0 started anew)" in err, err
    # Size 4 -> 6: the survivors moved at a commit, in their processes; the new ranks
    # started from rank 0's state (their first steps are the survivors').
    moved_at = _first(recs[by_rank[0]], "start", 2)[5]
    assert moved_at > 0, recs
    for pid in survivors | joined:
        start = _first(recs[pid], "start", 2)
        assert start[4] == 6 and start[5] == moved_at, (pid, recs)
        final = _first(recs[pid], "final")
        assert final and final[2] == 2 and final[4] == 6 and final[6] == 1, recs[pid]
    assert sorted(_first(recs[pid], "start", 2)[3] for pid in survivors) == [0, 1, 2, 3], recs
    assert "generation 2 runs in process with 6 ranks (4 kept, 2 started anew)" in err, err
    assert not any(_alive(pid) for pid in recs), recs
    assert not _alive(lost_agent)
    assert not any(_alive(r[1]) for pid in joined for r in recs[pid]), recs  # node3's new agent


def test_a_host_new_to_the_job_joins_it_in_process(tmp_path, three_hosts):
    discover = tmp_path / "discover.sh"
    grow = tmp_path / "grow"
    # node3 appears once the test creates the file `grow`.
    discover.write_text(f"#!/bin/sh\necho node1:2; echo node2:2\n"
                        f"if [ -e '{grow}' ]; then echo node3:2; fi\n")
    discover.chmod(0o755)
    outputs = tmp_path / "outputs"
    proc = _start(tmp_path, 4, ["--host-discovery-script", str(discover), "--min-np", "4",
                                "--max-np", "6", "--output-filename", str(outputs)],
                  ssh_config=three_hosts, env={"HVDRUN_DISCOVERY_INTERVAL": "0.5"})
    with _killed_at_end(proc):
        def all_training():
            recs = _records(tmp_path)
            stepping = [r for r in recs.values() if any(x[0] == "step" for x in r)]
            return recs if len(recs) == 4 and len(stepping) == 4 else None
        recs = _wait_for("four ranks training", all_training, proc)
        original = set(recs)
        by_rank = {_first(r, "start", 0)[3]: pid for pid, r in recs.items()}
        grow.touch()

        recs = _ranks_in(tmp_path, proc, 1, 6)
        code, out, err = _finish(proc, tmp_path)
    assert code == 0, out + err
    recs = _records(tmp_path)
    joined = set(recs) - original
    assert len(joined) == 2, recs  # node3's two processes, no original one replaced
    original_agents = {_first(recs[pid], "start", 0)[1] for pid in original}
    new_agents = {_first(recs[pid], "start", 1)[1] for pid in joined}
    assert len(new_agents) == 1 and not new_agents & original_agents, recs
    for pid in joined:
        assert _first(recs[pid], "start", 0) is None, recs[pid]  # never in generation 0
    # Size 4 -> 6 at a commit: the four original processes moved in place, the new ranks
    # started from rank 0's committed step.
    moved_at = _first(recs[by_rank[0]], "start", 1)[5]
    assert moved_at > 0, recs
    for pid in original | joined:
        start = _first(recs[pid], "start", 1)
        assert start[4] == 6 and start[5] == moved_at, (pid, recs)
        final = _first(recs[pid], "final")
        assert final and final[2] == 1 and final[4] == 6 and final[6] == 1, recs[pid]
    assert sorted(_first(recs[pid], "start", 1)[3] for pid in original) == [0, 1, 2, 3], recs
    assert sorted(_first(recs[pid], "start", 1)[3] for pid in joined) == [4, 5], recs
    assert "generation 1 runs in process with 6 ranks (4 kept, 2 started anew)" in err, err
    assert "restart" not in err, err
    # The output relay grew: the new processes have their own --output-filename directories.
    assert sorted(os.listdir(outputs)) == [f"rank.{n}" for n in range(6)], os.listdir(outputs)
    for n in (4, 5):
        assert sorted(os.listdir(outputs / f"rank.{n}")) == ["stderr", "stdout"]
    assert not any(_alive(pid) for pid in recs), recs
    assert not any(_alive(agent) for agent in original_agents | new_agents), recs


def _grows_in_process(tmp_path, np, launcher_args, size, env=None):
    """Starts an elastic job of `np` ranks whose discovery lists more slots once the test
    creates DIR/grow (`launcher_args` name the script), waits for generation 1 at `size`,
    ends it and checks that it grew in process: the original processes moved at a commit,
    the new ones started from rank 0's state, identical weights, nothing left running.
    Returns (original pids, joined pids, records, stderr)."""
    proc = _start(tmp_path, np, launcher_args + ["--min-np", str(np), "--max-np", str(size)],
                  env=dict(env or {}, HVDRUN_DISCOVERY_INTERVAL="0.5"))
    with _killed_at_end(proc):
        recs = _training(tmp_path, proc, np)
        original = set(recs)
        (tmp_path / "grow").touch()
        _ranks_in(tmp_path, proc, 1, size)
        code, out, err = _finish(proc, tmp_path)
    assert code == 0, out + err
    recs = _records(tmp_path)
    joined = set(recs) - original
    assert len(joined) == size - np, recs
    moved_at = max(_first(recs[pid], "start", 1)[5] for pid in original)
    for pid in original | joined:
        start = _first(recs[pid], "start", 1)
        assert start[4] == size and start[5] == moved_at > 0, (pid, recs)
        final = _first(recs[pid], "final")
        assert final and final[2] == 1 and final[4] == size and final[6] == 1, recs[pid]
    assert sorted(_first(recs[pid], "start", 1)[3] for pid in original) == list(range(np)), recs
    assert (f"generation 1 runs in process with {size} ranks ({np} kept, {size - np} started "
            "anew)") in err, err
    assert "restart" not in err, err
    assert not any(_alive(pid) for pid in recs), recs
    assert not any(_alive(r[1]) for pid in recs for r in recs[pid]), recs  # the agents
    return original, joined, recs, err


def test_a_job_grows_in_process_onto_more_slots_of_its_host(tmp_path):
    # localhost lists 2 slots, then 3: the third process starts under the same agent.
    discover = tmp_path / "discover.sh"
    discover.write_text(f"#!/bin/sh\nif [ -e '{tmp_path / 'grow'}' ]; then echo localhost:3; "
                        "else echo localhost:2; fi\n")
    discover.chmod(0o755)
    original, joined, recs, _ = _grows_in_process(
        tmp_path, 2, ["--host-discovery-script", str(discover)], 3)
    agents = {_first(recs[pid], "start", 0)[1] for pid in original}
    assert len(agents) == 1 and _first(recs[joined.pop()], "start", 1)[1] in agents, recs


def test_a_job_grows_in_process_onto_a_host_reached_through_exec(tmp_path):
    # --launcher exec: with a stand-in for `kubectl exec`: it notes the host and runs the
    # agent here. 127.0.0.3 appears in discovery while the job runs on 127.0.0.2, with one
    # slot to the other's two: the re-formed world is not homogeneous, on every rank.
    standin = tmp_path / "standin"
    standin.write_text(f"#!/bin/sh\necho \"$1\" >> '{tmp_path / 'hosts'}'\nshift\n"
                       "exec \"$@\"\n")
    standin.chmod(0o755)
    discover = tmp_path / "discover.sh"
    discover.write_text(f"#!/bin/sh\necho 127.0.0.2:2\n"
                        f"if [ -e '{tmp_path / 'grow'}' ]; then echo 127.0.0.3:1; fi\n")
    discover.chmod(0o755)
    original, joined, recs, _ = _grows_in_process(
        tmp_path, 2, ["--launcher", f"exec:{standin} {{host}}", "-p", "1",
                      "--host-discovery-script", str(discover)], 3)
    assert (tmp_path / "hosts").read_text().split() == ["127.0.0.2", "127.0.0.3"]
    old_agents = {_first(recs[pid], "start", 0)[1] for pid in original}
    new_agents = {_first(recs[pid], "start", 1)[1] for pid in joined}
    assert len(old_agents) == 1 and len(new_agents) == 1 and not old_agents & new_agents, recs
    assert [_first(recs[pid], "start", 0)[6] for pid in original] == [1, 1], recs
    assert [_first(recs[pid], "start", 1)[6] for pid in original | joined] == [0, 0, 0], recs


def _discovery(tmp_path, hosts, unless):
    """A discovery script printing `hosts` (name:slots), each but the ones in `unless`
    ({name: file}) once that file exists."""
    lines = [f"[ -e '{unless[h.split(':')[0]]}' ] || echo {h}" if h.split(":")[0] in unless
             else f"echo {h}" for h in hosts]
    script = tmp_path / "discover.sh"
    script.write_text("#!/bin/sh\n" + "\n".join(lines) + "\n")
    script.chmod(0o755)
    return script


def _training(tmp_path, proc, count):
    def all_training():
        recs = _records(tmp_path)
        stepping = [r for r in recs.values() if any(x[0] == "step" for x in r)]
        return recs if len(recs) == count and len(stepping) == count else None
    return _wait_for(f"{count} ranks training", all_training, proc)


def _retired(err, processes, host):
    for n in processes:
        assert f"process {n} on host {host} left the job (exit code 0)" in err, err


def test_a_host_discovery_drops_retires_its_ranks_at_a_commit(tmp_path, three_hosts):
    drop = tmp_path / "drop"
    discover = _discovery(tmp_path, ["node1:2", "node2:2", "node3:2"], {"node3": drop})
    proc = _start(tmp_path, 6, ["--host-discovery-script", str(discover), "--min-np", "2",
                                "--max-np", "6", "--log-level", "info"],
                  ssh_config=three_hosts, env={"HVDRUN_DISCOVERY_INTERVAL": "0.5"})
    with _killed_at_end(proc):
        recs = _training(tmp_path, proc, 6)
        by_rank = {_first(r, "start", 0)[3]: pid for pid, r in recs.items()}
        agent_of = {pid: _first(r, "start", 0)[1] for pid, r in recs.items()}
        leaving = {by_rank[4], by_rank[5]}  # node3's, the last host in the placement
        survivors = set(recs) - leaving
        drop.touch()
        dropped = time.monotonic()
        _wait_for("node3's ranks to end", lambda: not any(_alive(p) for p in leaving), proc)
        retire_s = time.monotonic() - dropped
        recs = _ranks_in(tmp_path, proc, 1, 4)
        code, out, err = _finish(proc, tmp_path)
    print(f"node3 dropped from discovery to its ranks ended: {retire_s:.2f} s")
    assert code == 0, out + err
    recs = _records(tmp_path)
    assert set(recs) == survivors | leaving, recs  # nothing started anew
    # The survivors moved at one commit, in their processes, at size 4, rank 0 still rank 0.
    moved_at = _first(recs[by_rank[0]], "start", 1)[5]
    assert moved_at > 0, recs
    for pid in survivors:
        start = _first(recs[pid], "start", 1)
        assert start[4] == 4 and start[5] == moved_at, (pid, recs)
        final = _first(recs[pid], "final")
        assert final and final[2] == 1 and final[4] == 4 and final[6] == 1, recs[pid]
    assert sorted(_first(recs[pid], "start", 1)[3] for pid in survivors) == [0, 1, 2, 3], recs
    assert _first(recs[by_rank[0]], "start", 1)[3] == 0, recs
    for pid in leaving:  # no place in generation 1: they ended at the commit
        assert _first(recs[pid], "start", 1) is None and _first(recs[pid], "final") is None
    assert "generation 0 ends at a commit: discovery no longer lists node3 (processes 4, 5): " \
        "they leave the job at the next commit; generation 1 runs in process with 4 ranks " \
        "(4 kept, 0 started anew)" in err, err
    _retired(err, (4, 5), "node3")
    assert "restart" not in err and "exited with code" not in err, err
    assert not any(_alive(pid) for pid in recs), recs
    assert not any(_alive(agent) for agent in agent_of.values()), recs


def test_a_host_back_from_its_cooldown_returns_while_another_leaves(tmp_path, three_hosts):
    drop = tmp_path / "drop"
    discover = _discovery(tmp_path, ["node1:2", "node2:2", "node3:2"], {"node2": drop})
    proc = _start(tmp_path, 6, ["--host-discovery-script", str(discover), "--min-np", "2",
                                "--max-np", "6", "--blacklist-cooldown-range", "4", "4",
                                "--log-level", "info"],
                  ssh_config=three_hosts, env={"HVDRUN_DISCOVERY_INTERVAL": "0.5"})
    with _killed_at_end(proc):
        recs = _training(tmp_path, proc, 6)
        by_rank = {_first(r, "start", 0)[3]: pid for pid, r in recs.items()}
        agent_of = {pid: _first(r, "start", 0)[1] for pid, r in recs.items()}
        node1, node2 = {by_rank[0], by_rank[1]}, {by_rank[2], by_rank[3]}
        # node3 is lost (excluded for 4 s); while it cools down, discovery drops node2.
        os.kill(agent_of[by_rank[5]], signal.SIGKILL)
        _wait_for("generation 1", lambda: all(_first(_records(tmp_path)[p], "start", 1)
                                              for p in node1 | node2), proc)
        drop.touch()

        def on_node1_and_node3():
            recs = _records(tmp_path)
            new = [p for p in recs if p not in agent_of]
            gen = max(r[2] for p in node1 for r in recs[p] if r[0] == "start")
            started = [p for p in node1 | set(new) if _first(recs[p], "start", gen)]
            return recs if len(new) == 2 and len(started) == 4 else None
        recs = _wait_for("the job on node1 and node3 again", on_node1_and_node3, proc)
        code, out, err = _finish(proc, tmp_path)
    assert code == 0, out + err
    recs = _records(tmp_path)
    joined = set(recs) - set(agent_of)
    assert len(joined) == 2, recs  # node3's two new processes, nothing else started anew
    for pid in node1 | joined:
        final = _first(recs[pid], "final")
        assert final and final[4] == 4 and final[6] == 1, recs[pid]
    for pid in node2:
        assert _first(recs[pid], "final") is None, recs[pid]
    _retired(err, (2, 3), "node2")
    assert "discovery no longer lists node2" in err, err
    assert "restart" not in err, err
    assert not any(_alive(pid) for pid in recs), recs
    assert not any(_alive(agent) for agent in agent_of.values()), recs


# A Horovod elastic program that hvdrun's agent moves in process (the agent played by the
# test over the rank's control channel, common/control_protocol.h): it says it is elastic,
# is placed in generation 1 with hosts added, sees the update in `state._host_messages`
# before its next commit (where Horovod's own elastic tests wait for it), acts on it at that
# commit without a restore, joins generation 1 in the same process and says so again there.
INPROCESS_PROGRAM = """
import sys
import hvdrun.torch as hvd
hvd.init()
state = hvd.elastic.ObjectState(step=0)
resets = []
messages = []
state.register_reset_callbacks([lambda: resets.append(hvd.generation())])

@hvd.elastic.run
def train(state):
    while hvd.generation() == 0 and state.step < 100000:
        state.step += 1
        if not messages and not state._host_messages.empty():
            messages.append(state._host_messages.queue[0])
        state.commit()
    return state.step

steps = train(state)
print(f"generation {hvd.generation()} steps {steps} kept {state.step == steps} "
      f"resets {resets} messages {messages}", flush=True)
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
    with _killed_at_end(proc):
        agent.settimeout(120)
        assert _read_frame(agent) == (1, (0).to_bytes(4, "big"))  # elastic, generation 0
        agent.sendall(_placement(1, added=True))
        assert _read_frame(agent) == (2, (0).to_bytes(4, "big"))  # left generation 0
        assert _read_frame(agent) == (1, (1).to_bytes(4, "big"))  # elastic, generation 1
        out, err = proc.communicate(timeout=120)
        agent.close()
    assert proc.returncode == 0, err
    m = re.search(r"generation (\d+) steps (\d+) kept (\w+) resets (\[.*\]) messages (\[.*\])",
                  out)
    assert m, out + err
    assert m.group(1) == "1" and int(m.group(2)) >= 1 and m.group(3) == "True", out
    assert m.group(4) == "[1]", out  # one reset, into generation 1
    assert m.group(5) == "[(1, 1)]", out  # (timestamp, HOSTS_ADDED) before the commit


def _size_after(tmp_path, proc, generation, size):
    """Waits until a generation later than `generation` runs with `size` processes started
    in it, every one at that size; returns that generation."""
    def settled():
        recs = _records(tmp_path)
        gens = [r[2] for rs in recs.values() for r in rs if r[0] == "start"]
        gen = max(gens, default=-1)
        starts = [_first(rs, "start", gen) for rs in recs.values()]
        starts = [s for s in starts if s]
        if gen > generation and len(starts) == size and all(s[4] == size for s in starts):
            return gen
        return None
    return _wait_for(f"{size} ranks after generation {generation}", settled, proc)


def test_every_elastic_event_over_exec_keeps_the_survivors_in_process(tmp_path):
    # The events of the SSH tests, one after another in one job whose three hosts
    # (127.0.0.2-4) are reached through `--launcher exec:` (a stand-in for `kubectl exec`
    # that runs the agent here): a rank killed, a host's agent killed, a host dropped from
    # discovery and listed again; a failed host comes back after its 2 s cooldown. Each
    # time the processes that remain keep their pids and the job settles at the size the
    # hosts allow; at the end every rank holds the same weights and nothing is left.
    standin = tmp_path / "standin"
    standin.write_text("#!/bin/sh\nshift\nexec \"$@\"\n")
    standin.chmod(0o755)
    drop = tmp_path / "drop"
    discover = _discovery(tmp_path, ["127.0.0.2:2", "127.0.0.3:2", "127.0.0.4:2"],
                          {"127.0.0.4": drop})
    proc = _start(tmp_path, 6, ["--launcher", f"exec:{standin} {{host}}", "-p", "1",
                                "--host-discovery-script", str(discover), "--min-np", "2",
                                "--max-np", "6", "--blacklist-cooldown-range", "2", "2",
                                "--log-level", "info"],
                  env={"HVDRUN_DISCOVERY_INTERVAL": "0.5"})
    with _killed_at_end(proc):
        recs = _training(tmp_path, proc, 6)
        by_rank = {_first(r, "start", 0)[3]: pid for pid, r in recs.items()}
        agent_of = {pid: _first(r, "start", 0)[1] for pid, r in recs.items()}
        # A rank killed (rank 5, on 127.0.0.4): that host is left out for its cooldown, so
        # its other rank leaves too; then the host is placed again, with two new processes.
        os.kill(by_rank[5], signal.SIGKILL)
        gen = _size_after(tmp_path, proc, 0, 6)
        kept = {by_rank[r] for r in range(4)}
        dead = {p: r for r, p in by_rank.items() if p in kept and not _alive(p)}
        assert not dead, (dead, recs)
        # A host's agent killed (127.0.0.3 holds ranks 2 and 3): both its ranks go with it,
        # and the host comes back after its cooldown.
        os.kill(agent_of[by_rank[2]], signal.SIGKILL)
        gen = _size_after(tmp_path, proc, gen, 6)
        kept -= {by_rank[2], by_rank[3]}
        assert all(_alive(p) for p in kept), recs
        # Discovery drops 127.0.0.4: its ranks retire at a commit; listed again, it returns.
        before = set(_records(tmp_path))
        drop.touch()
        gen = _size_after(tmp_path, proc, gen, 4)
        assert all(_alive(p) for p in kept), recs
        drop.unlink()
        gen = _size_after(tmp_path, proc, gen, 6)
        code, out, err = _finish(proc, tmp_path)
    assert code == 0, out + err
    recs = _records(tmp_path)
    finals = {pid: _first(r, "final") for pid, r in recs.items() if _first(r, "final")}
    assert len(finals) == 6 and all(f[4] == 6 and f[6] == 1 for f in finals.values()), finals
    assert len({f[2] for f in finals.values()}) == 1, finals  # one last generation
    # 127.0.0.2's ranks lived through every event in their processes.
    assert {by_rank[0], by_rank[1]} <= set(finals) and kept <= set(finals), finals
    assert len(set(recs) - before) == 2, recs  # 127.0.0.4's return started two processes
    assert "discovery no longer lists 127.0.0.4" in err, err
    assert "restart" not in err, err
    assert not any(_alive(pid) for pid in recs), recs
    assert not any(_alive(r[1]) for rs in recs.values() for r in rs), recs  # the agents
