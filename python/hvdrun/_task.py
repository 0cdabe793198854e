"""The program every rank of hvdrun.run() runs (`python -m hvdrun._task`): connects
back to the caller (HVDRUN_RENDEZVOUS_ADDR, the port and token from the environment),
fetches the function, runs it and sends back its result or its exception.

A rank whose function raised prints the traceback to stderr and exits 1, so the
launcher ends the job and quotes it, as for any failing rank.
"""
import os
import socket
import sys
import time
import traceback

from hvdrun import _wire

try:
    import cloudpickle as _pickle
except ImportError:  # pragma: no cover - depends on the machine
    import pickle as _pickle


def _connect(addr, port, token, rank, deadline):
    """Connects to the caller and authenticates both ways; returns the Channel. A
    connection closed before the caller proved the token (the caller's pre-authentication
    cap closes its oldest pending connections when strangers flood the port) is retried
    with a bounded backoff until `deadline`; a caller with the wrong token is not."""
    delay = 0.05
    while True:
        sock = None
        try:
            sock = socket.create_connection((addr, port),
                                            timeout=max(1.0, deadline - time.monotonic()))
            sock.settimeout(max(1.0, deadline - time.monotonic()))
            chan = _wire.rank_handshake(sock, token, rank)
            sock.settimeout(None)
            return chan
        except (OSError, ConnectionError) as e:
            if sock is not None:
                sock.close()
            if time.monotonic() + delay >= deadline:
                raise ConnectionError(
                    f"hvdrun.run: rank {rank} cannot reach the caller at {addr}:{port}: "
                    f"{e}") from None
            time.sleep(delay)  # bounded backoff before the next connect
            delay = min(delay * 2, 1.0)


def main():
    rank = int(os.environ["HVDRUN_RANK"])
    token = bytes.fromhex(os.environ.pop("HVDRUN_RUN_TOKEN"))
    port = int(os.environ["HVDRUN_RUN_PORT"])
    addr = os.environ.get("HVDRUN_RUN_ADDR") or os.environ["HVDRUN_RENDEZVOUS_ADDR"]
    timeout = float(os.environ.get("HVDRUN_START_TIMEOUT") or 30)
    chan = _connect(addr, port, token, rank, time.monotonic() + timeout)
    sock = chan.sock
    fn = _pickle.loads(chan.recv())
    try:
        result = fn()
    except BaseException as e:  # noqa: B902 - everything goes back to the caller
        text = traceback.format_exc()
        try:
            exc = _pickle.dumps(e)
        except Exception:  # noqa: BLE001 - an unpicklable exception still reports its text
            exc = b""
        try:
            chan.send(b"E" + _pickle.dumps((text, exc)))
            # The caller has the traceback (JobFailed's message quotes it): one line here,
            # so that it is not printed again by the rank and in hvdrun's report.
            line = traceback.format_exception_only(type(e), e)[-1].rstrip("\n")
            text = (f"hvdrun.run: rank {rank} raised {line} "
                    f"(its traceback is in the caller's JobFailed)\n")
        except OSError:
            pass  # the caller is gone: the traceback goes to stderr, for hvdrun to quote
        sock.close()
        sys.stderr.write(text)
        sys.stderr.flush()
        return 1
    try:
        body = b"R" + _pickle.dumps(result)
    except Exception as e:  # noqa: BLE001
        text = f"hvdrun.run: rank {rank}'s result cannot be pickled: {e!r}\n"
        chan.send(b"E" + _pickle.dumps((text, b"")))
        sys.stderr.write(text)
        return 1
    chan.send(body)
    sock.close()
    return 0


if __name__ == "__main__":
    code = main()
    if code != 0:
        # Leave at once: a clean shutdown of hvdrun.torch could wait for peers that wait
        # for this rank; the launcher ends the job.
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(code)
    sys.exit(code)
