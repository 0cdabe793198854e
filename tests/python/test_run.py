"""hvdrun.run() from a plain Python process: results in rank order, closures and
arguments shipped to the ranks, environment, a rank's exception raised in the caller
with the launcher's message; the authenticated callback channel refuses a peer without
the token and a tampered frame; unsupported arguments name themselves."""
import os
import socket
import threading

import pytest

import hvdrun
from hvdrun import _wire


def allreduce_rank(scale, offset=0):
    import torch

    import hvdrun.torch as hvd
    hvd.init()
    total = hvd.allreduce(torch.tensor([float(hvd.rank())]), op=hvd.Sum).item()
    return {"rank": hvd.rank(), "size": hvd.size(), "value": hvd.rank() * scale + offset,
            "total": total}


@pytest.mark.parametrize("np", [1, 2, 4])
def test_run_returns_every_rank_result_in_rank_order(np):
    results = hvdrun.run(allreduce_rank, args=(10,), kwargs={"offset": 3}, np=np)
    assert [r["rank"] for r in results] == list(range(np))
    assert all(r["size"] == np for r in results)
    assert [r["value"] for r in results] == [k * 10 + 3 for k in range(np)]
    assert all(r["total"] == np * (np - 1) / 2 for r in results)


def test_run_ships_closures_big_results_and_environment():
    secret = "closure-value"
    blob = os.urandom(3 << 20)

    def fn():
        return (secret, os.environ.get("HVDRUN_TEST_VALUE"), os.environ["HVDRUN_RANK"], blob)

    results = hvdrun.run(fn, num_proc=2, env={"HVDRUN_TEST_VALUE": "from-env"})
    assert [r[:3] for r in results] == [(secret, "from-env", "0"), (secret, "from-env", "1")]
    assert all(r[3] == blob for r in results)


class Deliberate(Exception):
    pass


def raising_on_rank_1():
    import hvdrun.torch as hvd
    hvd.init()
    if hvd.rank() == 1:
        raise Deliberate("rank 1 gives up")
    hvd.barrier()
    return "unreachable"


def test_a_rank_exception_raises_in_the_caller_with_the_launcher_message():
    with pytest.raises(hvdrun.JobFailed) as e:
        hvdrun.run(raising_on_rank_1, np=2)
    err = e.value
    assert err.exit_code == 1
    assert "rank 1 on host localhost exited with code 1" in str(err)
    assert "Deliberate: rank 1 gives up" in str(err)
    assert isinstance(err.__cause__, Deliberate)


def test_unsupported_arguments_name_themselves():
    for kwargs, word in (({"min_num_proc": 1}, "min_num_proc"),
                         ({"host_discovery_script": "x"}, "host_discovery_script"),
                         ({"use_mpi": True}, "use_mpi"),
                         ({"network_interfaces": ["a", "b"]}, "one network interface")):
        with pytest.raises(NotImplementedError, match=word):
            hvdrun.run(len, args=((),), **kwargs)


def test_launcher_not_found_says_how_to_fix(monkeypatch, tmp_path):
    monkeypatch.delenv("HVDRUN_LAUNCHER")
    monkeypatch.setenv("PATH", str(tmp_path))
    monkeypatch.setattr("sys.executable", str(tmp_path / "python3"))
    with pytest.raises(FileNotFoundError, match="HVDRUN_LAUNCHER"):
        hvdrun.run(len, args=((),))


def handshake(caller_token, rank_token):
    a, b = socket.socketpair()
    out = {}

    def caller():
        try:
            out["caller"] = _wire.caller_handshake(a, caller_token)
        except Exception as e:  # noqa: BLE001
            out["caller"] = e
        a.close()

    t = threading.Thread(target=caller)
    t.start()
    try:
        out["rank"] = _wire.rank_handshake(b, rank_token, 3)
    except Exception as e:  # noqa: BLE001
        out["rank"] = e
    t.join(10)
    assert not t.is_alive()
    return out, b


def test_wire_refuses_a_peer_without_the_token():
    out, _ = handshake(b"k" * 32, b"x" * 32)
    assert isinstance(out["caller"], _wire.AuthError)
    assert isinstance(out["rank"], (_wire.AuthError, ConnectionError))


def test_wire_authenticates_both_sides_and_frames():
    a, b = socket.socketpair()
    token = b"t" * 32
    got = {}
    t = threading.Thread(target=lambda: got.setdefault("c", _wire.caller_handshake(a, token)))
    t.start()
    chan_r = _wire.rank_handshake(b, token, 5)
    t.join(10)
    rank, chan_c = got["c"]
    assert rank == 5
    chan_c.send(b"payload")
    assert chan_r.recv() == b"payload"
    # A tampered frame (one flipped byte) is refused before anything uses it.
    chan_r.sock.sendall(b"\0" * 7 + b"\x03" + b"abc" + b"\0" * 32)
    with pytest.raises(_wire.AuthError):
        chan_c.recv()
    a.close()
    b.close()
