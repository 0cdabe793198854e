"""A program started with plain `python`, without hvdrun (an IDE, pdb): hvd.init() runs it
as a single process, rank 0 of 1, with every collective local and correct and one info
line saying so. Only when none of the job's variables is set: part of them is an error
naming what is missing, and another launcher's job of several processes is refused."""
import os
import subprocess
import sys
import textwrap

# The variables hvdrun sets for a rank, and other launchers' signs of a multi-process job.
JOB = ["HVDRUN_RANK", "HVDRUN_SIZE", "HVDRUN_LOCAL_RANK", "HVDRUN_LOCAL_SIZE",
       "HVDRUN_CROSS_RANK", "HVDRUN_CROSS_SIZE", "HVDRUN_HOSTNAME", "HVDRUN_RENDEZVOUS_ADDR",
       "HVDRUN_RENDEZVOUS_PORT", "HVDRUN_SECRET"]
OTHERS = ["HOROVOD_SIZE", "OMPI_COMM_WORLD_SIZE", "PMI_SIZE", "SLURM_STEP_NUM_TASKS",
          "WORLD_SIZE"]

SINGLE = "running as a single process, rank 0 of 1"

PROGRAM = textwrap.dedent("""
    import torch
    import hvdrun.torch as hvd

    hvd.init()
    assert hvd.is_initialized()
    assert (hvd.rank(), hvd.size()) == (0, 1)
    assert (hvd.local_rank(), hvd.local_size()) == (0, 1)
    assert (hvd.cross_rank(), hvd.cross_size()) == (0, 1)

    x = torch.arange(1000, dtype=torch.float32) * 0.5
    assert torch.equal(hvd.allreduce(x, op=hvd.Sum), x)
    assert torch.equal(hvd.allreduce(x), x)  # average over one rank
    assert torch.equal(hvd.allreduce(x, op=hvd.Max, name="m"), x)
    y = x.clone()
    hvd.allreduce_(y, op=hvd.Sum, prescale_factor=2.0)
    assert torch.equal(y, x * 2)
    a, b = hvd.grouped_allreduce([x, torch.ones(3, dtype=torch.int64)], op=hvd.Sum)
    assert torch.equal(a, x) and torch.equal(b, torch.ones(3, dtype=torch.int64))
    assert torch.equal(hvd.allgather(torch.ones(2, 3)), torch.ones(2, 3))
    assert torch.equal(hvd.broadcast(x, root_rank=0), x)
    h = hvd.allreduce_async(x, op=hvd.Sum)
    assert torch.equal(hvd.synchronize(h), x)
    assert torch.equal(hvd.alltoall(x), x)
    assert torch.equal(hvd.reducescatter(x, op=hvd.Sum), x)
    # Rank 0 alone is every rank: the global set, which cannot be added again, nor given
    # to init() (Horovod's rules); its collectives run in it.
    try:
        hvd.add_process_set([0])
        raise AssertionError("the global set's ranks were added as a set")
    except ValueError as e:
        assert "the global process set (0)" in str(e), e
    try:
        hvd.init(process_sets=[hvd.ProcessSet([0])])
        raise AssertionError("init() took the global set's ranks as a set")
    except ValueError as e:
        assert "is a duplicate" in str(e), e
    assert hvd.is_initialized()
    assert torch.equal(hvd.allreduce(x, op=hvd.Sum, process_set=hvd.global_process_set), x)
    assert hvd.broadcast_object({"k": [1, 2]}, root_rank=0) == {"k": [1, 2]}
    assert hvd.allgather_object("only") == ["only"]
    hvd.barrier()

    model = torch.nn.Linear(4, 2)
    opt = hvd.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=0.1),
                                   named_parameters=model.named_parameters())
    hvd.broadcast_parameters(model.state_dict(), root_rank=0)
    before = model.weight.detach().clone()
    model(torch.ones(8, 4)).sum().backward()
    grad = model.weight.grad.detach().clone()
    opt.step()
    assert torch.allclose(model.weight, before - 0.1 * grad)
    assert hvd.join() == 0

    hvd.shutdown()
    hvd.init()  # again after shutdown: still rank 0 of 1, without a second info line
    assert (hvd.rank(), hvd.size()) == (0, 1)
    assert torch.equal(hvd.allreduce(x, op=hvd.Sum), x)
    hvd.shutdown()
    print("standalone ok")
""")


def plain_python(code, **env):
    """`python -c code` as a user starts it: none of hvdrun's (or other launchers') job
    variables, whatever the environment of the tests holds, plus `env`."""
    full = {k: v for k, v in os.environ.items() if k not in JOB + OTHERS}
    full["HVDRUN_NCCL"] = "off"  # the same run on a machine with or without a GPU
    full.update(env)
    return subprocess.run([sys.executable, "-c", code], env=full, capture_output=True,
                          text=True, timeout=120)


def test_plain_python_runs_as_rank_0_of_1():
    p = plain_python(PROGRAM, HOROVOD_DYNAMIC_PROCESS_SETS="1")
    assert p.returncode == 0, p.stdout + p.stderr
    assert p.stdout == "standalone ok\n", p.stdout + p.stderr
    assert p.stderr.count(SINGLE) == 1, p.stderr
    assert "hvdrun -np N" in p.stderr, p.stderr


def test_part_of_the_job_variables_is_an_error_naming_the_missing_ones():
    p = plain_python("import hvdrun.torch as hvd; hvd.init()", HVDRUN_RANK="0", HVDRUN_SIZE="2")
    assert p.returncode != 0
    assert "HvdrunError: hvdrun.torch.init failed: " in p.stderr, p.stderr
    assert "missing HVDRUN_LOCAL_RANK" in p.stderr and "HVDRUN_SECRET" in p.stderr, p.stderr
    assert "unset HVDRUN_RANK, HVDRUN_SIZE" in p.stderr, p.stderr
    assert SINGLE not in p.stderr, p.stderr


def test_one_of_several_processes_of_another_launcher_is_refused():
    p = plain_python("import hvdrun.torch as hvd; hvd.init()", WORLD_SIZE="4")
    assert p.returncode != 0
    assert "one of 4 started by torchrun (WORLD_SIZE=4)" in p.stderr, p.stderr
    assert "hvdrun -np 4" in p.stderr, p.stderr
    assert SINGLE not in p.stderr, p.stderr
