"""Horovod's elastic API for Keras (horovod.tensorflow.keras.elastic) on Keras 3: KerasState
and the callbacks that keep it current inside model.fit. hvdrun.keras.elastic and
hvdrun.tensorflow.keras.elastic import everything from here."""
import keras

from hvdrun.tensorflow.elastic import (HorovodInternalError, HostsUpdatedInterrupt,  # noqa: F401
                                       ObjectState, State, TensorFlowKerasState, run)


class KerasState(TensorFlowKerasState):
    """The state of a Keras model and its optimizer (default model.optimizer), with any
    picklable attributes given as keywords (epoch=0, batch=0, ...): committed to host
    memory, restored after a failed collective, broadcast from rank 0 by sync()."""

    def __init__(self, model, optimizer=None, **kwargs):
        super().__init__(model, optimizer=optimizer, backend=keras.backend, **kwargs)


class CommitStateCallback(keras.callbacks.Callback):
    """Commits `state` every `batches_per_commit` batches (counted from the start of each
    model.fit, so that every rank commits at the same batch after a reset) and at the end
    of every epoch. A commit copies the model and optimizer to host memory and is a
    collective (it checks for host updates)."""

    def __init__(self, state, batches_per_commit=1):
        super().__init__()
        self.state = state
        self.batches_per_commit = batches_per_commit
        self.batches_remaining = batches_per_commit

    def on_train_begin(self, logs=None):
        self.batches_remaining = self.batches_per_commit

    def on_train_batch_end(self, batch, logs=None):
        self.batches_remaining -= 1
        if self.batches_remaining == 0:
            self.commit()
            self.batches_remaining = self.batches_per_commit

    def on_epoch_end(self, epoch, logs=None):
        self.commit()

    def commit(self):
        self.state.commit()


class UpdateBatchStateCallback(keras.callbacks.Callback):
    """Keeps `state.batch` at the index of the last finished batch of the epoch, 0 at the
    end of an epoch. With steps_per_epoch, self.params["steps"] of the first epoch after a
    reset is shortened by the batches already done, as Horovod's; Keras 3 does not read it
    back and runs the steps model.fit was given, so a program that resumes mid-epoch
    passes steps_per_epoch - state.batch itself."""

    def __init__(self, state):
        super().__init__()
        self.state = state
        self.steps_per_epoch = None

    def on_train_begin(self, logs=None):
        self.steps_per_epoch = None

    def on_epoch_begin(self, epoch, logs=None):
        if self.params.get("steps"):
            if self.steps_per_epoch is None:
                self.steps_per_epoch = self.params.get("steps")
            self.params["steps"] = self.steps_per_epoch - self.state.batch

    def on_train_batch_end(self, batch, logs=None):
        self.state.batch = batch

    def on_epoch_end(self, epoch, logs=None):
        self.state.batch = 0


class UpdateEpochStateCallback(keras.callbacks.Callback):
    """Keeps `state.epoch` at the number of finished epochs across resets: Keras counts
    from 0 (or initial_epoch) in every model.fit, the state from where the job began."""

    def __init__(self, state):
        super().__init__()
        self.state = state
        self.initial_epoch = self.state.epoch

    def on_train_begin(self, logs=None):
        self.initial_epoch = self.state.epoch

    def on_epoch_end(self, epoch, logs=None):
        # +1: the epoch is done, so a reset after state.batch went back to 0 starts the next.
        self.state.epoch = self.initial_epoch + epoch + 1


__all__ = ["CommitStateCallback", "HorovodInternalError", "HostsUpdatedInterrupt", "KerasState",
           "ObjectState", "State", "UpdateBatchStateCallback", "UpdateEpochStateCallback", "run"]
