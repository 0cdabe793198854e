#!/usr/bin/env python3
"""Random elastic events against one running job: a Horovod elastic PyTorch program
(hvd.elastic.run, TorchState, a commit every 5 steps) on the loopback SSH cluster, 3 hosts
x 2 slots, --min-np 2 --max-np 6, discovery reading a file the bench rewrites. Each event
is one of: a rank's process SIGKILLed; a host removed from the discovery output; a removed
host listed again. After each event the bench waits until the job trains again at the
size discovery allows (every listed slot, once a killed rank's host is back from its 2 s
cooldown), then goes on to the next. At the end every rank must hold the same weights and
the job must exit 0.

Per event it prints the time from the event to the first step every rank made in the
first generation after it ("recovery") and to training at full size again ("settled"),
both read from the clock readings the ranks write at each step (no polling enters them);
then, per kind of event, the median and the worst, and every transition hvdrun logged.
Horovod's elastic driver is not run on these events (bench/elastic_api.sh compares it on
a lost host); the bench says so at the end.

Usage: bench/elastic_stress.py [--build build] [--events 50] [--seed 1]"""
import argparse
import os
import random
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
HOSTS = {"node1": 2, "node2": 2, "node3": 2}

TRAIN = r'''
import os, sys, time
import torch
import hvdrun.torch as hvd

out = sys.argv[1]
hvd.init()
torch.manual_seed(100 + hvd.rank())
model = torch.nn.Linear(32, 4)
optimizer = hvd.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=0.01),
                                     named_parameters=model.named_parameters())
state = hvd.elastic.TorchState(model=model, optimizer=optimizer, steps=0)
log = open(os.path.join(out, "log.%d" % os.getpid()), "a", buffering=1)


@hvd.elastic.run
def train(state):
    while True:
        optimizer.zero_grad()
        model(torch.ones(8, 32) * (1 + state.steps % 7)).sum().backward()
        optimizer.step()
        state.steps += 1
        log.write("step %d %d %d %d %d\n" % (time.time_ns(), hvd.generation(), hvd.rank(),
                                            hvd.size(), state.steps))
        if state.steps % 5 == 0:
            state.commit()
            if hvd.broadcast_object(os.path.exists(os.path.join(out, "stop"))):
                return
        time.sleep(0.02)


train(state)
w = torch.cat([p.detach().reshape(-1) for p in model.parameters()]).reshape(1, -1)
same = all(torch.equal(w[0], x) for x in hvd.allgather(w))
log.write("final %d %d %d %d %d\n" % (time.time_ns(), hvd.generation(), hvd.rank(),
                                      hvd.size(), int(same)))
hvd.shutdown()
'''


def steps(work):
    """[(t_ns, generation, rank, size, pid)] of every step line so far."""
    out = []
    for name in os.listdir(work):
        if not name.startswith("log."):
            continue
        with open(os.path.join(work, name)) as f:
            for line in f.read().split("\n")[:-1]:
                w = line.split()
                if w[0] == "step":
                    out.append((int(w[1]), int(w[2]), int(w[3]), int(w[4]), int(name[4:])))
    return out


def generation_formed(recs, generation):
    """(size, t_ns of the last rank's first step) when every rank of `generation` has
    stepped, else None."""
    first = {}
    size = None
    for t, g, r, n, _ in recs:
        if g == generation:
            size = n
            first[r] = min(first.get(r, t), t)
    if size is None or len(first) < size:
        return None
    return size, max(first.values())


def wait_for(what, test, job, seconds):
    deadline = time.monotonic() + seconds
    while True:
        got = test()
        if got is not None:
            return got
        if job.poll() is not None:
            sys.exit(f"elastic_stress: the job ended (exit {job.returncode}) before {what}")
        if time.monotonic() > deadline:
            sys.exit(f"elastic_stress: no {what} within {seconds} s")
        time.sleep(0.05)


def start_cluster(build):
    helper = os.path.join(build, "tests", "support", "hvdrun_test_cluster")
    proc = subprocess.Popen([helper, str(len(HOSTS))], stdin=subprocess.PIPE,
                            stdout=subprocess.PIPE, text=True)
    config = proc.stdout.readline().strip()
    if not config:
        sys.exit("elastic_stress: hvdrun_test_cluster printed no ssh_config")
    return proc, config


def write_hosts(work, listed):
    tmp = os.path.join(work, "hosts.tmp")
    with open(tmp, "w") as f:
        f.writelines(f"{h}:{HOSTS[h]}\n" for h in sorted(listed))
    os.replace(tmp, os.path.join(work, "hosts"))


def pick_event(rng, listed):
    kinds = ["kill"]
    if len(listed) > 1:
        kinds.append("remove")
    if len(listed) < len(HOSTS):
        kinds.append("add")
    return rng.choice(kinds)


