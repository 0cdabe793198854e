"""A Horovod elastic TensorFlow 2 program as Horovod's elastic TF2 example writes one: a
custom tf.function step with DistributedGradientTape, an optimizer whose slot variables
Keras creates on its first apply (SGD with momentum), TensorFlowKerasState, a reset
callback that rescales the learning rate, hvd.elastic.run. It reports what hvdrun's
in-process recovery does to it, so that a test can lose a host and let it come back.

Usage: elastic_join_worker.py DIR

Each process appends lines to DIR/pid-<pid>:
    start PID AGENT GEN RANK SIZE STEPS   when the training function (re)starts, after the sync
    step PID AGENT GEN RANK SIZE STEPS    after each commit
    final PID AGENT GEN RANK SIZE STEPS IDENTICAL   at the end (IDENTICAL: 1 when the model's
                                          and the optimizer's variables are the same on
                                          every rank)
AGENT is the parent process (the host's hvdrun agent). Training goes on until the file
DIR/stop exists at a commit (rank 0 decides, every rank stops at the same step). Each
rank's model starts from its own seed, so only the sync makes them equal."""
import os
import sys
import time

import numpy as np
import tensorflow as tf

import hvdrun.tensorflow as hvd
from hvdrun.tensorflow.mpi_ops import generation  # hvdrun's own: not in Horovod's API

COMMIT_EVERY = 3
PACE_S = 0.02  # between steps: the program's own pace on a shared machine
LR = 0.01

out_dir = sys.argv[1]
log = open(os.path.join(out_dir, f"pid-{os.getpid()}"), "a", buffering=1)

hvd.init()
tf.keras.utils.set_random_seed(100 + hvd.rank())
model = tf.keras.Sequential([tf.keras.Input((8,)), tf.keras.layers.Dense(4, activation="relu"),
                             tf.keras.layers.Dense(1)])
opt = tf.keras.optimizers.SGD(LR * hvd.size(), momentum=0.9)
x_all = np.linspace(-1.0, 1.0, 8 * 64, dtype=np.float32).reshape(64, 8)
y_all = np.sin(x_all.sum(axis=1, keepdims=True))


@tf.function
def train_step(x, y):
    with tf.GradientTape() as tape:
        loss = tf.reduce_mean(tf.square(model(x, training=True) - y))
    tape = hvd.DistributedGradientTape(tape)
    grads = tape.gradient(loss, model.trainable_variables)
    opt.apply_gradients(zip(grads, model.trainable_variables))
    return loss


state = hvd.elastic.TensorFlowKerasState(model, opt, steps=0)
state.register_reset_callbacks([lambda: opt.learning_rate.assign(LR * hvd.size())])


def variables():
    return np.concatenate([np.ravel(v.numpy()).astype(np.float64)
                           for v in model.variables + opt.variables])


def say(kind, *extra):
    fields = [kind, os.getpid(), os.getppid(), generation(), hvd.rank(), hvd.size(),
              state.steps] + list(extra)
    log.write(" ".join(str(f) for f in fields) + "\n")


@hvd.elastic.run
def train(state):
    say("start")
    while True:
        start = (state.steps * 4) % 64
        train_step(x_all[start:start + 4], y_all[start:start + 4])
        state.steps += 1
        if state.steps % COMMIT_EVERY == 0:
            state.commit()
            say("step")
            if hvd.broadcast_object(os.path.exists(os.path.join(out_dir, "stop"))):
                return
        time.sleep(PACE_S)


train(state)
final = variables()[None]
identical = all(np.array_equal(final[0], w) for w in hvd.allgather(final).numpy())
say("final", int(identical))
hvd.shutdown()
