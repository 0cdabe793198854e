#!/usr/bin/python3
"""torch.distributed.TCPStore throughput, driven as torch programs drive it: one master
store in this process, CLIENTS processes each doing ITERS x (set + get) of a 64-byte
value. Prints ops/s. Usage: store_torch.py [CLIENTS=8] [ITERS=5000]"""
import multiprocessing as mp
import sys
import time
from datetime import timedelta

import torch.distributed as dist


def client(port, c, iters, go):
    store = dist.TCPStore("127.0.0.1", port, is_master=False, timeout=timedelta(seconds=60))
    value = b"v" * 64
    go.wait()
    for i in range(iters):
        key = f"bench/{c}/{i % 64}"
        store.set(key, value)
        store.get(key)


def main():
    clients = int(sys.argv[1]) if len(sys.argv) > 1 else 8
    iters = int(sys.argv[2]) if len(sys.argv) > 2 else 5000
    master = dist.TCPStore("127.0.0.1", 0, is_master=True, wait_for_workers=False,
                           timeout=timedelta(seconds=60))
    go = mp.Event()
    procs = [mp.Process(target=client, args=(master.port, c, iters, go)) for c in range(clients)]
    for p in procs:
        p.start()
    time.sleep(2.0)  # let every client connect
    t0 = time.monotonic()
    go.set()
    for p in procs:
        p.join()
    dt = time.monotonic() - t0
    ops = 2 * clients * iters
    print(f"torch_tcpstore clients={clients} ops={ops} ops_per_s={ops / dt:.0f}")


if __name__ == "__main__":
    main()
