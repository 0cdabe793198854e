"""One rank of a custom training loop as Horovod's TensorFlow 2 examples write it: a
tf.function step with hvd.DistributedGradientTape, broadcast_variables after the first
step, a Keras model on synthetic data (each rank its own shard). Checks that the loss fell
and that every rank ends with the same weights. Usage: tape_worker.py STEPS"""
import sys

import numpy as np
import tensorflow as tf

import hvdrun.tensorflow as hvd

hvd.init()
steps = int(sys.argv[1])
rng = np.random.default_rng(7 + hvd.rank())
true_w = np.linspace(-1.0, 1.0, 16).astype(np.float32)
x = rng.normal(size=(1024, 16)).astype(np.float32)
y = (x @ true_w + 0.5 > 0).astype(np.int64)
dataset = tf.data.Dataset.from_tensor_slices((x, y)).repeat().shuffle(1000).batch(32)

tf.keras.utils.set_random_seed(hvd.rank())
model = tf.keras.Sequential([tf.keras.Input((16,)), tf.keras.layers.Dense(32, activation="relu"),
                             tf.keras.layers.Dense(2)])
loss_fn = tf.losses.SparseCategoricalCrossentropy(from_logits=True)
opt = tf.optimizers.SGD(0.05 * hvd.size(), momentum=0.9)


@tf.function
def training_step(images, labels, first_batch):
    with tf.GradientTape() as tape:
        loss_value = loss_fn(labels, model(images, training=True))
    # Horovod: add Horovod Distributed GradientTape.
    tape = hvd.DistributedGradientTape(tape)
    grads = tape.gradient(loss_value, model.trainable_variables)
    opt.apply_gradients(zip(grads, model.trainable_variables))
    # Horovod: broadcast initial variable states from rank 0 to all other processes.
    if first_batch:
        hvd.broadcast_variables(model.variables, root_rank=0)
        hvd.broadcast_variables(opt.variables, root_rank=0)
    return loss_value


losses = []
for batch, (images, labels) in enumerate(dataset.take(steps)):
    losses.append(float(training_step(images, labels, batch == 0)))
first, last = np.mean(losses[:5]), np.mean(losses[-5:])
assert last < first * 0.8, f"the loss did not fall: {losses}"
flat = np.concatenate([w.numpy().ravel() for w in model.weights])
every = hvd.allgather(flat[None]).numpy()
assert all((every[k] == every[0]).all() for k in range(hvd.size())), "weights differ"
print(f"rank {hvd.rank()}: tape loss {first:.3f} -> {last:.3f}; tape checks passed", flush=True)
