"""Object collectives unpickle only authenticated bytes. Rank 0 plays whatever got bytes
into the collective without the job's MAC (a writer into an inter-host pair): it sends what
broadcast_object and allgather_object send, but with a tag made without the secret, or a
genuine payload of an earlier call (a replay), and the pickle inside would create the file
argv[1] when unpickled. Every other rank must raise ObjectAuthError naming rank 0 and go on;
genuine calls before and after must work. Each rank prints what it saw."""
import os
import pickle
import sys

import torch

import hvdrun.torch as hvd
from hvdrun.torch import functions

marker = sys.argv[1]


class Plant:
    def __reduce__(self):
        return (open, (marker, "w"))


EVIL = pickle.dumps(Plant())


def as_tensor(blob):
    return torch.frombuffer(bytearray(blob), dtype=torch.uint8)


def send_broadcast(blob):
    """Rank 0's side of one broadcast_object, with `blob` as the sealed payload."""
    functions._next_call()  # keeps rank 0's count of object calls in step with the others
    hvd.broadcast_(torch.tensor([len(blob)], dtype=torch.int64), 0)
    hvd.broadcast_(as_tensor(blob), 0)


def try_receive(what, fn):
    try:
        value = fn()
        print(f"{what}: UNPICKLED {value!r}", flush=True)
    except functions.ObjectAuthError as e:
        print(f"{what}: refused: {e}", flush=True)


hvd.init()
r = hvd.rank()
assert hvd.broadcast_object({"v": 1}, 0) == {"v": 1}  # genuine

# 1. A tag made without the secret.
if r == 0:
    send_broadcast(os.urandom(32) + EVIL)
else:
    try_receive("forged broadcast", lambda: hvd.broadcast_object(None, 0))

# 2. A replay: the genuine sealed payload of call 1, sent again at call 3.
if r == 0:
    first = functions._seal(b"broadcast_object", (hvd.generation(), 0, 1),
                            functions._dumps({"v": 1}))
    send_broadcast(first)
else:
    try_receive("replayed broadcast", lambda: hvd.broadcast_object(None, 0))

# 3. allgather_object: rank 0's part forged, the others' genuine.
if r == 0:
    functions._next_call()
    forged = os.urandom(32) + EVIL
    hvd.allgather(torch.tensor([len(forged)], dtype=torch.int64))
    hvd.allgather(as_tensor(forged))
else:
    try_receive("forged allgather", lambda: hvd.allgather_object(r))

# 4. A payload too short to carry a MAC.
if r == 0:
    send_broadcast(b"\x80")
else:
    try_receive("short broadcast", lambda: hvd.broadcast_object(None, 0))

# Genuine calls still agree afterwards.
assert hvd.broadcast_object(("after", 5), 0) == ("after", 5)
assert hvd.allgather_object(r * 10) == [k * 10 for k in range(hvd.size())]
hvd.shutdown()
print(f"rank {r}: done, planted file exists: {os.path.exists(marker)}", flush=True)
