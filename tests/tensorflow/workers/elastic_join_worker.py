"""A Horovod elastic TensorFlow 2 program as Horovod's elastic TF2 examples write one, in
one of two forms: `loop`, a custom tf.function step with DistributedGradientTape and
TensorFlowKerasState, one step of which runs before hvd.elastic.run (Horovod's TF2
elastic example: "run one batch to initialize weights before synchronization"; a rank
that joins a running job runs it alone); `fit`, Keras' model.fit with DistributedOptimizer, KerasState and
the three elastic callbacks. Both use an optimizer whose slot variables Keras creates on
its first apply (SGD with momentum) and a reset callback that rescales the learning rate.
The worker reports what hvdrun's in-process recovery does to it, so that a test can lose
a host and let it come back.

Usage: elastic_join_worker.py DIR loop|fit

Each process appends lines to DIR/pid-<pid>:
    warm-up PID AGENT GEN RANK SIZE       after the step before hvd.elastic.run (loop only)
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
import hvdrun.tensorflow.keras as hvd_keras
from hvdrun.tensorflow.mpi_ops import generation  # hvdrun's own: not in Horovod's API

COMMIT_EVERY = 3
PACE_S = 0.02  # between steps: the program's own pace on a shared machine
LR = 0.01

out_dir, mode = sys.argv[1:3]
log = open(os.path.join(out_dir, f"pid-{os.getpid()}"), "a", buffering=1)

hvd.init()
tf.keras.utils.set_random_seed(100 + hvd.rank())
model = tf.keras.Sequential([tf.keras.Input((8,)), tf.keras.layers.Dense(4, activation="relu"),
                             tf.keras.layers.Dense(1)])
opt = tf.keras.optimizers.SGD(LR * hvd.size(), momentum=0.9)
if mode == "fit":
    opt = hvd_keras.DistributedOptimizer(opt)
    model.compile(loss="mse", optimizer=opt)
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


if mode == "loop":
    train_step(x_all[:4], y_all[:4])
    log.write(f"warm-up {os.getpid()} {os.getppid()} {generation()} {hvd.rank()} {hvd.size()}\n")

if mode == "fit":
    state = hvd_keras.elastic.KerasState(model, batch=0, epoch=0, steps=0)
else:
    state = hvd.elastic.TensorFlowKerasState(model, opt, steps=0)
state.register_reset_callbacks([lambda: opt.learning_rate.assign(LR * hvd.size())])


def variables():
    return np.concatenate([np.ravel(v.numpy()).astype(np.float64)
                           for v in model.variables + opt.variables])


def say(kind, *extra):
    fields = [kind, os.getpid(), os.getppid(), generation(), hvd.rank(), hvd.size(),
              state.steps] + list(extra)
    log.write(" ".join(str(f) for f in fields) + "\n")


def committed():
    """After a commit: records it; True when rank 0 saw the stop file."""
    say("step")
    return hvd.broadcast_object(os.path.exists(os.path.join(out_dir, "stop")))


@hvd.elastic.run
def train_loop(state):
    say("start")
    while True:
        start = (state.steps * 4) % 64
        train_step(x_all[start:start + 4], y_all[start:start + 4])
        state.steps += 1
        if state.steps % COMMIT_EVERY == 0:
            state.commit()
            if committed():
                return
        time.sleep(PACE_S)


class CountSteps(tf.keras.callbacks.Callback):
    def on_train_batch_end(self, batch, logs=None):
        state.steps += 1


class AfterCommit(tf.keras.callbacks.Callback):
    def on_train_batch_end(self, batch, logs=None):
        # CommitStateCallback, before this one, has just committed every COMMIT_EVERY
        # batches of this fit; steps are a multiple of it at every fit's start.
        if state.steps % COMMIT_EVERY == 0 and committed():
            self.model.stop_training = True
        time.sleep(PACE_S)


@hvd_keras.elastic.run
def train_fit(state):
    say("start")
    dataset = tf.data.Dataset.from_tensor_slices((x_all, y_all)).repeat().batch(4)
    model.fit(dataset, steps_per_epoch=6, epochs=10000 - state.epoch, verbose=0, callbacks=[
        hvd_keras.elastic.UpdateEpochStateCallback(state),
        hvd_keras.elastic.UpdateBatchStateCallback(state), CountSteps(),
        hvd_keras.elastic.CommitStateCallback(state, COMMIT_EVERY), AfterCommit()])


(train_fit if mode == "fit" else train_loop)(state)
final = variables()[None]
identical = all(np.array_equal(final[0], w) for w in hvd.allgather(final).numpy())
say("final", int(identical))
hvd.shutdown()
