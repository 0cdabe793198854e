"""One rank recording a timeline (HOROVOD_TIMELINE from the environment, then
start_timeline/stop_timeline into a second file): named and unnamed collectives of every
kind. Rank 0 checks both files parse and hold every collective's phases, and that the data
movement's own activities (argv[2]: those a 1 MiB allreduce shows, comma-separated; argv[3]:
the 64 KiB alltoall's) lie inside the operation's phase. Prints
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
hvd.allreduce(torch.ones(1 << 18), name="big_allreduce")
hvd.alltoall(torch.ones(n, (1 << 14) // n), name="big_alltoall")
hvd.reducescatter(torch.ones(n, 1 << 14), name="big_reducescatter")
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


# The activities that move an alltoall's data (the splits' exchange has its own).
ALLTOALL_DATA = ("SHM_ALLTOALL", "SHM_GATHER", "GLOO_ALLTOALL", "TCP_ALLTOALL", "SHM_SCATTER")


def activities(evs, row):
    """The phases opened on `row` after its negotiation, in order (the operation's own
    first), after checking that every phase there is closed, innermost first."""
    pid = next(p for p, name in rows(evs).items() if name == row)
    depth, inside = 0, []
    for e in evs:
        if e.get("pid") != pid or e["ph"] not in "BE":
            continue
        if e["ph"] == "B":
            depth += 1
            if not e["name"].startswith("NEGOTIATE_"):
                inside.append(e["name"])
        else:
            depth -= 1
            assert depth >= 0, (row, evs)
    assert depth == 0, (row, depth)
    return inside


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
    want_allreduce = [a for a in sys.argv[2].split(",") if a]
    want_alltoall = [a for a in sys.argv[3].split(",") if a]
    got = activities(first, "allreduce.big_allreduce")
    assert got[0] == "ALLREDUCE" and got[1:] == want_allreduce, got
    got = activities(first, "alltoall.big_alltoall.rows")
    assert got[:2] == ["ALLTOALL", "ALLTOALL_SPLITS"], got
    assert [a for a in got if a in ALLTOALL_DATA] == want_alltoall, got
    got = activities(first, "reducescatter.big_reducescatter")
    assert got[0] == "REDUCESCATTER", got
    if n > 1:
        assert len(got) > 1, got
    again = events(second)
    names2 = set(rows(again).values())
    assert "allreduce.after_restart" in names2 and "allreduce.not_recorded" not in names2, names2
    assert any(e.get("name") == "CYCLE_START" for e in again)
print(f"rank {r}: timeline checks passed", flush=True)
