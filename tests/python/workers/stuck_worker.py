"""A job that hangs, for the stack report (test_stacks.py): ranks 0 and 3 wait in an
allreduce that ranks 1 and 2 never issue; rank 1 sleeps, rank 2 waits on an empty queue.
Each rank says "ready" once it is about to block."""
import queue
import time

import torch

import hvdrun.torch as hvd


def wait_in_allreduce():
    hvd.allreduce(torch.ones(4), name="grad")


def main():
    hvd.init()
    print("ready", flush=True)
    if hvd.rank() == 1:
        time.sleep(3600)
    elif hvd.rank() == 2:
        queue.Queue().get()
    else:
        wait_in_allreduce()


main()
