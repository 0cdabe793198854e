"""Horovod's elastic API from TensorFlow and Keras (hvd.elastic.run, TensorFlowKerasState,
KerasState and the three Keras callbacks), in-process, at np 2: a collective that fails on
every rank restores the last commit and the job goes on in the same processes; a host
update interrupts every rank at the same commit; model.fit under the callbacks commits as
they say and is called again for the epochs left after a failure; TensorFlowState syncs,
restores and commits a list of variables. And across two loopback SSH hosts: a host lost
while a custom loop or model.fit trains leaves the survivor training in its process, and
when the host comes back its new rank is synced from rank 0 (the optimizer's lazily
created slots included) before it trains."""
import ast
import os
import re
import signal

import pytest

from _jobs import ssh_config  # noqa: F401 (a fixture)
from _tf_jobs import alive, finish, first, records, run_tf_job, start_tf_job, wait_for

# What each rank of elastic_loop_worker.py saw: the injected failure at step 5, the restore
# to the commit at step 3 (weights and momentum too), the host update acted on at the
# commit at step 9 without a restore, all in the same processes and at the same size.
LOOP_EVENTS = ("events=['fail at steps=5', "
               "'reset size=2 steps=3 restored=3 as_committed=True', "
               "'hosts updated at steps=9', 'reset size=2 steps=9']")


def results(job, pattern):
    """{rank: the groups of `pattern`} of the ranks' lines 'rank N <pattern>'."""
    found = {}
    for line in job.out.splitlines():
        m = re.search(r"rank (\d) " + pattern, line)
        if m:
            found[int(m.group(1))] = m.groups()[1:]
    return found


def test_a_custom_loop_recovers_in_process_and_acts_on_a_host_update():
    job = run_tf_job(2, "elastic_loop_worker.py")
    assert job.code == 0, job.describe()
    found = results(job, r"pids (\d+)->(\d+) (steps=.*)$")
    assert set(found) == {0, 1}, job.describe()
    for start_pid, end_pid, line in found.values():
        assert start_pid == end_pid, job.describe()  # the same process throughout
        # 24 steps, the 2 redone after the restore not counted twice; the weights and the
        # optimizer's variables are the same on every rank.
        assert line == f"steps=24 identical=True {LOOP_EVENTS}", job.describe()


def test_keras_fit_with_the_elastic_callbacks_commits_and_recovers():
    job = run_tf_job(2, "elastic_fit_worker.py")
    assert job.code == 0, job.describe()
    found = results(job, r"epoch=(\d+) batch=(\d+) identical=(\w+) losses=(.*) "
                         r"resets=(.*) saves=(.*)$")
    assert set(found) == {0, 1}, job.describe()
    for groups in found.values():
        epoch, batch, identical = int(groups[0]), int(groups[1]), groups[2]
        losses, resets, saves = (ast.literal_eval(g) for g in groups[3:])
        assert (epoch, batch, identical) == (4, 0, "True"), job.describe()
        # The failure after batch 2 of epoch 2 went back to the commit after batch 1
        # (batches_per_commit=2); fit was called again for epochs 2 and 3.
        assert resets == [(2, 1)], job.describe()
        assert len(losses) == 2 and losses[-1] < losses[0], job.describe()
        # Commits: every 2 batches of 6 and at each epoch's end (epochs 0 and 1: 4 each,
        # epoch 2 before the failure: 1), then 4 per epoch again, counted from the new fit.
        assert saves[:9] == [(0, 1), (0, 3), (0, 5), (1, 0), (1, 1), (1, 3), (1, 5), (2, 0),
                             (2, 1)], job.describe()
        assert len(saves) == 9 + 8, job.describe()


def test_tensorflow_state_syncs_restores_and_commits_variables():
    job = run_tf_job(2, "elastic_variables_worker.py")
    assert job.code == 0, job.describe()
    found = results(job, r"seen=(.*)$")
    assert set(found) == {0, 1}, job.describe()
    for (seen,) in found.values():
        # Rank 0's values everywhere (sums 4 and 2 of the ones, batch 20, epoch 10), kept
        # by restore(); then the commit of five times them; a host update recorded on rank
        # 0 (hosts removed: no sync needed) interrupts both ranks.
        assert ast.literal_eval(seen) == [
            ("synced", [4.0, 2.0, 20, 10]), ("restored", [4.0, 2.0, 20, 10]),
            ("committed", [20.0, 10.0, 21, 11]), ("interrupted", True)], job.describe()


def _ranks_stepping(out_dir, generation, count):
    """A test for wait_for: the records once `count` processes have committed in
    `generation`."""
    def test():
        recs = records(out_dir)
        stepping = [p for p, r in recs.items() if any(
            x[0] == "step" and x[3] == generation for x in r)]
        return recs if len(stepping) == count else None
    return test


