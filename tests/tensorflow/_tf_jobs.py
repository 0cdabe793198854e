"""The TensorFlow tests' jobs: tests/python's run_job with this folder's workers, the
variables every rank needs forwarded, and a deadline that covers importing TensorFlow in
four ranks on a loaded machine."""
import os

from _jobs import run_job

WORKERS = os.path.join(os.path.dirname(os.path.abspath(__file__)), "workers")
FORWARD = ("TF_CPP_MIN_LOG_LEVEL", "HVDRUN_TF_OPS_CACHE", "HVDRUN_TF_OPS",
           "HOROVOD_DYNAMIC_PROCESS_SETS")


def run_tf_job(np, worker, *args, timeout=240, **kw):
    """Runs workers/<worker> in a job of `np` ranks with this interpreter."""
    return run_job(np, os.path.join(WORKERS, worker), *args, timeout=timeout,
                   forward=FORWARD, **kw)
