"""A Horovod elastic training program for TensorFlow 2 (a custom tf.function loop with
DistributedGradientTape, hvd.elastic.run and TensorFlowKerasState), with two events
injected at fixed steps:

- step FAIL_AT: every rank issues an allreduce whose shape differs by rank, which fails on
  every rank; hvd.elastic.run must restore the last commit (the step counter, the model's
  weights and the optimizer's momentum as they were then), re-initialise and go on;
- step HOSTS_AT: rank 0 records a host update; the next commit must raise
  HostsUpdatedInterrupt on every rank, and run re-initialises without restoring.

Each rank's model starts from its own seed, so only the sync makes them equal. At the end
every rank prints its pid at start and end, what it saw, and whether the weights are the
same on every rank."""
import os
import time

import numpy as np
import tensorflow as tf

import hvdrun.tensorflow as hvd
from hvdrun import _elastic

COMMIT_EVERY = 3
FAIL_AT = 5
HOSTS_AT = 8
STEPS = 24
BATCH = 4

pid = os.getpid()
hvd.init()
tf.keras.utils.set_random_seed(100 + hvd.rank())
model = tf.keras.Sequential([tf.keras.Input((4,)), tf.keras.layers.Dense(1)])
opt = tf.keras.optimizers.SGD(0.1, momentum=0.9)
x_all = np.arange(384, dtype=np.float32).reshape(96, 4) / 384
y_all = np.arange(96, dtype=np.float32).reshape(96, 1) / 96

events = []
committed = {}  # the step and variables at the last commit, kept outside the state


def snapshot():
    return np.concatenate([np.ravel(v.numpy()) for v in model.variables + opt.variables])


def on_reset():
    events.append(f"reset size={hvd.size()} steps={state.steps}")


@tf.function
def train_step(x, y):
    with tf.GradientTape() as tape:
        loss = tf.reduce_mean(tf.square(model(x, training=True) - y))
    tape = hvd.DistributedGradientTape(tape)
    grads = tape.gradient(loss, model.trainable_variables)
    opt.apply_gradients(zip(grads, model.trainable_variables))
    return loss


state = hvd.elastic.TensorFlowKerasState(model, opt, steps=0)
state.register_reset_callbacks([on_reset])
failed = hosts_updated = False


@hvd.elastic.run
def train(state):
    global failed, hosts_updated
    if len(events) >= 2 and events[-2].startswith("fail") and "restored" not in events[-1]:
        # After the failure: the state is the last commit's (and rank 0's, after the sync).
        same = np.array_equal(snapshot(), committed["values"])
        events[-1] += f" restored={state.steps} as_committed={same}"
    while state.steps < STEPS:
        start = ((state.steps * hvd.size() + hvd.rank()) * BATCH) % 96
        train_step(x_all[start:start + BATCH], y_all[start:start + BATCH])
        state.steps += 1
        if state.steps == FAIL_AT and not failed:
            failed = True
            events.append(f"fail at steps={state.steps}")
            hvd.allreduce(tf.ones(1 + hvd.rank()), name="injected.mismatch")
        if state.steps == HOSTS_AT and not hosts_updated and hvd.rank() == 0:
            hosts_updated = True
            state.on_hosts_updated(time.time(), _elastic.HOSTS_ADDED)
        if state.steps % COMMIT_EVERY == 0:
            committed.update(steps=state.steps, values=snapshot())
            try:
                state.commit()
            except hvd.elastic.HostsUpdatedInterrupt:
                events.append(f"hosts updated at steps={state.steps}")
                raise
    return state.steps


steps = train(state)
final = snapshot()[None]
same = all(np.array_equal(final[0], w) for w in hvd.allgather(final).numpy())
print(f"rank {hvd.rank()} pids {pid}->{os.getpid()} steps={steps} identical={same} "
      f"events={events}", flush=True)
hvd.shutdown()
