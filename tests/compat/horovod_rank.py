"""What a Horovod gloo-mode rank does at hvd.init(), with the standard library only: read
the HOROVOD_* environment, then for the global, local_<HOROVOD_HOSTNAME> and
cross_<HOROVOD_LOCAL_RANK> scopes in turn PUT its keys on the HTTP rendezvous at
HOROVOD_GLOO_RENDEZVOUS_ADDR:PORT, GET-poll every peer's keys (404 until present, every
10 ms), check what it read, and DELETE its rank. Prints "horovod_rank: rank R/N OK".

The value each rank PUTs names its global rank, so every rank can check that its local
scope holds exactly the ranks on its host and its cross scope those with its local rank.
"""

import argparse
import http.client
import os
import sys
import time


def request(addr, port, method, path, body=b""):
    conn = http.client.HTTPConnection(addr, port, timeout=10)
    try:
        conn.request(method, path, body=body, headers={"Content-Length": str(len(body))})
        resp = conn.getresponse()
        return resp.status, resp.read()
    finally:
        conn.close()


def scope_round(addr, port, scope, rank, size, hostname, me, deadline):
    put = [(f"/{scope}/rank_{rank}", hostname.encode()), (f"/{scope}/{rank}", str(me).encode())]
    for path, body in put:
        status, _ = request(addr, port, "PUT", path, body)
        if status != 200:
            raise SystemExit(f"horovod_rank: PUT {path} answered {status}")
    seen = []
    for r in range(size):
        for key in (f"rank_{r}", str(r)):
            path = f"/{scope}/{key}"
            while True:
                status, body = request(addr, port, "GET", path)
                if status == 200:
                    break
                if status != 404 or time.monotonic() > deadline:
                    raise SystemExit(f"horovod_rank: GET {path} answered {status}")
                time.sleep(0.01)
        seen.append(int(body))
    status, _ = request(addr, port, "DELETE", f"/{scope}/{rank}")
    if status != 200:
        raise SystemExit(f"horovod_rank: DELETE /{scope}/{rank} answered {status}")
    return seen


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--slots", help="ranks per host in host order, e.g. 2,2")
    args = parser.parse_args()
    env = os.environ
    addr = env["HOROVOD_GLOO_RENDEZVOUS_ADDR"]
    port = int(env["HOROVOD_GLOO_RENDEZVOUS_PORT"])
    hostname = env["HOROVOD_HOSTNAME"]
    rank, size = int(env["HOROVOD_RANK"]), int(env["HOROVOD_SIZE"])
    local_rank, local_size = int(env["HOROVOD_LOCAL_RANK"]), int(env["HOROVOD_LOCAL_SIZE"])
    cross_rank, cross_size = int(env["HOROVOD_CROSS_RANK"]), int(env["HOROVOD_CROSS_SIZE"])
    assert env.get("HOROVOD_CONTROLLER") == "gloo" and env.get("HOROVOD_CPU_OPERATIONS") == "gloo"
    if args.slots:
        slots = [int(s) for s in args.slots.split(",")]
        assert sum(slots) == size and local_size in slots, (slots, size, local_size)
    deadline = time.monotonic() + 60

    everyone = scope_round(addr, port, "global", rank, size, hostname, rank, deadline)
    assert everyone == list(range(size)), everyone
    local = scope_round(addr, port, f"local_{hostname}", local_rank, local_size, hostname, rank,
                        deadline)
    # Ranks fill hosts in order: this host's ranks are consecutive, with local rank order.
    assert local == list(range(rank - local_rank, rank - local_rank + local_size)), local
    assert local[local_rank] == rank
    cross = scope_round(addr, port, f"cross_{local_rank}", cross_rank, cross_size, hostname, rank,
                        deadline)
    assert len(cross) == cross_size and cross[cross_rank] == rank, cross
    assert cross == sorted(cross), cross
    print(f"horovod_rank: rank {rank}/{size} OK", flush=True)


if __name__ == "__main__":
    try:
        main()
    except AssertionError as e:
        print(f"horovod_rank: check failed: {e!r}", file=sys.stderr)
        raise SystemExit(3)
