"""A Horovod elastic training program (hvd.elastic.run, TorchState, a commit every
COMMIT_EVERY steps) that reports what hvdrun's in-process recovery does to it.

Usage: elastic_inprocess_worker.py DIR [raise|raise-late]

Each process appends lines to DIR/pid-<pid> (one file per process, so a test reads which
processes lived through which generations):
    start PID AGENT GEN RANK SIZE STEPS HOMOGENEOUS   when the training function (re)starts,
                                          after the sync (HOMOGENEOUS: hvd.is_homogeneous(),
                                          1 or 0)
    step PID AGENT GEN RANK SIZE STEPS    after each commit
    final PID AGENT GEN RANK SIZE STEPS IDENTICAL   at the end (IDENTICAL: 1 when the weights
                                          are the same on every rank)
AGENT is the parent process (the host's hvdrun agent). Training goes on until the file
DIR/stop exists at a commit (rank 0 decides, every rank stops at the same step). With
`raise`, rank 1 of generation 0 raises RuntimeError at step RAISE_AT: its process ends
(and hvdrun replaces it) while the others recover in process. With `raise-late`, the
same, and the first process started into the running job (HVDRUN_JOINING) never joins:
it writes `late PID` to DIR/pid-<pid> and sleeps before hvd.init(), as a rank stuck in
its start-up would."""
import os
import sys
import time

COMMIT_EVERY = 3
RAISE_AT = 7
PACE_S = 0.02  # between steps: the program's own pace, so six ranks share two cores

out_dir = sys.argv[1]
raise_mode = sys.argv[2:] in (["raise"], ["raise-late"])
log = open(os.path.join(out_dir, f"pid-{os.getpid()}"), "a", buffering=1)

# Before torch is imported (seconds on a loaded machine), so that the late process has
# said so well within the launcher's --start-timeout, which stops it.
if sys.argv[2:] == ["raise-late"] and os.environ.get("HVDRUN_JOINING") == "1":
    try:
        os.close(os.open(os.path.join(out_dir, "late-taken"), os.O_CREAT | os.O_EXCL))
        log.write(f"late {os.getpid()}\n")
        while True:
            time.sleep(60)
    except FileExistsError:
        pass  # a later process joins as usual

import torch  # noqa: E402

import hvdrun.torch as hvd  # noqa: E402

hvd.init()
torch.manual_seed(100 + hvd.rank())
model = torch.nn.Linear(8, 1)
optimizer = hvd.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=0.01),
                                     named_parameters=model.named_parameters())
state = hvd.elastic.TorchState(model=model, optimizer=optimizer, steps=0)


def say(kind, *extra):
    fields = [kind, os.getpid(), os.getppid(), hvd.generation(), hvd.rank(), hvd.size(),
              state.steps] + list(extra)
    log.write(" ".join(str(f) for f in fields) + "\n")


@hvd.elastic.run
def train(state):
    say("start", int(hvd.is_homogeneous()))
    x = torch.arange(8.0).reshape(1, 8) / 8
    while True:
        optimizer.zero_grad()
        model(x * (1 + state.steps % 5)).sum().backward()
        optimizer.step()
        state.steps += 1
        if raise_mode and hvd.generation() == 0 and hvd.rank() == 1 and state.steps == RAISE_AT:
            raise RuntimeError("injected failure in the training loop")
        if state.steps % COMMIT_EVERY == 0:
            state.commit()
            say("step")
            stop = hvd.broadcast_object(os.path.exists(os.path.join(out_dir, "stop")))
            if stop:
                return
        time.sleep(PACE_S)


train(state)
final = torch.cat([p.detach().reshape(-1) for p in model.parameters()]).reshape(1, -1)
identical = all(torch.equal(final[0], w) for w in hvd.allgather(final))
say("final", int(identical))
hvd.shutdown()
