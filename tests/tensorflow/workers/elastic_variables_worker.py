"""hvd.elastic.TensorFlowState on a list of tf.Variable, without a training loop: sync()
makes every rank's variables and attributes rank 0's, restore() goes back to the last
commit (the sync's, then a later commit's), and a host update recorded on rank 0 (whose view
every rank takes) interrupts both ranks at the same commit. Prints what it saw."""
import time

import numpy as np
import tensorflow as tf

import hvdrun.tensorflow as hvd
from hvdrun import _elastic

hvd.init()
r = hvd.rank()
weights = [tf.Variable(np.full((2, 2), 1.0 + r)), tf.Variable(np.full((2,), 1.0 + r))]
state = hvd.elastic.TensorFlowState(weights, batch=20 + r, epoch=10 + r)
seen = []


def values():
    return [float(v.numpy().sum()) for v in weights] + [state.batch, state.epoch]


state.sync()
seen.append(("synced", values()))
for v in weights:
    v.assign(v * 5)
state.batch, state.epoch = 21, 11
state.restore()
seen.append(("restored", values()))
for v in weights:
    v.assign(v * 5)
state.batch, state.epoch = 21, 11
state.commit()
for v in weights:
    v.assign(v * 0)
state.restore()
seen.append(("committed", values()))
if r == 0:
    state.on_hosts_updated(time.time(), _elastic.HOSTS_REMOVED)
try:
    state.commit()
    seen.append(("no interrupt",))
except hvd.elastic.HostsUpdatedInterrupt as e:
    seen.append(("interrupted", e.skip_sync))
print(f"rank {r} seen={seen}", flush=True)
hvd.shutdown()
