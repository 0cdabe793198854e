"""torchrun's command lines under hvdrun (docs/kubernetes.md, "torchrun's flags and
variables"): each form runs once under torchrun (python3 -m torch.distributed.run) and once
under hvdrun with the same flags, a rank program writes its environment, and the variables
the ranks see are compared row by row with the table: equal, present in both, the same
meaning (MASTER_ADDR reaches node 0), or different by design. Every variable torchrun adds
must be one of the table's rows."""
import json
import os
import re
import socket
import subprocess
import sys

import pytest

from _jobs import WORKERS, launcher
from _join import SECRET, free_port

# Values the same under both launchers.
EQUAL = ["RANK", "LOCAL_RANK", "WORLD_SIZE", "LOCAL_WORLD_SIZE", "GROUP_RANK",
         "GROUP_WORLD_SIZE", "ROLE_RANK", "ROLE_WORLD_SIZE", "ROLE_NAME",
         "TORCHELASTIC_RESTART_COUNT", "TORCHELASTIC_MAX_RESTARTS", "OMP_NUM_THREADS"]
# Set by both, to values of each launcher's own (a path per rank, a port).
PRESENT = ["TORCHELASTIC_ERROR_FILE", "MASTER_PORT", "MASTER_ADDR", "TORCHELASTIC_RUN_ID"]
# Different by design (the table says why).
DIFFERENT = ["TORCHELASTIC_USE_AGENT_STORE", "NCCL_ASYNC_ERROR_HANDLING"]
UUID = re.compile(r"^[0-9a-f]{8}-[0-9a-f]{4}-4[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$")

SCRIPT = os.path.join(WORKERS, "env_dump.py")

# name: (nodes, flags for node `n` with port `p`, the program)
FORMS = {
    "c10d, one node": (1, lambda n, p: ["--nnodes", "1", "--nproc_per_node", "2",
                                        "--rdzv_backend", "c10d",
                                        "--rdzv_endpoint", f"127.0.0.1:{p}"], [SCRIPT]),
    "standalone, -m": (1, lambda n, p: ["--standalone", "--nproc_per_node", "2"],
                       ["-m", "env_dump"]),
    "c10d, two nodes": (2, lambda n, p: ["--nnodes", "2", "--node_rank", str(n),
                                         "--nproc_per_node", "2", "--rdzv_backend", "c10d",
                                         "--rdzv_endpoint", f"127.0.0.1:{p}",
                                         "--rdzv_id", "compat-job", "--max_restarts", "0"],
                        [SCRIPT]),
    "static, two nodes, --no_python": (
        2, lambda n, p: ["--nnodes", "2", "--node_rank", str(n), "--nproc_per_node", "2",
                         "--master_addr", "127.0.0.1", "--master_port", str(p)],
        ["--no_python", sys.executable, SCRIPT]),
}


def run_nodes(tmp_path, label, nodes, launch, **extra):
    """Starts one launcher per node, waits for all; returns every rank's environment and
    the environment the launchers were started with."""
    out = tmp_path / label
    out.mkdir()
    env = dict(os.environ, ENV_DUMP_DIR=str(out), ENV_DUMP_LABEL=label,
               PYTHONPATH=os.pathsep.join([WORKERS, os.environ.get("PYTHONPATH", "")]),
               **extra)
    env.pop("OMP_NUM_THREADS", None)
    procs = [subprocess.Popen(launch(n), env=env, stdin=subprocess.DEVNULL,
                              stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
             for n in range(nodes)]
    for p in procs:
        text, _ = p.communicate(timeout=120)
        assert p.returncode == 0, f"{label}: {' '.join(p.args)}\n{text}"
    ranks = {}
    for name in os.listdir(out):
        with open(out / name, encoding="utf-8") as f:
            data = json.load(f)
        ranks[int(data["RANK"])] = data
    return ranks, env


def added(rank_env, base):
    return {k for k, v in rank_env.items() if base.get(k) != v}


def local_address(name):
    """Whether `name` resolves to an address of this machine (node 0): one it can bind."""
    with socket.socket() as s:
        try:
            s.bind((socket.gethostbyname(name), 0))
        except OSError:
            return False
    return True


@pytest.mark.parametrize("form", list(FORMS))
def test_ranks_see_torchrun_variables(tmp_path, form):
    nodes, flags, program = FORMS[form]
    port = free_port()
    # Debian's torch 1.13 on Python 3.11 fails with torchrun's default --redirects 0
    # (Std.from_str finds no IntFlag member for 0): the torchrun side tees instead.
    torch_ranks, base = run_nodes(
        tmp_path, "torchrun", nodes,
        lambda n: [sys.executable, "-m", "torch.distributed.run", "--redirects", "1",
                   "--tee", "1", *flags(n, port), *program])
    hvd_ranks, _ = run_nodes(
        tmp_path, "hvdrun", nodes, lambda n: [launcher(), *flags(n, port), *program],
        HVDRUN_JOB_SECRET=SECRET)
    assert sorted(torch_ranks) == sorted(hvd_ranks) == list(range(2 * nodes))
    for r, t in torch_ranks.items():
        h = hvd_ranks[r]
        unknown = added(t, base) - set(EQUAL + PRESENT + DIFFERENT)
        assert not unknown, f"torchrun sets {sorted(unknown)}: give each a row in the table"
        for name in EQUAL:
            assert (name, h.get(name)) == (name, t.get(name)), form
        for name in PRESENT:
            assert name in h and name in t, (form, name)
        assert local_address(h["MASTER_ADDR"]) and local_address(t["MASTER_ADDR"])
        assert h["MASTER_PORT"] == hvd_ranks[0]["MASTER_PORT"] != str(port)
        if "--rdzv_id" in flags(0, port):
            assert h["TORCHELASTIC_RUN_ID"] == t["TORCHELASTIC_RUN_ID"] == "compat-job"
        elif "--standalone" in flags(0, port):
            assert UUID.match(h["TORCHELASTIC_RUN_ID"]) and UUID.match(t["TORCHELASTIC_RUN_ID"])
        else:
            assert h["TORCHELASTIC_RUN_ID"] == t["TORCHELASTIC_RUN_ID"] == "none"
        assert h["TORCHELASTIC_USE_AGENT_STORE"] == "False"
        assert "NCCL_ASYNC_ERROR_HANDLING" not in h
