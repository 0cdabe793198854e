"""One rank of a Keras 3 program written as Horovod's
examples/tensorflow2/tensorflow2_keras_mnist.py, on synthetic data (each rank its own
shard), with only the import line changed and what Keras 3 itself requires (compile() no
longer takes experimental_run_tf_function, checkpoints end in .keras). After training it
checks that every rank holds the same weights, that the loss fell, and (rank 0) that
load_model restores the model with a distributed optimizer.
Usage: keras_worker.py EPOCHS CHECKPOINT_DIR"""
import os
import sys

import numpy as np
import tensorflow as tf

import hvdrun.tensorflow.keras as hvd


def synthetic_mnist(rank, count=1536):
    rng = np.random.default_rng(1234 + rank)
    labels = rng.integers(0, 10, count)
    images = rng.normal(0.0, 0.3, (count, 28, 28)).astype(np.float32)
    for k in range(10):  # a learnable pattern per class: a bright row
        images[labels == k, 2 * k + 3, :] += 1.0
    return images, labels


def main():
    epochs, ckpt_dir = int(sys.argv[1]), sys.argv[2]
    # Horovod: initialize Horovod.
    hvd.init()

    gpus = tf.config.experimental.list_physical_devices('GPU')
    for gpu in gpus:
        tf.config.experimental.set_memory_growth(gpu, True)
    if gpus:
        tf.config.experimental.set_visible_devices(gpus[hvd.local_rank()], 'GPU')

    mnist_images, mnist_labels = synthetic_mnist(hvd.rank())
    dataset = tf.data.Dataset.from_tensor_slices(
        (tf.cast(mnist_images[..., tf.newaxis], tf.float32), tf.cast(mnist_labels, tf.int64)))
    dataset = dataset.repeat().shuffle(10000, seed=hvd.rank()).batch(64)

    tf.keras.utils.set_random_seed(100 + hvd.rank())  # different initial weights per rank
    mnist_model = tf.keras.Sequential([
        tf.keras.layers.Conv2D(8, [3, 3], activation='relu'),
        tf.keras.layers.Conv2D(16, [3, 3], activation='relu'),
        tf.keras.layers.MaxPooling2D(pool_size=(2, 2)),
        tf.keras.layers.Dropout(0.25),
        tf.keras.layers.Flatten(),
        tf.keras.layers.Dense(32, activation='relu'),
        tf.keras.layers.Dropout(0.5),
        tf.keras.layers.Dense(10, activation='softmax')
    ])

    # Horovod: adjust learning rate based on number of GPUs.
    scaled_lr = 0.001 * hvd.size()
    opt = tf.optimizers.Adam(scaled_lr)

    # Horovod: add Horovod DistributedOptimizer.
    opt = hvd.DistributedOptimizer(
        opt, backward_passes_per_step=1, average_aggregated_gradients=True)

    mnist_model.compile(loss=tf.losses.SparseCategoricalCrossentropy(),
                        optimizer=opt,
                        metrics=['accuracy'])

    callbacks = [
        # Horovod: broadcast initial variable states from rank 0 to all other processes.
        hvd.callbacks.BroadcastGlobalVariablesCallback(0),
        # Horovod: average metrics among workers at the end of every epoch.
        hvd.callbacks.MetricAverageCallback(),
        # Horovod: warm the learning rate up over the first epochs.
        hvd.callbacks.LearningRateWarmupCallback(initial_lr=scaled_lr, warmup_epochs=2,
                                                 verbose=1),
    ]

    # Horovod: save checkpoints only on worker 0 to prevent other workers from corrupting them.
    if hvd.rank() == 0:
        callbacks.append(tf.keras.callbacks.ModelCheckpoint(
            os.path.join(ckpt_dir, 'checkpoint-{epoch}.keras')))

    # Horovod: write logs on worker 0.
    verbose = 2 if hvd.rank() == 0 else 0

    # Train the model.
    # Horovod: adjust number of steps based on number of GPUs.
    history = mnist_model.fit(dataset, steps_per_epoch=48 // hvd.size(), callbacks=callbacks,
                              epochs=epochs, verbose=verbose)

    check(mnist_model, history, ckpt_dir, epochs)