def run_events(args, work, job, rng):
    """Runs the events; returns {kind: [(recovery_ms, settled_ms)]}."""
    listed = set(HOSTS)
    figures = {"kill": [], "remove": [], "add": []}
    full = sum(HOSTS.values())
    latest = wait_for("6 ranks training", lambda: _settled(work, full, -1), job, 180)
    for i in range(args.events):
        kind = pick_event(rng, listed)
        before = latest
        what = kind
        t0 = time.time_ns()
        if kind == "kill":
            recs = [r for r in steps(work) if r[1] == before]
            victim = rng.choice(sorted({r[4] for r in recs}))
            os.kill(victim, signal.SIGKILL)
            what = f"kill pid {victim}"
        elif kind == "remove":
            host = rng.choice(sorted(listed))
            listed.discard(host)
            write_hosts(work, listed)
            what = f"remove {host}"
        else:
            host = rng.choice(sorted(set(HOSTS) - listed))
            listed.add(host)
            write_hosts(work, listed)
            what = f"add {host}"
        want = sum(HOSTS[h] for h in listed)

        def recovered():
            recs = steps(work)
            for g in sorted({r[1] for r in recs if r[1] > before}):
                formed = generation_formed(recs, g)
                if formed and formed[1] > t0:
                    return formed[1]
            return None
        t_recovered = wait_for(f"recovery after event {i + 1} ({what})", recovered, job, 180)
        latest = wait_for(f"{want} ranks after event {i + 1} ({what})",
                          lambda: _settled(work, want, before), job, 180)
        t_settled = generation_formed(steps(work), latest)[1]
        rec_ms, set_ms = (t_recovered - t0) / 1e6, (max(t_settled, t_recovered) - t0) / 1e6
        figures[kind].append((rec_ms, set_ms))
        print(f"event {i + 1:2d} {what:<16} recovery_ms={rec_ms:7.0f} settled_ms={set_ms:7.0f} "
              f"size={want} generation={latest}", flush=True)
    return figures


def _settled(work, want, after):
    """The newest generation above `after` that formed at size `want`, else None."""
    recs = steps(work)
    for g in sorted({r[1] for r in recs if r[1] > after}, reverse=True):
        formed = generation_formed(recs, g)
        if formed and formed[0] == want:
            return g
    return None


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--build", default=os.path.join(ROOT, "build"))
    p.add_argument("--events", type=int, default=50)
    p.add_argument("--seed", type=int, default=1)
    args = p.parse_args()
    subprocess.run(["cmake", "--build", args.build, "--target", "hvdrun", "hvdrun_runtime",
                    "hvdrun_test_cluster"], check=True, stdout=subprocess.DEVNULL)
    print(f"host: {os.cpu_count()} cores, load {os.getloadavg()[0]:.1f}; seed {args.seed}")
    work = tempfile.mkdtemp(prefix="hvdrun-stress-")
    cluster, config = start_cluster(args.build)
    job = None
    try:
        with open(os.path.join(work, "train.py"), "w") as f:
            f.write(TRAIN)
        write_hosts(work, HOSTS)
        discover = os.path.join(work, "discover.sh")
        with open(discover, "w") as f:
            f.write(f"#!/bin/sh\nexec cat {work}/hosts\n")
        os.chmod(discover, 0o755)
        env = dict(os.environ, HVDRUN_LIBRARY=os.path.join(args.build, "runtime", "libhvdrun.so"),
                   PYTHONPATH=os.path.join(ROOT, "python"), HVDRUN_DISCOVERY_INTERVAL="0.5")
        err = open(os.path.join(work, "err"), "w")
        job = subprocess.Popen(
            [os.path.join(args.build, "cli", "hvdrun"), "--ssh-config", config,
             "--host-discovery-script", discover, "--min-np", "2", "--max-np", "6",
             "--blacklist-cooldown-range", "2", "2", "-x", "HVDRUN_LIBRARY", "-x", "PYTHONPATH",
             "/usr/bin/python3", os.path.join(work, "train.py"), work],
            stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=err, env=env)
        figures = run_events(args, work, job, random.Random(args.seed))
        open(os.path.join(work, "stop"), "w").close()
        code = job.wait(timeout=180)
        finals = []
        for name in os.listdir(work):
            if name.startswith("log."):
                with open(os.path.join(work, name)) as f:
                    finals += [line.split() for line in f if line.startswith("final")]
        identical = bool(finals) and all(w[5] == "1" for w in finals)
        with open(os.path.join(work, "err")) as f:
            transitions = [line.rstrip() for line in f if "hvdrun: elastic: generation" in line
                           or "did not join" in line or "discovery no longer lists" in line]
        print(f"transitions logged by hvdrun: {len(transitions)}")
        for line in transitions:
            print("    " + line)
        for kind, rows in figures.items():
            if rows:
                rec = [r for r, _ in rows]
                sett = [s for _, s in rows]
                print(f"result kind={kind} events={len(rows)} "
                      f"recovery_median_ms={statistics.median(rec):.0f} "
                      f"recovery_worst_ms={max(rec):.0f} "
                      f"settled_median_ms={statistics.median(sett):.0f} "
                      f"settled_worst_ms={max(sett):.0f}")
        print(f"result exit={code} ranks_at_end={len(finals)} identical_weights={identical}")
        print("Horovod: not run on these events (bench/elastic_api.sh compares it on a lost "
              "host)")
        return 0 if code == 0 and identical else 1
    finally:
        if job is not None and job.poll() is None:
            job.send_signal(signal.SIGINT)
            job.wait(timeout=60)
        cluster.stdin.close()
        cluster.wait(timeout=30)
        if os.environ.get("KEEP"):
            print("kept", work)
        else:
            shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
