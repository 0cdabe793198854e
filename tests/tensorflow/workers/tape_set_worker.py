"""One rank of hvd.DistributedGradientTape over a process set of ranks 0 and 1, at np 3:
the members' gradients are averaged over the set, and rank 2, outside it, keeps its own
(as in Horovod: no collective and no error). Prints "rank R: tape set checks passed"."""
import numpy as np
import tensorflow as tf

import hvdrun.tensorflow as hvd

hvd.init()
r = hvd.rank()
MEMBERS = [0, 1]
ps = hvd.add_process_set(MEMBERS)
w = tf.Variable(np.arange(4, dtype=np.float32))
x = tf.constant(np.full(4, r + 1, dtype=np.float32))


def gradient(process_set):
    with tf.GradientTape() as tape:
        loss = tf.reduce_sum(w * x)
    if process_set is not None:
        tape = hvd.DistributedGradientTape(tape, process_set=process_set)
    return tape.gradient(loss, [w])[0].numpy()


own = gradient(None)
got = gradient(ps)
mean = np.mean([k + 1 for k in MEMBERS])
want = np.full(4, mean, dtype=np.float32) if r in MEMBERS else own
assert np.array_equal(got, want), (r, got, want)
assert hvd.remove_process_set(ps)
print(f"rank {r}: tape set checks passed", flush=True)
