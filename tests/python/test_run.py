"""hvdrun.run() from a plain Python process: results in rank order, closures and
arguments shipped to the ranks, environment, a rank's exception raised in the caller
with the launcher's message; the authenticated callback channel refuses a peer without
the token and a tampered frame; unsupported arguments name themselves; the collector
listens on loopback for a local job and returns the results while another user holds 70
idle connections to it (the pre-authentication policy of hvdrun/_preauth.py)."""
import os
import shutil
import socket
import subprocess
import threading
import time

import pytest

import hvdrun
from hvdrun import _preauth, _wire, runner


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


def test_a_rank_exception_raises_in_the_caller_with_the_launcher_message(capfd):
    with pytest.raises(hvdrun.JobFailed) as e:
        hvdrun.run(raising_on_rank_1, np=2)
    err = e.value
    assert err.exit_code == 1
    assert "rank 1 on host localhost exited with code 1" in str(err)
    assert "Deliberate: rank 1 gives up" in str(err)
    assert isinstance(err.__cause__, Deliberate)
    # The traceback once, in JobFailed: neither the rank's stderr (relayed by hvdrun) nor
    # hvdrun's quote of it repeats it.
    assert str(err).count("Traceback (most recent call last)") == 1, str(err)
    assert 'raise Deliberate("rank 1 gives up")' in str(err)
    printed = capfd.readouterr().err
    assert "Traceback" not in printed, printed
    assert "Deliberate: rank 1 gives up (its traceback is in the caller" in printed, printed


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


# Opens N connections to HOST PORT, says how many, and holds them without a word until
# its stdin closes: the idle flood of issue 27, run as another user.
IDLE_FLOOD = """
import socket, sys
host, port, n = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
held = [socket.create_connection((host, port)) for _ in range(n)]
print(len(held), flush=True)
sys.stdin.read()
"""


def rank_answer():
    return 42


def test_run_returns_results_under_70_idle_connections_from_another_user(monkeypatch, capfd):
    if os.geteuid() != 0 or shutil.which("runuser") is None:
        pytest.skip("needs root and runuser to act as another local user (nobody)")
    floods = []
    real_listen = runner._listen

    def listen_then_flood(address=None):
        listener = real_listen(address)
        host, port = listener.getsockname()[:2]
        flood = subprocess.Popen(
            ["runuser", "-u", "nobody", "--", "/usr/bin/python3", "-c", IDLE_FLOOD, host,
             str(port), "70"], stdin=subprocess.PIPE, stdout=subprocess.PIPE, cwd="/")
        floods.append((flood, host))
        # The 70 connections are queued on the port before the first rank starts.
        assert flood.stdout.readline().strip() == b"70"
        return listener

    monkeypatch.setattr(runner, "_listen", listen_then_flood)
    try:
        start = time.monotonic()
        results = hvdrun.run(rank_answer, np=2)
        took = time.monotonic() - start
    finally:
        for flood, _ in floods:
            flood.stdin.close()
            flood.wait(10)
    assert results == [42, 42]
    assert [host for _, host in floods] == ["127.0.0.1"]  # a local job: loopback only
    # The ranks never waited out a handshake deadline (5 s) or a connect retry series.
    assert took < 20, f"hvdrun.run took {took:.1f} s under the flood"
    err = capfd.readouterr().err
    # 6 of the stranger's 70 made room for newer ones of its own: one warning line for all.
    assert err.count("closing the oldest from uid 65534 on this host") == 1, err


def test_peer_source_names_the_local_user_behind_a_connection():
    with socket.socket() as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen(1)
        with socket.create_connection(listener.getsockname()) as client:
            conn, _ = listener.accept()
            with conn:
                assert _preauth.peer_source(conn) == f"uid {os.geteuid()} on this host"
                assert client  # held open while the peer is looked up


def test_log_limiter_writes_one_line_per_cause_per_interval_with_the_count():
    class Sink:
        def __init__(self):
            self.text = ""

        def write(self, s):
            self.text += s

        def flush(self):
            pass

    sink = Sink()
    log = _preauth.LogLimiter(interval=0.2, stream=sink)
    for _ in range(10000):
        log.warn("bad", "a bad connection")
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline and log.lines < 2:
        log.warn("bad", "a bad connection")
        time.sleep(0.05)
    assert log.lines == 2
    lines = sink.text.splitlines()
    assert lines[0] == "a bad connection"
    assert lines[1].startswith("a bad connection (and ") and "more like it in the last 0.2 s" in lines[1]
