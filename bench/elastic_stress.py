#!/usr/bin/env python3
"""Random elastic events against one running job, run once with hvdrun and once with
Horovod's own elastic driver: a Horovod elastic PyTorch program (hvd.elastic.run,
TorchState, a commit every 5 steps) on the loopback SSH cluster, 3 hosts x 2 slots,
--min-np 2 --max-np 6, --blacklist-cooldown-range 2 2, discovery reading a file the bench
rewrites. The seed fixes the sequence of events before either job starts (kinds, hosts,
which slot's rank is killed, order), so both launchers get the same events. Each event is
one of: the rank on a given host and local slot SIGKILLed; a host removed from the
discovery output; a removed host listed again. After each event the bench waits until
the job trains again at the size discovery allows (every listed slot, once a killed
rank's host is back from its 2 s cooldown), then goes on to the next. At the end every
rank must hold the same weights and the job must exit 0.

Per event it prints the time from the event to the first step every rank made in the
first generation after it ("recovery") and to training at full size again ("settled"),
both read from the clock readings the ranks write at each step (no polling enters them);
a generation is the set of ranks that stepped after one rendezvous (rank 0 broadcasts its
clock reading on entering the training function, the same program under both launchers).
Every wait has a deadline (--deadline): an event that does not recover or settle in time
is reported and counted as such, and after 3 such events in a row the rest are counted
as not run. At the end, per kind of event, hvdrun's and Horovod's median and worst
recovery and settle times side by side with the ratio (hvdrun / Horovod; over every
event, then over only the events both completed), the generations each job formed, and
the transitions each launcher logged. Where Horovod's driver ends the job (it does when
every host of the failed generation is blacklisted, e.g. a kill while one host is
listed, whatever the cooldown) the events after it are counted as not run. The exit
status is hvdrun's: 0 when its job exited 0 with identical weights on every rank;
Horovod's outcome is reported, not checked.

Horovod's run: horovodrun --gloo from its virtualenv (bench/horovod_synthetic.sh
--install-only builds .cache/horovod-0.28.1; HOROVOD_VENV overrides), the same program
with `import horovod.torch as hvd`, the same hosts reached by address, port and key
(as bench/elastic_api.sh does), the discovery script mapping the same file's host names
to those addresses, --verbose (so its driver logs each process's exit), Horovod's
defaults otherwise (its Gloo timeout: 30 s, unless --horovod-gloo-timeout). The two jobs
run one after the other, not at once.

Usage: bench/elastic_stress.py [--build build] [--events 50] [--seed 1]
           [--peer horovod|none] [--deadline 150]
           [--horovod-gloo-timeout SEC]"""
import argparse
import os
import random
import re
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
HOSTS = {"node1": 2, "node2": 2, "node3": 2}
COOLDOWN = "2"
HVD_VENV = os.environ.get("HOROVOD_VENV", os.path.join(ROOT, ".cache", "horovod-0.28.1"))
GIVE_UP_AFTER = 3  # events in a row that miss their deadline end the run

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
host = os.environ.get("HOROVOD_HOSTNAME", "?")
generation = getattr(hvd, "generation", lambda: -1)


@hvd.elastic.run
def train(state):
    # One key per rendezvous, the same on every rank of it (Horovod has no generation();
    # the name, as Horovod names a broadcast by the object's type otherwise).
    key = hvd.broadcast_object(time.time_ns() if hvd.rank() == 0 else 0, name="key")
    while True:
        optimizer.zero_grad()
        model(torch.ones(8, 32) * (1 + state.steps % 7)).sum().backward()
        optimizer.step()
        state.steps += 1
        log.write("step %d %d %d %d %d %d %s %d\n" % (time.time_ns(), key, hvd.rank(), hvd.size(),
                                                   state.steps, hvd.local_rank(), host,
                                                   generation()))
        if state.steps % 5 == 0:
            state.commit()
            if hvd.broadcast_object(os.path.exists(os.path.join(out, "stop")), name="stop"):
                return
        time.sleep(0.02)


train(state)
w = torch.cat([p.detach().reshape(-1) for p in model.parameters()]).reshape(1, -1)
same = all(torch.equal(w[0], x) for x in hvd.allgather(w))
log.write("final %d %d %d %d %d\n" % (time.time_ns(), generation(), hvd.rank(), hvd.size(),
                                      int(same)))
