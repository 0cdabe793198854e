"""A rank that fails during training: rank 1 raises inside a Keras callback after the
first epoch while the other ranks go on training (their next collectives wait for it).
The job must end with rank 1's traceback named by the launcher, not hang."""
import time

import numpy as np
import tensorflow as tf

import hvdrun.tensorflow.keras as hvd


class Fail(tf.keras.callbacks.Callback):
    def on_epoch_end(self, epoch, logs=None):
        if hvd.rank() == 1:
            print(f"failing at {time.monotonic()}", flush=True)
            raise RuntimeError("deliberate failure on rank 1 in a Keras callback")


hvd.init()
x = np.random.default_rng(hvd.rank()).normal(size=(256, 4)).astype(np.float32)
y = x.sum(axis=1, keepdims=True)
model = tf.keras.Sequential([tf.keras.Input((4,)), tf.keras.layers.Dense(1)])
model.compile(loss="mse", optimizer=hvd.DistributedOptimizer(tf.optimizers.SGD(0.01)))
model.fit(x, y, batch_size=16, epochs=50, verbose=0,
          callbacks=[hvd.callbacks.BroadcastGlobalVariablesCallback(0), Fail()])
print("trained all epochs: the failure did not stop the job", flush=True)
