"""Horovod's helpers built on the collectives (`horovod.torch.functions`): broadcasting a
model's parameters and an optimizer's state from one rank, and moving arbitrary Python
objects (pickled with cloudpickle when it is installed, else pickle).

Objects are unpickled only from authenticated bytes. Between hosts the collectives' bytes
cross TCP pairs that anyone able to reach them could write into, and unpickling runs code:
so every pickled object travels behind an HMAC-SHA256 tag under a key derived from the job
secret (HVDRUN_SECRET), bound to the operation, the job's generation, the call's place in
the sequence of object collectives, the sending rank and the world size, and a receiver
checks the tag before a byte is unpickled. A payload that fails (altered on the way,
replayed from an earlier call, or written by a process without the secret) raises
ObjectAuthError naming the rank it claims to come from; nothing of it is unpickled."""
import collections
import hashlib
import hmac
import io
import os
import struct

import torch

from hvdrun import _job
from hvdrun.torch.mpi_ops import (_check_process_set, _set_size, allgather, broadcast_,
                                  broadcast_async_, generation, global_process_set, rank,
                                  size, synchronize)

try:
    import cloudpickle as _pickle
except ImportError:  # pragma: no cover - depends on the machine
    import pickle as _pickle


def broadcast_parameters(params, root_rank):
    """Overwrites every rank's parameters with rank `root_rank`'s, in place.

    Arguments:
        params: `model.state_dict()` (a dict, broadcast in sorted key order),
            `list(model.named_parameters())` or `list(model.parameters())`.
        root_rank: the rank whose values win.
    """
    if isinstance(params, dict):
        items = sorted(params.items())
    elif isinstance(params, list):
        items = [p if isinstance(p, tuple) else (None, p) for p in params]
    else:
        raise ValueError(f"invalid params of type: {type(params)}; pass "
                         "model.state_dict() or a list of parameters")
    handles = [broadcast_async_(p, root_rank, name) for name, p in items
               if isinstance(p, torch.Tensor)]
    for h in handles:
        synchronize(h)


def broadcast_optimizer_state(optimizer, root_rank, model=None):
    """Overwrites every rank's optimizer state (tensors such as momentum buffers, and
    scalars such as the learning rate of each param group) with rank `root_rank`'s.
    An optimizer without state yet gets it first through one step with zero gradients,
    as Horovod does.

    Arguments:
        optimizer: a torch optimizer or a DistributedOptimizer.
        root_rank: the rank whose values win.
        model: optional; its sparse embeddings get sparse zero gradients for that step.
    """
    if isinstance(optimizer, torch.optim.LBFGS):
        raise ValueError("cannot broadcast torch.optim.LBFGS state; broadcast_object its "
                         "state_dict() instead")
    state_dict = optimizer.state_dict()

    sparse_params = set()
    if model is not None:
        for m in model.modules():
            if isinstance(m, torch.nn.Embedding) and m.sparse:
                sparse_params.update(id(p) for p in m.parameters())

    if len(state_dict["state"]) == 0:
        for group in optimizer.param_groups:
            for p in group["params"]:
                if p.requires_grad and id(p) not in state_dict["state"]:
                    p.grad = p.data.new(p.size()).zero_()
                    if isinstance(optimizer, torch.optim.SparseAdam) or id(p) in sparse_params:
                        p.grad = p.grad.to_sparse()
        # A DistributedOptimizer's own step() would reduce gradients, which only works if
        # every rank calls it: step the wrapped optimizer class directly.
        if getattr(optimizer, "_hvdrun_distributed", False):
            super(optimizer.__class__, optimizer).step()
        else:
            optimizer.step()
        state_dict = optimizer.state_dict()

    if len(state_dict["state"]) == 0:
        return  # a stateless optimizer: nothing to broadcast

    tensors = []
    scalars = {}
    setters = {}
    occurrences = collections.defaultdict(int)

    def set_option(index, key):
        def assign(v):
            optimizer.param_groups[index][key] = v
        return assign

    def set_state(pid, key):
        def assign(v):
            state_dict["state"][pid][key] = v
        return assign

    for index, group in enumerate(state_dict["param_groups"]):
        for key, value in group.items():
            if key == "params":
                continue
            name = f"{key}.{index}"
            scalars[name] = value
            setters[name] = set_option(index, key)
        for pid in group["params"]:
            if pid not in state_dict["state"]:
                continue
            for key, value in state_dict["state"][pid].items():
                occurrences[key] += 1
                name = f"{key}.{occurrences[key]}"
                if torch.is_tensor(value):
                    tensors.append((name, value))
                else:
                    scalars[name] = value
                    setters[name] = set_state(pid, key)

    broadcast_parameters(tensors, root_rank)
    scalars = broadcast_object(scalars, root_rank)
    # state_dict() shares the optimizer's per-parameter state dicts and tensors, so the
    # tensors were overwritten in place and the setters write into the live state.
    for name, value in scalars.items():
        setters[name](value)


def _dumps(obj):
    buf = io.BytesIO()
    _pickle.dump(obj, buf)
    return buf.getvalue()


