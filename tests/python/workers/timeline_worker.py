"""One rank recording a timeline (HOROVOD_TIMELINE from the environment, then
start_timeline/stop_timeline into a second file): named and unnamed collectives of every
kind. Rank 0 checks both files parse and hold every collective's phases. Prints
"rank R: timeline checks passed"."""
import json
import sys

import torch

import hvdrun.torch as hvd

hvd.init()
r, n = hvd.rank(), hvd.size()
hvd.allreduce(torch.ones(10), name="test_allreduce")
hvd.allreduce(torch.ones(3))  # unnamed: allreduce.noname.<seq>
hvd.allgather(torch.ones(2, 2), name="test_allgather")
hvd.broadcast(torch.ones(4), 0, name="test_broadcast")
hvd.alltoall(torch.ones(n, 2), name="test_alltoall")
hvd.reducescatter(torch.ones(n, 2), name="test_reducescatter")
hvd.stop_timeline()
second = sys.argv[1]
hvd.start_timeline(second, mark_cycles=True)
hvd.allreduce(torch.ones(5), name="after_restart")
hvd.stop_timeline()
hvd.allreduce(torch.ones(5), name="not_recorded")


def events(path):
    with open(path) as f:
        return json.load(f)


def rows(evs):
    return {e["pid"]: e["args"]["name"] for e in evs if e.get("ph") == "M"
            and e.get("name") == "process_name"}


if r == 0:
    import os
    first = events(os.environ["HOROVOD_TIMELINE"])
    names = rows(first)
    for row in ("allreduce.test_allreduce", "allgather.test_allgather",
                "broadcast.test_broadcast", "alltoall.test_alltoall.rows",
                "reducescatter.test_reducescatter"):
        assert row in names.values(), (row, sorted(names.values()))
    pid = next(p for p, name in names.items() if name == "allreduce.test_allreduce")
    phases = [(e["ph"], e.get("name")) for e in first if e.get("pid") == pid and e["ph"] in "BE"]
    assert phases[0] == ("B", "NEGOTIATE_ALLREDUCE"), phases
    assert ("B", "ALLREDUCE") in phases and phases[-1][0] == "E", phases
    ready = {e["name"] for e in first if e.get("pid") == pid and e["ph"] == "X"}
    assert ready == {str(k) for k in range(n)}, ready
    assert any(name.startswith("allreduce.noname.") for name in names.values()), names
    assert not any("after_restart" in name for name in names.values())
    again = events(second)
    names2 = set(rows(again).values())
    assert "allreduce.after_restart" in names2 and "allreduce.not_recorded" not in names2, names2
    assert any(e.get("name") == "CYCLE_START" for e in again)
print(f"rank {r}: timeline checks passed", flush=True)