# The custom loop's host leaves and comes back twice (the second return is where a new rank
# that trained before its sync deadlocked the job); model.fit's once.
@pytest.mark.parametrize("mode,rounds", [("loop", 2), ("fit", 1)])
def test_a_host_that_comes_back_gets_a_rank_synced_before_it_trains(mode, rounds, tmp_path,
                                                                     ssh_config):
    discover = tmp_path / "discover.sh"
    discover.write_text("#!/bin/sh\necho node1:1; echo node2:1\n")
    discover.chmod(0o755)
    # node2 is left out for 4 s after its agent is lost, then discovery offers it again.
    # Stalls are reported after 10 s, so that a job that hangs says where in its output.
    proc = start_tf_job(2, "elastic_join_worker.py", tmp_path, [
        "--host-discovery-script", str(discover), "--min-np", "1", "--max-np", "2",
        "--blacklist-cooldown-range", "4", "4"], args=[mode], ssh_config=ssh_config,
        env={"HVDRUN_DISCOVERY_INTERVAL": "0.5", "HOROVOD_STALL_CHECK_TIME_SECONDS": "10"})
    try:
        recs = wait_for("two ranks training", _ranks_stepping(tmp_path, 0, 2), proc, 180)
        by_rank = {first(r, "start", 0)[4]: pid for pid, r in recs.items()}
        lost_agent = first(recs[by_rank[1]], "start", 0)[2]
        assert first(recs[by_rank[0]], "start", 0)[2] != lost_agent, recs
        os.kill(lost_agent, signal.SIGKILL)
        wait_for("the survivor training alone", _ranks_stepping(tmp_path, 1, 1), proc, 120)
        # node2 back: its new rank and the survivor commit together, so the new rank's
        # sync met the survivor's (a stall here is the defect this test is about).
        recs = wait_for("two ranks training in generation 2", _ranks_stepping(tmp_path, 2, 2),
                        proc, 150)
        for again in range(1, rounds):  # node2's new agent lost too, and node2 back again
            gen = 2 * again
            back = next(p for p, r in recs.items() if first(r, "start", gen)
                        and first(r, "start", gen)[4] == 1)
            os.kill(first(recs[back], "start", gen)[2], signal.SIGKILL)
            wait_for(f"the survivor alone in generation {gen + 1}",
                     _ranks_stepping(tmp_path, gen + 1, 1), proc, 120)
            recs = wait_for(f"two ranks training in generation {gen + 2}",
                            _ranks_stepping(tmp_path, gen + 2, 2), proc, 150)
        code, out, err = finish(proc, tmp_path)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
    assert code == 0, out + err
    recs = records(tmp_path)
    survivor = by_rank[0]
    joined = set(recs) - set(by_rank.values())
    assert len(joined) == rounds, recs  # node2's new processes, nothing else started anew
    last = 2 * rounds
    new = next(p for p in joined if first(recs[p], "final"))
    assert first(recs[new], "start", 0) is None and first(recs[new], "start", 1) is None, recs
    assert first(recs[survivor], "start", 1)[4:6] == (0, 1), recs  # alone, size 1
    if mode == "loop":
        # The warm-up step before hvd.elastic.run: reduced by both ranks at the start; the
        # new rank ran its own alone (rank 0 of 1) while the survivor waited for it.
        assert [first(recs[by_rank[r]], "warm-up")[4:] for r in (0, 1)] == [(0, 2), (1, 2)]
        assert first(recs[new], "warm-up")[3:] == (last, 0, 1), recs
    # The survivor moved to generation 2 in its process at a commit; the new rank started
    # from its step, and both end with the same model and optimizer variables.
    moved_at = first(recs[survivor], "start", last)[6]
    assert moved_at > 0 and first(recs[new], "start", last)[4:] == (1, 2, moved_at), recs
    for pid in (survivor, new):
        final = first(recs[pid], "final")
        assert final and final[3] == last and final[5] == 2 and final[7] == 1, recs[pid]
    assert first(recs[by_rank[1]], "final") is None, recs
    assert not any(alive(pid) for pid in recs), recs


def test_a_job_started_at_size_1_grows_and_reduces_with_the_new_rank(tmp_path, ssh_config):
    # The rank alone traces its step at size 1; the step must still reduce once node2's
    # rank joins (a step traced without the allreduce would leave the new rank's waiting).
    discover, grow = tmp_path / "discover.sh", tmp_path / "grow"
    discover.write_text(f"#!/bin/sh\necho node1:1\nif [ -e '{grow}' ]; then echo node2:1; fi\n")
    discover.chmod(0o755)
    proc = start_tf_job(1, "elastic_join_worker.py", tmp_path, [
        "--host-discovery-script", str(discover), "--min-np", "1", "--max-np", "2"],
        args=["loop"], ssh_config=ssh_config,
        env={"HVDRUN_DISCOVERY_INTERVAL": "0.5", "HOROVOD_STALL_CHECK_TIME_SECONDS": "10"})
    try:
        recs = wait_for("one rank training", _ranks_stepping(tmp_path, 0, 1), proc, 180)
        (alone,) = recs
        grow.touch()
        wait_for("two ranks training in generation 1", _ranks_stepping(tmp_path, 1, 2), proc,
                 150)
        code, out, err = finish(proc, tmp_path)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
    assert code == 0, out + err
    recs = records(tmp_path)
    (new,) = set(recs) - {alone}
    moved_at = first(recs[alone], "start", 1)[6]
    assert first(recs[alone], "start", 1)[4:6] == (0, 2) and moved_at > 0, recs
    assert first(recs[new], "start", 1)[4:] == (1, 2, moved_at), recs
    for pid in (alone, new):
        final = first(recs[pid], "final")
        assert final and final[3] == 1 and final[5] == 2 and final[7] == 1, recs[pid]
