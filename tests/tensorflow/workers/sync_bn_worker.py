"""One rank checking hvd.SyncBatchNormalization against Keras' BatchNormalization run in
this one process on every rank's batch together (rank r holds r + 1 rows, so the batches
differ in size): the output rows of this rank, the moving statistics, the gradient of the
input rows and, summed over the ranks, of gamma and beta; eagerly and in tf.function, for
a (N, 3) and a (N, 4, 4, 2) input."""
import numpy as np
import tensorflow as tf

import hvdrun.tensorflow as hvd


def batch(rank, shape):
    rng = np.random.default_rng(7 + rank)
    return (rng.normal(rank, 1.0 + rank, (rank + 1,) + shape)).astype(np.float32)


def outputs_and_grads(layer, x, weights):
    with tf.GradientTape() as tape:
        tape.watch(x)
        y = layer(x, training=True)
        loss = tf.reduce_sum(y * weights)
    gx, gamma, beta = tape.gradient(loss, [x, layer.gamma, layer.beta])
    return y, gx, gamma, beta


def close(got, want, what):
    if not np.allclose(got, want, rtol=1e-4, atol=1e-4):
        raise AssertionError(f"rank {hvd.rank()}: {what}: got {got}, want {want}")


def check(shape, eager):
    r, n = hvd.rank(), hvd.size()
    xs = [batch(k, shape) for k in range(n)]
    ws = [np.cos(np.arange(x.size, dtype=np.float32)).reshape(x.shape) * (k + 1)
          for k, x in enumerate(xs)]
    start = sum(len(x) for x in xs[:r])
    rows = slice(start, start + len(xs[r]))
    ref = tf.keras.layers.BatchNormalization(momentum=0.5)
    want = outputs_and_grads(ref, tf.constant(np.concatenate(xs)),
                             tf.constant(np.concatenate(ws)))
    sync = hvd.SyncBatchNormalization(momentum=0.5)
    step = outputs_and_grads if eager else tf.function(outputs_and_grads)
    y, gx, gamma, beta = step(sync, tf.constant(xs[r]), tf.constant(ws[r]))
    mode = f"{shape} {'eager' if eager else 'tf.function'}"
    close(y.numpy(), want[0].numpy()[rows], f"{mode} output")
    close(gx.numpy(), want[1].numpy()[rows], f"{mode} input gradient")
    close(hvd.allreduce(gamma, op=hvd.Sum).numpy(), want[2].numpy(), f"{mode} gamma gradient")
    close(hvd.allreduce(beta, op=hvd.Sum).numpy(), want[3].numpy(), f"{mode} beta gradient")
    close(sync.moving_mean.numpy(), ref.moving_mean.numpy(), f"{mode} moving mean")
    close(sync.moving_variance.numpy(), ref.moving_variance.numpy(), f"{mode} moving variance")
    # Inference uses the moving statistics: no collective, this rank's rows only.
    close(sync(tf.constant(xs[r]), training=False).numpy(),
          ref(tf.constant(xs[r]), training=False).numpy(), f"{mode} inference")


def main():
    hvd.init()
    for shape in ((3,), (4, 4, 2)):
        for eager in (True, False):
            check(shape, eager)
    print(f"rank {hvd.rank()}: sync batch normalization checks passed", flush=True)


if __name__ == "__main__":
    main()
