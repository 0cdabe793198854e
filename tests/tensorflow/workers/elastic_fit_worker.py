"""A Horovod elastic Keras program (model.fit under hvd.elastic.run with KerasState and
the three elastic callbacks, as Horovod's elastic Keras example writes it), with a failed
collective injected from a callback at one batch of epoch FAIL_EPOCH: hvd.elastic.run
must restore the last commit (the model, the optimizer, state.epoch and state.batch) and
call model.fit again for the epochs left. Checks that it trained every epoch, committed
as the callbacks say, the loss fell and every rank ends with the same weights."""
import numpy as np
import tensorflow as tf

import hvdrun.tensorflow.keras as hvd

EPOCHS = 4
STEPS_PER_EPOCH = 6
BATCHES_PER_COMMIT = 2
FAIL_EPOCH, FAIL_BATCH = 2, 2

hvd.init()
rng = np.random.default_rng(7 + hvd.rank())
x = rng.normal(size=(512, 8)).astype(np.float32)
y = (x @ np.linspace(-1.0, 1.0, 8).astype(np.float32))[:, None]
dataset = tf.data.Dataset.from_tensor_slices((x, y)).repeat().batch(16)

tf.keras.utils.set_random_seed(100 + hvd.rank())
model = tf.keras.Sequential([tf.keras.Input((8,)), tf.keras.layers.Dense(16, activation="relu"),
                             tf.keras.layers.Dense(1)])
opt = hvd.DistributedOptimizer(tf.keras.optimizers.SGD(0.01 * hvd.size(), momentum=0.9))
model.compile(loss="mse", optimizer=opt)
state = hvd.elastic.KerasState(model, batch=0, epoch=0)
saves = []
resets = []
failed = False
_save = state.save


def counted_save():
    saves.append((state.epoch, state.batch))
    _save()


state.save = counted_save
state.register_reset_callbacks([lambda: resets.append((state.epoch, state.batch))])


class InjectFailure(tf.keras.callbacks.Callback):
    def on_train_batch_end(self, batch, logs=None):
        global failed
        if state.epoch == FAIL_EPOCH and batch == FAIL_BATCH and not failed:
            failed = True
            hvd.allreduce(np.ones(1 + hvd.rank(), np.float32), name="injected.mismatch")


@hvd.elastic.run
def train(state):
    history = model.fit(dataset, steps_per_epoch=STEPS_PER_EPOCH, epochs=EPOCHS - state.epoch,
                        verbose=0, callbacks=[
                            hvd.elastic.UpdateEpochStateCallback(state),
                            hvd.elastic.UpdateBatchStateCallback(state),
                            hvd.elastic.CommitStateCallback(state, BATCHES_PER_COMMIT),
                            InjectFailure()])
    return history.history["loss"]


losses = train(state)
final = np.concatenate([w.numpy().ravel() for w in model.weights])[None]
same = all(np.array_equal(final[0], w) for w in hvd.allgather(final).numpy())
print(f"rank {hvd.rank()} epoch={state.epoch} batch={state.batch} identical={same} "
      f"losses={[round(v, 4) for v in losses]} resets={resets} saves={saves}", flush=True)
hvd.shutdown()