hvd.shutdown()
'''


class Rec:
    """One step line: t (ns), key (the generation's), rank, size, pid, local rank, host,
    gen (hvdrun's generation number, -1 under Horovod)."""
    __slots__ = ("t", "key", "rank", "size", "pid", "local", "host", "gen")

    def __init__(self, w, pid, hostmap):
        self.t, self.key, self.rank, self.size = int(w[1]), int(w[2]), int(w[3]), int(w[4])
        self.pid, self.local = pid, int(w[6])
        self.host = hostmap.get(w[7], w[7])
        self.gen = int(w[8])


def steps(work, hostmap):
    out = []
    for name in os.listdir(work):
        if not name.startswith("log."):
            continue
        with open(os.path.join(work, name)) as f:
            for line in f.read().split("\n")[:-1]:
                w = line.split()
                if w[0] == "step" and len(w) == 9:
                    out.append(Rec(w, int(name[4:]), hostmap))
    return out


def generation_formed(recs, key):
    """(size, t_ns of the last rank's first step) when every rank of generation `key`
    has stepped, else None."""
    first = {}
    size = None
    for r in recs:
        if r.key == key:
            size = r.size
            first[r.rank] = min(first.get(r.rank, r.t), r.t)
    if size is None or len(first) < size:
        return None
    return size, max(first.values())


def wait_for(test, job, seconds):
    """(value, None) once test() gives a value; (None, why) at the deadline or when the
    job has ended."""
    deadline = time.monotonic() + seconds
    while True:
        got = test()
        if got is not None:
            return got, None
        if job.poll() is not None:
            return None, f"job ended (exit {job.returncode})"
        if time.monotonic() > deadline:
            return None, f"deadline {seconds:.0f} s"
        time.sleep(0.05)


def start_cluster(build):
    helper = os.path.join(build, "tests", "support", "hvdrun_test_cluster")
    proc = subprocess.Popen([helper, str(len(HOSTS))], stdin=subprocess.PIPE,
                            stdout=subprocess.PIPE, text=True)
    config = proc.stdout.readline().strip()
    if not config:
        sys.exit("elastic_stress: hvdrun_test_cluster printed no ssh_config")
    return proc, config


def read_ssh_config(config):
    """({alias: address}, port, key) from the cluster's ssh_config."""
    addresses, port, key, host = {}, None, None, None
    with open(config) as f:
        for line in f:
            w = line.split()
            if len(w) < 2:
                continue
            if w[0] == "Host":
                host = w[1]
            elif w[0] == "HostName":
                addresses[host] = w[1]
            elif w[0] == "Port":
                port = w[1]
            elif w[0] == "IdentityFile":
                key = w[1]
    return addresses, port, key


def write_hosts(work, listed):
    tmp = os.path.join(work, "hosts.tmp")
    with open(tmp, "w") as f:
        f.writelines(f"{h}:{HOSTS[h]}\n" for h in sorted(listed))
    os.replace(tmp, os.path.join(work, "hosts"))


def make_plan(events, seed):
    """[(kind, host, local slot or None)]: the same for a seed whatever runs it."""
    rng = random.Random(seed)
    listed = set(HOSTS)
    plan = []
    for _ in range(events):
        kinds = ["kill"]
        if len(listed) > 1:
            kinds.append("remove")
        if len(listed) < len(HOSTS):
            kinds.append("add")
        kind = rng.choice(kinds)
        if kind == "kill":
            host = rng.choice(sorted(listed))
            plan.append((kind, host, rng.randrange(HOSTS[host])))
        elif kind == "remove":
            host = rng.choice(sorted(listed))
            listed.discard(host)
            plan.append((kind, host, None))
        else:
            host = rng.choice(sorted(set(HOSTS) - listed))
            listed.add(host)
            plan.append((kind, host, None))
    return plan


def describe(event):
    kind, host, slot = event
    return f"kill {host}/{slot}" if kind == "kill" else f"{kind} {host}"


def _settled(work, hostmap, want, after):
    """The newest generation key above `after` that formed at size `want`, else None."""
    recs = steps(work, hostmap)
    for key in sorted({r.key for r in recs if r.key > after}, reverse=True):
        formed = generation_formed(recs, key)
        if formed and formed[0] == want:
            return key
    return None


def run_events(peer, plan, args, work, job, hostmap):
    """Runs the plan; returns [{kind, what, rec_ms, set_ms, missed}] (one per event of the
    plan; missed: why it did not recover or settle, or 'not run')."""
    listed = set(HOSTS)
    results = []
    full = sum(HOSTS.values())
    latest, why = wait_for(lambda: _settled(work, hostmap, full, -1), job, 240)
    if latest is None:
        print(f"peer={peer} no {full} ranks training at the start: {why}", flush=True)
        return [dict(kind=k, what=describe((k, h, s)), rec_ms=None, set_ms=None,
                     missed="not run (job never trained at full size)") for k, h, s in plan]
    missed_in_row = 0
    for i, (kind, host, slot) in enumerate(plan):
        what = describe((kind, host, slot))
        if missed_in_row >= GIVE_UP_AFTER or job.poll() is not None:
            reason = (f"not run: the job had ended (exit {job.returncode})"
                      if job.poll() is not None
                      else f"not run ({GIVE_UP_AFTER} events in a row missed their deadline)")
            results.append(dict(kind=kind, what=what, rec_ms=None, set_ms=None, missed=reason))
            if kind == "remove":
                listed.discard(host)
            elif kind == "add":
                listed.add(host)
            continue
        before = latest
        t0 = time.time_ns()
        if kind == "kill":
            recs = steps(work, hostmap)
            pids = sorted({r.pid for r in recs if r.key == before and r.host == host
                           and r.local == slot})
            if not pids:
                results.append(dict(kind=kind, what=what, rec_ms=None, set_ms=None,
                                    missed="no such rank in the current generation"))
                print(f"peer={peer} event {i + 1:2d} {what:<12} skipped: no rank there",
                      flush=True)
                continue
            try:
                os.kill(pids[0], signal.SIGKILL)
            except ProcessLookupError:
                pass
            what += f" (pid {pids[0]})"
        elif kind == "remove":
            listed.discard(host)
            write_hosts(work, listed)
        else:
            listed.add(host)
            write_hosts(work, listed)
        want = sum(HOSTS[h] for h in listed)

        def recovered():
            recs = steps(work, hostmap)
            for key in sorted({r.key for r in recs if r.key > before}):
                formed = generation_formed(recs, key)
                if formed and formed[1] > t0:
                    return formed[1]
            return None
        t_recovered, why = wait_for(recovered, job, args.deadline)
        rec_ms = set_ms = None
        missed = None
        if t_recovered is None:
            missed = f"no recovery: {why}"
        else:
            rec_ms = (t_recovered - t0) / 1e6
            left = max(1.0, args.deadline - (time.time_ns() - t0) / 1e9)
            key, why = wait_for(lambda: _settled(work, hostmap, want, before), job, left)
            if key is None:
                missed = f"recovered, not back at size {want}: {why}"
            else:
                latest = key
                t_settled = generation_formed(steps(work, hostmap), key)[1]
                set_ms = (max(t_settled, t_recovered) - t0) / 1e6
        if missed:
            missed_in_row += 1
            # Go on from the newest generation that formed.
            recs = steps(work, hostmap)
            keys = [k for k in {r.key for r in recs} if generation_formed(recs, k)]
            latest = max(keys + [latest])
        else:
            missed_in_row = 0
        results.append(dict(kind=kind, what=what, rec_ms=rec_ms, set_ms=set_ms, missed=missed))
        gen = ""
        if set_ms is not None:
            g = {r.gen for r in steps(work, hostmap) if r.key == latest}
            gen = f" generation={max(g)}" if g and max(g) >= 0 else ""
        print(f"peer={peer} event {i + 1:2d} {what:<24} "
              f"recovery_ms={'-' if rec_ms is None else f'{rec_ms:.0f}':>7} "
              f"settled_ms={'-' if set_ms is None else f'{set_ms:.0f}':>7} size={want}{gen}"
              + (f" MISSED ({missed})" if missed else ""), flush=True)
    return results


def generations(work, hostmap):
    """[(t_ns formed, size)] of every generation that formed, in order."""
    recs = steps(work, hostmap)
    out = []
    for key in sorted({r.key for r in recs}):
        formed = generation_formed(recs, key)
        if formed:
            out.append((formed[1], formed[0]))
    return out


def kill_strays(work):
    """SIGKILLs rank processes of this job (their pids name the log files) still alive."""
    left = []
    for name in os.listdir(work):
        if name.startswith("log."):
            pid = int(name[4:])
            try:
                with open(f"/proc/{pid}/cmdline", "rb") as f:
                    if work.encode() not in f.read():
                        continue
                os.kill(pid, signal.SIGKILL)
                left.append(pid)
            except (FileNotFoundError, ProcessLookupError, PermissionError):
                pass
    return left


def run_job(peer, plan, args, base, config):
    """One job under `peer` through the plan; returns a summary dict."""
    work = tempfile.mkdtemp(prefix=f"stress-{peer}-", dir=base)
    addresses, port, key = read_ssh_config(config)
    program = TRAIN
    if peer == "horovod":
        program = TRAIN.replace("import hvdrun.torch as hvd", "import horovod.torch as hvd")
    with open(os.path.join(work, "train.py"), "w") as f:
        f.write(program)
    write_hosts(work, HOSTS)
    discover = os.path.join(work, "discover.sh")
    with open(discover, "w") as f:
        if peer == "horovod":
            # Horovod reaches the same sshd by address: the same file, names mapped.
            sed = " ".join(f"-e 's/^{h}:/{a}:/'" for h, a in sorted(addresses.items()))
            f.write(f"#!/bin/sh\nexec sed {sed} {work}/hosts\n")
        else:
            f.write(f"#!/bin/sh\nexec cat {work}/hosts\n")
    os.chmod(discover, 0o755)
    hostmap = {a: h for h, a in addresses.items()}
    err_path = os.path.join(work, "err")
    err = open(err_path, "w")
    if peer == "hvdrun":
        env = dict(os.environ,
                   HVDRUN_LIBRARY=os.path.join(args.build, "runtime", "libhvdrun.so"),
                   PYTHONPATH=os.path.join(ROOT, "python"), HVDRUN_DISCOVERY_INTERVAL="0.5")
        cmd = [os.path.join(args.build, "cli", "hvdrun"), "--ssh-config", config,
               "--host-discovery-script", discover, "--min-np", "2", "--max-np", "6",
               "--blacklist-cooldown-range", COOLDOWN, COOLDOWN, "-x", "HVDRUN_LIBRARY",
               "-x", "PYTHONPATH", "/usr/bin/python3", os.path.join(work, "train.py"), work]
    else:
        env = {k: v for k, v in os.environ.items()
               if k != "PYTHONPATH" and not k.startswith("HVDRUN_")}
        cmd = [os.path.join(HVD_VENV, "bin", "horovodrun"), "--gloo", "-np", "6",
               "--min-np", "2", "--max-np", "6", "--host-discovery-script", discover,
               "-p", port, "-i", key, "--blacklist-cooldown-range", COOLDOWN, COOLDOWN,
               "--verbose"]  # its driver then logs each process's exit
        if args.horovod_gloo_timeout:
            cmd += ["--gloo-timeout-seconds", str(args.horovod_gloo_timeout)]
        cmd += [os.path.join(HVD_VENV, "bin", "python"), os.path.join(work, "train.py"), work]
    shown = " ".join(os.path.relpath(c, work) if c.startswith(work) else c for c in cmd)
    print(f"peer={peer} start: load {os.getloadavg()[0]:.1f}; {shown}", flush=True)
    t_start = time.monotonic()
    job = subprocess.Popen(cmd, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                           stderr=err, env=env, start_new_session=True)
    code = None
    try:
        results = run_events(peer, plan, args, work, job, hostmap)
        open(os.path.join(work, "stop"), "w").close()
        # A job that never trained cannot read the stop file: a short wait then.
        grace = 180 if any(r["missed"] is None for r in results) else 15
        try:
            code = job.wait(timeout=grace)
        except subprocess.TimeoutExpired:
            code = f"none (no exit within {grace} s of the stop)"
    finally:
        if job.poll() is None:
            job.send_signal(signal.SIGINT)
            try:
                job.wait(timeout=60)
            except subprocess.TimeoutExpired:
                os.killpg(job.pid, signal.SIGKILL)
                job.wait()
        err.close()
        strays = kill_strays(work)
    finals = []
    for name in os.listdir(work):
        if name.startswith("log."):
            with open(os.path.join(work, name)) as f:
                finals += [line.split() for line in f if line.startswith("final")]
    identical = bool(finals) and all(w[5] == "1" for w in finals)
    with open(err_path, errors="replace") as f:
        lines = [line.rstrip() for line in f]
    if peer == "hvdrun":
        transitions = [line for line in lines if "hvdrun: elastic: generation" in line
                       or "did not join" in line or "discovery no longer lists" in line]
    else:
        transitions = [re.sub(r"/tmp/pip-install-[^ ]*?/horovod_[0-9a-f]+/", "", line)
                       for line in lines if any(w in line for w in (
                           "exit with status code", "uncaught exception", "removed from elastic",
                           "blacklist", "Exception occurred", "RuntimeError", "ERROR"))]
    gens = generations(work, hostmap)
    summary = dict(peer=peer, results=results, code=code, identical=identical,
                   finals=len(finals), transitions=transitions, err_lines=len(lines),
                   generations=gens, strays=strays, seconds=time.monotonic() - t_start,
                   work=work)
    return summary


def fmt(ms):
    if ms is None:
        return "-"
    return f"{ms:.0f} ms" if ms < 1000 else f"{ms / 1000:.2f} s"


def stats(rows, field):
    vals = [r[field] for r in rows if r[field] is not None]
    if not vals:
        return None, None
    return statistics.median(vals), max(vals)


def ratio(a, b):
    return f"{a / b:.3f}x" if a is not None and b else "-"


def report(runs):
    for s in runs:
        print(f"\n== {s['peer']}: exit={s['code']} ranks_at_end={s['finals']} "
              f"identical_weights={s['identical']} wall_s={s['seconds']:.0f}")
        print(f"generations formed (from the ranks' logs): {len(s['generations'])}; "
              "sizes in order: " + " ".join(str(n) for _, n in s["generations"]))
        print(f"transitions logged by {s['peer']}: {len(s['transitions'])} "
              f"(of {s['err_lines']} stderr lines)")
        for line in s["transitions"]:
            print("    " + line[:240])
        if s["strays"]:
            print(f"rank processes still alive after the job and SIGKILLed: {s['strays']}")
        ended = [i for i, r in enumerate(s["results"]) if r["missed"] and "ended" in r["missed"]]
        if ended:
            print(f"{s['peer']}'s job ended at event {ended[0] + 1} "
                  f"({s['results'][ended[0]]['what']}); the "
                  f"{len(s['results']) - ended[0] - 1} events after it were not run")
    print("\n== per kind of event (times from the ranks' clock readings; ratio = "
          "hvdrun / Horovod)")
    by_peer = {s["peer"]: s for s in runs}
    for kind in ("kill", "remove", "add"):
        for s in runs:
            rows = [r for r in s["results"] if r["kind"] == kind]
            if not rows:
                continue
            ok = [r for r in rows if r["missed"] is None]
            not_rec = [r for r in rows if r["missed"] and r["missed"].startswith("no recovery")]
            not_set = [r for r in rows if r["missed"] and r["missed"].startswith("recovered,")]
            other = [r for r in rows if r["missed"] and r not in not_rec and r not in not_set]
            rm, rw = stats(rows, "rec_ms")
            sm, sw = stats(ok, "set_ms")
            print(f"result peer={s['peer']} kind={kind} events={len(rows)} "
                  f"recovered_and_settled={len(ok)} recovered_not_settled={len(not_set)} "
                  f"not_recovered={len(not_rec)} not_run={len(other)} "
                  f"recovery_median_ms={rm and round(rm)} recovery_worst_ms={rw and round(rw)} "
                  f"settled_median_ms={sm and round(sm)} settled_worst_ms={sw and round(sw)}")
            for r in rows:
                if r["missed"]:
                    print(f"    {s['peer']} {r['what']}: {r['missed']}")
    if "hvdrun" in by_peer and "horovod" in by_peer:
        table(by_peer["hvdrun"]["results"], by_peer["horovod"]["results"], "every event")
        both = [i for i, (a, b) in enumerate(zip(by_peer["hvdrun"]["results"],
                                                  by_peer["horovod"]["results"]))
                if a["missed"] is None and b["missed"] is None]
        if len(both) < len(by_peer["hvdrun"]["results"]):
            table([by_peer["hvdrun"]["results"][i] for i in both],
                  [by_peer["horovod"]["results"][i] for i in both],
                  f"only the {len(both)} events both completed")


def table(hvdrun_rows, horovod_rows, title):
    print(f"\n{title}:")
    print("| event | events | hvdrun recovery median / worst | Horovod recovery median "
          "/ worst | ratio median / worst | hvdrun settled median / worst | Horovod "
          "settled median / worst | ratio median / worst |")
    for kind in ("kill", "remove", "add"):
        a = [r for r in hvdrun_rows if r["kind"] == kind]
        b = [r for r in horovod_rows if r["kind"] == kind]
        if not a:
            continue
        arm, arw = stats(a, "rec_ms")
        brm, brw = stats(b, "rec_ms")
        asm, asw = stats([r for r in a if r["missed"] is None], "set_ms")
        bsm, bsw = stats([r for r in b if r["missed"] is None], "set_ms")
        na = sum(r["rec_ms"] is not None for r in a)
        nb = sum(r["rec_ms"] is not None for r in b)
        print(f"| {kind} | {len(a)} (recovered: hvdrun {na}, Horovod {nb}) | "
              f"{fmt(arm)} / {fmt(arw)} | {fmt(brm)} / {fmt(brw)} | "
              f"{ratio(arm, brm)} / {ratio(arw, brw)} | {fmt(asm)} / {fmt(asw)} | "
              f"{fmt(bsm)} / {fmt(bsw)} | {ratio(asm, bsm)} / {ratio(asw, bsw)} |")


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--build", default=os.path.join(ROOT, "build"))
    p.add_argument("--events", type=int, default=50)
    p.add_argument("--seed", type=int, default=1)
    have_horovod = os.access(os.path.join(HVD_VENV, "bin", "horovodrun"), os.X_OK)
    p.add_argument("--peer", choices=["horovod", "none"],
                   default="horovod" if have_horovod else "none",
                   help="also run the events under Horovod's elastic driver (default: when "
                        f"{HVD_VENV} has horovodrun)")
    p.add_argument("--deadline", type=float, default=150,
                   help="seconds an event may take to recover and settle (default 150)")
    p.add_argument("--horovod-gloo-timeout", type=int, default=None,
                   help="pass --gloo-timeout-seconds to horovodrun (default: Horovod's, 30 s)")
    args = p.parse_args()
    args.build = os.path.abspath(args.build)
    if args.peer == "horovod" and not have_horovod:
        sys.exit(f"elastic_stress: {HVD_VENV}/bin/horovodrun is missing (build it with "
                 "bench/horovod_synthetic.sh --install-only, or set HOROVOD_VENV)")
    subprocess.run(["cmake", "--build", args.build, "--target", "hvdrun", "hvdrun_runtime",
                    "hvdrun_test_cluster"], check=True, stdout=subprocess.DEVNULL)
    plan = make_plan(args.events, args.seed)
    counts = {k: sum(e[0] == k for e in plan) for k in ("kill", "remove", "add")}
    print(f"host: {os.cpu_count()} cores, load {os.getloadavg()[0]:.1f}; seed {args.seed}; "
          f"events: " + ", ".join(f"{k} {n}" for k, n in counts.items()))
    print("plan: " + "; ".join(describe(e) for e in plan), flush=True)
    if args.peer == "none":
        print("Horovod: not run (--peer none)")
    base = tempfile.mkdtemp(prefix="hvdrun-stress-")
    cluster, config = start_cluster(args.build)
    runs = []
    try:
        runs.append(run_job("hvdrun", plan, args, base, config))
        if args.peer == "horovod":
            runs.append(run_job("horovod", plan, args, base, config))
        report(runs)
        if args.peer == "horovod":
            print("\nHorovod notes: a rank that fails makes its driver blacklist the whole "
                  f"host for the cooldown ({COOLDOWN} s, as hvdrun); its survivors notice a "
                  "lost peer only at Gloo's timeout unless the connection fails first; when "
                  "every host of the failed generation is blacklisted (a kill while one host "
                  "is listed) its driver ends the job ('blacklisted slots count == N -> stop "
                  "running') instead of waiting out the cooldown, so the events after that "
                  "are counted as not run; an event counted as not recovered or not settled "
                  "is one it did not complete within the deadline.")
        ok = all(s["code"] == 0 and s["identical"] for s in runs[:1])
        return 0 if ok else 1
    finally:
        cluster.stdin.close()
        cluster.wait(timeout=30)
        if os.environ.get("KEEP"):
            print("kept", base)
        else:
            shutil.rmtree(base, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