def check(model, history, ckpt_dir, epochs):
    r, n = hvd.rank(), hvd.size()
    loss = history.history["loss"]
    assert loss[-1] < loss[0] * 0.8, f"the loss did not fall: {loss}"
    # MetricAverageCallback: every rank's logs hold the same averages.
    mine = np.array([loss, history.history["accuracy"]], dtype=np.float64)
    every = hvd.allgather(mine[None]).numpy()
    assert (every == every[0]).all(), every
    # Identical weights on every rank, bit for bit.
    flat = np.concatenate([w.numpy().ravel() for w in model.weights])
    every = hvd.allgather(flat[None]).numpy()
    assert all((every[k] == every[0]).all() for k in range(n)), "weights differ between ranks"
    if r == 0:
        path = os.path.join(ckpt_dir, f"checkpoint-{epochs}.keras")
        restored = hvd.load_model(path)
        assert type(restored.optimizer).__name__ == "Adam", type(restored.optimizer)
        assert hasattr(restored.optimizer, "_hvdrun_reducer"), "optimizer not distributed"
        for a, b in zip(restored.weights, model.weights):
            assert np.array_equal(a.numpy(), b.numpy()), a.name
    check_backward_passes()
    check_broadcast_callback()
    print(f"rank {r}: keras loss {loss[0]:.3f} -> {loss[-1]:.3f}; keras checks passed",
          flush=True)


def check_backward_passes():
    """backward_passes_per_step=2: weights move on every second batch only, by the
    gradients of both batches summed over the passes and averaged over the ranks."""
    r, n = hvd.rank(), hvd.size()
    model = tf.keras.Sequential([tf.keras.Input((1,)),
                                 tf.keras.layers.Dense(1, use_bias=False,
                                                       kernel_initializer="zeros")])
    opt = hvd.DistributedOptimizer(tf.optimizers.SGD(1.0), backward_passes_per_step=2)
    model.compile(loss="mae", optimizer=opt)
    # loss = |w x - y| with w x < y: gradient -x per sample (the batch's mean).
    x = np.full((4, 1), float(r + 1), np.float32)
    y = np.full((4, 1), 1000.0, np.float32)  # far above w x: the gradient stays -x
    seen = []
    for _ in range(4):
        model.train_on_batch(x, y)
        seen.append(float(model.layers[0].kernel.numpy()[0, 0]))
    # Each apply: the sum of 2 passes' gradients (-2 (r+1)), averaged over ranks: -(n+1).
    want = n + 1.0
    assert seen == [0.0, want, want, 2 * want], seen
    assert int(opt.iterations.numpy()) == 4, int(opt.iterations.numpy())


def check_broadcast_callback():
    """BroadcastGlobalVariablesCallback, which has no batch end hook: once the first
    training step has built the optimizer, before the second batch, every variable but the
    local ones holds rank 0's value on every rank; the local ones keep this rank's own (a
    learning rate of 0 keeps the steps from moving them). A fit of one batch broadcasts
    at the epoch's end."""
    r = hvd.rank()
    # No batch end hook: one would make Keras 3 run every batch's callbacks synchronously.
    base, cls = tf.keras.callbacks.Callback, hvd.callbacks.BroadcastGlobalVariablesCallback
    for hook in ("on_batch_end", "on_train_batch_end"):
        assert getattr(cls, hook) is getattr(base, hook), f"{cls.__name__} overrides {hook}"
    x, y = np.ones((12, 3), np.float32), np.zeros((12, 2), np.float32)
    for batches in (3, 1):
        constant = tf.keras.initializers.Constant
        model = tf.keras.Sequential([
            tf.keras.Input((3,)),
            tf.keras.layers.Dense(3, kernel_initializer=constant(r)),
            tf.keras.layers.Dense(2, kernel_initializer=constant(10 + r))])
        opt = hvd.DistributedOptimizer(tf.optimizers.SGD(0.0, momentum=0.9))
        model.compile(loss="mse", optimizer=opt)
        local = model.layers[0].kernel
        broadcast = hvd.callbacks.BroadcastGlobalVariablesCallback(0, local_variables=[local])
        seen = {}

        class Probe(tf.keras.callbacks.Callback):
            def on_train_batch_begin(self, batch, logs=None):
                if broadcast.broadcast_done and not seen:
                    seen.update(batch=batch, local=local.numpy().copy(),
                                shared=model.layers[1].kernel.numpy().copy())

        model.fit(x[:4 * batches], y[:4 * batches], batch_size=4, epochs=1, verbose=0,
                  callbacks=[broadcast, Probe()])
        if batches == 1:
            assert broadcast.broadcast_done and not seen, seen
            seen.update(batch=1, local=local.numpy(), shared=model.layers[1].kernel.numpy())
        assert seen["batch"] == 1, seen
        assert (seen["local"] == r).all(), seen["local"]
        assert (seen["shared"] == 10).all(), seen["shared"]


if __name__ == '__main__':
    main()
