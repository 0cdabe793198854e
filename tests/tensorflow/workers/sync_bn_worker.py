"""One rank checking hvd.SyncBatchNormalization against Keras' BatchNormalization run in
this one process on every rank's batch together (rank r holds r + 1 rows, so the batches
differ in size): the output rows of this rank, the moving statistics, the gradient of the
input rows and, summed over the ranks, of gamma and beta; eagerly and in tf.function, for
a (N, 3) and a (N, 4, 4, 2) input; and with a mask over the time steps of a (N, 5, 3)
input, where only the masked-in positions count towards the statistics."""
import numpy as np
import tensorflow as tf

import hvdrun.tensorflow as hvd


def batch(rank, shape):
    rng = np.random.default_rng(7 + rank)
    return (rng.normal(rank, 1.0 + rank, (rank + 1,) + shape)).astype(np.float32)


def outputs_and_grads(layer, x, weights, mask=None):
    with tf.GradientTape() as tape:
        tape.watch(x)
        y = layer(x, training=True, mask=mask)
        loss = tf.reduce_sum(y * weights)
    gx, gamma, beta = tape.gradient(loss, [x, layer.gamma, layer.beta])
    return y, gx, gamma, beta


def close(got, want, what):
    if not np.allclose(got, want, rtol=1e-4, atol=1e-4):
        raise AssertionError(f"rank {hvd.rank()}: {what}: got {got}, want {want}")


def masks(xs):
    """Per rank, a mask over the time steps of its (rows, 5, 3) batch: a different pattern
    on each rank, and never a row with nothing masked in."""
    out = []
    for k, x in enumerate(xs):
        m = np.random.default_rng(11 + k).random(x.shape[:2]) < 0.6
        m[:, 0] = True
        out.append(m)
    return out


def check(shape, eager, masked=False):
    r, n = hvd.rank(), hvd.size()
    xs = [batch(k, shape) for k in range(n)]
    ms = masks(xs) if masked else None
    ws = [np.cos(np.arange(x.size, dtype=np.float32)).reshape(x.shape) * (k + 1)
          for k, x in enumerate(xs)]
    start = sum(len(x) for x in xs[:r])
    rows = slice(start, start + len(xs[r]))
    ref = tf.keras.layers.BatchNormalization(momentum=0.5)
    want = outputs_and_grads(ref, tf.constant(np.concatenate(xs)),
                             tf.constant(np.concatenate(ws)),
                             None if ms is None else tf.constant(np.concatenate(ms)))
    sync = hvd.SyncBatchNormalization(momentum=0.5)
    step = outputs_and_grads if eager else tf.function(outputs_and_grads)
    y, gx, gamma, beta = step(sync, tf.constant(xs[r]), tf.constant(ws[r]),
                              None if ms is None else tf.constant(ms[r]))
    mode = f"{shape} {'masked ' if masked else ''}{'eager' if eager else 'tf.function'}"
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
    for eager in (True, False):
        check((5, 3), eager, masked=True)
    print(f"rank {hvd.rank()}: sync batch normalization checks passed", flush=True)


if __name__ == "__main__":
    main()
