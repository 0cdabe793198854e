"""One meaning for every reduction, whichever front end submits it: the semantics grid
(workers/semantics_worker.py: allreduce with every op, reducescatter, every element type,
four pairs of scale factors, the whole job and a process set) run at np 3 through the C
ABI, hvdrun.torch and hvdrun.tensorflow, and the three compared bit for bit. libhvdrun
applies the scale factors and Average once; the front ends only hand it the operation.
hvdrun.torch runs under the system's python3 (Debian's torch), the other two here."""
import json
import os
import subprocess

import pytest

from _jobs import expect_ok
from _tf_jobs import run_tf_job

NP = 3
SYSTEM_PYTHON = "/usr/bin/python3"


def results(out_dir, front):
    ranks = []
    for rank in range(NP):
        with open(os.path.join(out_dir, f"{front}.{rank}.json")) as f:
            ranks.append(json.load(f))
    return ranks


def torch_python():
    """The interpreter that has torch (Debian's python3-torch), or None."""
    found = subprocess.run([SYSTEM_PYTHON, "-c", "import torch"], capture_output=True)
    return SYSTEM_PYTHON if found.returncode == 0 else None


def test_c_torch_and_tensorflow_reduce_bit_for_bit_alike(tmp_path):
    python = torch_python()
    if python is None:
        pytest.skip(f"skipped: {SYSTEM_PYTHON} cannot import torch; install python3-torch")
    env = {"HOROVOD_DYNAMIC_PROCESS_SETS": "1"}
    for front, kw in (("c", {}), ("torch", {"python": python}), ("tf", {})):
        job = run_tf_job(NP, "semantics_worker.py", front, tmp_path,
                         env=env, **kw)
        expect_ok(job, NP, marker=f"({front})")
    c, torch, tf = (results(tmp_path, f) for f in ("c", "torch", "tf"))
    for rank in range(NP):
        # The C ABI runs libhvdrun's own types; the frameworks also int8 and int16.
        assert len(c[rank]) >= 196 and len(torch[rank]) > len(c[rank])
        assert sorted(torch[rank]) == sorted(tf[rank])
        differ = sorted(k for k in torch[rank] if torch[rank][k] != tf[rank][k])
        assert differ == [], f"rank {rank}: torch and tensorflow differ in {differ[:10]}"
        differ = sorted(k for k in c[rank] if c[rank][k] != torch[rank][k])
        assert differ == [], f"rank {rank}: the C ABI and torch differ in {differ[:10]}"