class ObjectAuthError(RuntimeError):
    """An object collective received bytes that do not carry the job's MAC; nothing of
    them was unpickled."""


_TAG = 32
# Object collectives so far in each job this process joined (_job.joins(): every member
# joined it together, a rank that joined a running elastic job after a job of one too):
# every rank makes the same calls in the same order, so the count binds a payload to its
# call (no replay of an earlier one).
_calls = collections.Counter()
_key_cache = {}


def _object_key():
    """The key of object payloads: HMAC-SHA256(job secret, "hvdrun-objects"). Read once,
    so a program may remove HVDRUN_SECRET from its environment after the first call."""
    secret = os.environ.get("HVDRUN_SECRET", "")
    if secret not in _key_cache:
        if not secret:
            raise ObjectAuthError(
                "hvdrun.torch: HVDRUN_SECRET is not in this rank's environment, so objects "
                "from other ranks cannot be authenticated and are not unpickled; run the "
                "program under hvdrun, and keep HVDRUN_SECRET in the environment until the "
                "first object collective")
        try:
            raw = bytes.fromhex(secret)
        except ValueError:
            raise ObjectAuthError("hvdrun.torch: HVDRUN_SECRET is not the hex string hvdrun "
                                  "generated") from None
        _key_cache.clear()
        _key_cache[secret] = hmac.new(raw, b"hvdrun-objects", hashlib.sha256).digest()
    return _key_cache[secret]


def _next_call(ps=0):
    """(generation, process set, this call's number among that set's object collectives in
    the job joined last), the same on every member of the set."""
    gen, joined = generation(), _job.joins()
    _calls[(joined, ps)] += 1
    return gen, ps, _calls[(joined, ps)]


def _tag(key, what, call, sender, payload):
    gen, ps, number = call
    header = struct.pack(">QQiii", gen, number, ps, sender, _set_size(ps))
    return hmac.new(key, what + b"\0" + header + payload, hashlib.sha256).digest()


def _seal(what, call, payload):
    """`payload` with its tag in front, as rank() sends it."""
    if _set_size(call[1]) == 1:
        return payload  # nothing crosses a process boundary
    return _tag(_object_key(), what, call, rank(), payload) + payload


def _open(what, call, sender, sealed):
    """The pickled bytes of a sealed payload from `sender`, once its tag checks out."""
    if _set_size(call[1]) == 1:
        return sealed
    name = what.decode()
    if len(sealed) < _TAG:
        raise ObjectAuthError(f"hvdrun.torch.{name}: rank {sender}'s payload is "
                              f"{len(sealed)} bytes, too short to carry its MAC; not "
                              "unpickled")
    tag, payload = sealed[:_TAG], sealed[_TAG:]
    if not hmac.compare_digest(tag, _tag(_object_key(), what, call, sender, payload)):
        raise ObjectAuthError(
            f"hvdrun.torch.{name}: the object from rank {sender} failed its MAC check (its "
            "bytes were altered on the way, replayed from another call, or written by a "
            "process without the job secret); it was not unpickled (docs/security.md)")
    return payload


def broadcast_object(obj, root_rank=0, name=None, process_set=global_process_set):
    """Returns rank `root_rank`'s `obj` on every rank (pickled with cloudpickle, or
    pickle when cloudpickle is missing).

    Arguments:
        obj: any picklable object (only rank `root_rank`'s matters).
        root_rank: the rank whose object is sent.
        name: accepted for compatibility and ignored.
        process_set: the ranks to broadcast among (default: every rank); root_rank is a
            rank of the job in it.
    """
    call = _next_call(_check_process_set(process_set, "broadcast_object"))
    if rank() == root_rank:
        payload = torch.frombuffer(bytearray(_seal(b"broadcast_object", call, _dumps(obj))),
                                   dtype=torch.uint8)
        length = torch.tensor([payload.numel()], dtype=torch.int64)
        broadcast_(length, root_rank, process_set=process_set)
    else:
        length = torch.tensor([0], dtype=torch.int64)
        broadcast_(length, root_rank, process_set=process_set)
        payload = torch.empty(int(length.item()), dtype=torch.uint8)
    broadcast_(payload, root_rank, process_set=process_set)
    if rank() == root_rank:
        return obj
    return _pickle.loads(_open(b"broadcast_object", call, root_rank, payload.numpy().tobytes()))


def allgather_object(obj, name=None):
    """Returns the list of every rank's `obj`, in rank order (pickled with cloudpickle,
    or pickle when cloudpickle is missing).

    Arguments:
        obj: any picklable object.
        name: accepted for compatibility and ignored.
    """
    call = _next_call()
    payload = torch.frombuffer(bytearray(_seal(b"allgather_object", call, _dumps(obj))),
                               dtype=torch.uint8)
    lengths = allgather(torch.tensor([payload.numel()], dtype=torch.int64)).tolist()
    gathered = allgather(payload).numpy()
    # Every payload is checked before any is unpickled.
    pickled = []
    offset = 0
    for r in range(size()):
        pickled.append(_open(b"allgather_object", call, r,
                             gathered[offset: offset + lengths[r]].tobytes()))
        offset += lengths[r]
    return [_pickle.loads(p) for p in pickled]
