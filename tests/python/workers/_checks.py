"""Helpers the workers share: an exception check, and the device a worker runs on."""
import os
import sys

import torch


def expect_raises(exc, fn, *words):
    """Asserts that fn() raises `exc` whose message holds every one of `words`."""
    try:
        fn()
    except exc as e:
        for w in words:
            assert w in str(e), f"{w!r} not in {e!r}"
        return
    raise AssertionError(f"{fn} did not raise {exc.__name__}")


def device_argument(tag):
    """The device named by the worker's first argument, cpu (default) or cuda. Call it
    before hvd.init(): ranks sharing one GPU then each claim a host of their own
    (NCCL_HOSTID), so that NCCL accepts two ranks on one device."""
    dev = sys.argv[1] if len(sys.argv) > 1 else "cpu"
    if dev == "cuda" and torch.cuda.device_count() < int(os.environ["HVDRUN_LOCAL_SIZE"]):
        os.environ["NCCL_HOSTID"] = f"hvdrun-python-{tag}-{os.environ['HVDRUN_RANK']}"
    return dev


def pin_device(dev, local_rank):
    """After hvd.init(): one GPU per local rank (shared when there are fewer), and no
    TF32, so that float32 results compare with the CPU's."""
    if dev == "cuda":
        torch.cuda.set_device(local_rank % torch.cuda.device_count())
        torch.backends.cudnn.allow_tf32 = torch.backends.cuda.matmul.allow_tf32 = False
