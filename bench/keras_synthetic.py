"""One worker of bench/keras_synthetic.sh: training samples per second of one small Keras
model (the CNN of Horovod's tensorflow2_keras_mnist.py) on synthetic 28x28 images, batch
BATCH per worker, in one of three ways:
  hvdrun-fit   under hvdrun: model.fit with hvdrun.tensorflow.keras' DistributedOptimizer
  hvdrun-loop  under hvdrun: a tf.function step with hvd.DistributedGradientTape
  mwms         TensorFlow's MultiWorkerMirroredStrategy (TF_CONFIG set by the script): the
               same step through strategy.run (Keras 3's model.fit fails under this strategy
               as released, keras-team/keras#20585, so both loops are the comparison)
Rank/worker 0 prints "result impl=... np=... samples_per_s=..." : every worker's samples
over the timed steps (after WARMUP), median of 3 timed windows.
Usage: bench/keras_synthetic.py IMPL [STEPS=60] [BATCH=64]"""
import os
import statistics
import sys
import time

import numpy as np
import tensorflow as tf

WARMUP = 10


def model_fn():
    return tf.keras.Sequential([
        tf.keras.Input((28, 28, 1)),
        tf.keras.layers.Conv2D(32, [3, 3], activation="relu"),
        tf.keras.layers.Conv2D(64, [3, 3], activation="relu"),
        tf.keras.layers.MaxPooling2D(pool_size=(2, 2)),
        tf.keras.layers.Flatten(),
        tf.keras.layers.Dense(128, activation="relu"),
        tf.keras.layers.Dense(10),
    ])


def data(batch):
    rng = np.random.default_rng(0)
    x = rng.random((batch, 28, 28, 1), dtype=np.float32)
    y = rng.integers(0, 10, batch)
    return tf.constant(x), tf.constant(y)


class EpochClock(tf.keras.callbacks.Callback):
    """The seconds of each epoch of a fit (from its first batch to the end of its last,
    the batch-end callbacks included)."""

    def __init__(self):
        super().__init__()
        self.seconds = []
        self._t0 = None

    def on_epoch_begin(self, epoch, logs=None):
        self._t0 = time.perf_counter()

    def on_epoch_end(self, epoch, logs=None):
        self.seconds.append(time.perf_counter() - self._t0)


def timed(step, steps):
    for _ in range(WARMUP):
        step()
    windows = []
    for _ in range(3):
        t0 = time.perf_counter()
        for _ in range(steps):
            out = step()
        float(out)
        windows.append(time.perf_counter() - t0)
    return statistics.median(windows)


def main():
    impl = sys.argv[1]
    steps = int(sys.argv[2]) if len(sys.argv) > 2 else 60
    batch = int(sys.argv[3]) if len(sys.argv) > 3 else 64
    # The strategy must exist before any TensorFlow op runs.
    strategy = tf.distribute.MultiWorkerMirroredStrategy() if impl == "mwms" else None
    loss_fn = tf.keras.losses.SparseCategoricalCrossentropy(from_logits=True)
    x, y = data(batch)
    if impl.startswith("hvdrun"):
        import hvdrun.tensorflow.keras as hvd_keras
        import hvdrun.tensorflow as hvd
        hvd.init()
        rank, n = hvd.rank(), hvd.size()
        model = model_fn()
        opt = tf.optimizers.SGD(0.01)
        if impl == "hvdrun-fit":
            model.compile(loss=loss_fn, optimizer=hvd_keras.DistributedOptimizer(opt))
            ds = tf.data.Dataset.from_tensors((x, y)).repeat()
            model.fit(ds, steps_per_epoch=WARMUP, epochs=1, verbose=0)
            # Timed as the loops are: windows of STEPS steps inside one fit (its epochs),
            # not whole fit calls, whose set-up and tear-down happen once per fit (the
            # tf.data iterator's tear-down alone can take seconds; see docs/tensorflow.md).
            clock = EpochClock()
            model.fit(ds, steps_per_epoch=steps, epochs=3, verbose=0, callbacks=[
                hvd_keras.callbacks.BroadcastGlobalVariablesCallback(0), clock])
            seconds = statistics.median(clock.seconds)
        else:
            @tf.function
            def train():
                with tf.GradientTape() as tape:
                    loss = loss_fn(y, model(x, training=True))
                tape = hvd.DistributedGradientTape(tape)
                grads = tape.gradient(loss, model.trainable_variables)
                opt.apply_gradients(zip(grads, model.trainable_variables))
                return loss

            train()
            hvd.broadcast_variables(model.variables, root_rank=0)
            seconds = timed(train, steps)
    elif impl == "mwms":
        import json
        task = json.loads(os.environ["TF_CONFIG"])["task"]
        rank, n = task["index"], strategy.num_replicas_in_sync
        with strategy.scope():
            model = model_fn()
            opt = tf.optimizers.SGD(0.01)

        def replica_step():
            with tf.GradientTape() as tape:
                per_example = tf.keras.losses.sparse_categorical_crossentropy(
                    y, model(x, training=True), from_logits=True)
                loss = tf.nn.compute_average_loss(per_example, global_batch_size=batch * n)
            grads = tape.gradient(loss, model.trainable_variables)
            opt.apply_gradients(zip(grads, model.trainable_variables))
            return loss

        @tf.function
        def train():
            losses = strategy.run(replica_step)
            return strategy.reduce(tf.distribute.ReduceOp.SUM, losses, axis=None)

        seconds = timed(train, steps)
    else:
        sys.exit(f"keras_synthetic.py: unknown implementation {impl!r}")
    if rank == 0:
        print(f"result impl={impl} np={n} samples_per_s={n * batch * steps / seconds:.1f}",
              flush=True)


if __name__ == "__main__":
    main()
