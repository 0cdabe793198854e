"""Horovod's Keras callbacks for Keras 3 (horovod._keras.callbacks): broadcasting the
initial state, averaging metrics, and the learning-rate schedule and warm-up of Goyal et
al. (arXiv:1706.02677) that Horovod's examples use."""
import warnings

import keras
import numpy as np

import hvdrun.tensorflow as _hvd


class BroadcastGlobalVariablesCallback(keras.callbacks.Callback):
    """Broadcasts the model's and the optimizer's variables from `root_rank` once both
    exist, so every rank continues from the same state: the start of training, or a
    checkpoint restored on the root.

    That is before the first batch when the optimizer is already built (a restored or
    loaded model), and otherwise before the second batch, once the first training step
    has built it: after the first batch, as Horovod does (or at the end of the epoch, if
    it had only one batch). The hooks are a batch *begin* hook and an epoch end hook on
    purpose: a callback with a batch end hook makes Keras 3 hand every batch's logs to the
    callbacks synchronously, on every step of the whole fit, where otherwise a background
    thread takes them."""

    def __init__(self, root_rank, device="", local_variables=None):
        super().__init__()
        self.root_rank = root_rank
        self.device = device
        self.broadcast_done = False
        self._local_vars = set()
        for v in local_variables or []:
            self.register_local_var(v)

    def register_local_var(self, var):
        """A variable left as each rank has it."""
        self._local_vars.add(id(var))

    def on_train_batch_begin(self, batch, logs=None):
        optimizer = getattr(self.model, "optimizer", None)
        if not self.broadcast_done and (optimizer is None or optimizer.built):
            self._broadcast()

    def on_epoch_end(self, epoch, logs=None):
        if not self.broadcast_done:
            self._broadcast()

    def _broadcast(self):
        model_vars = [v for v in self.model.variables if id(v) not in self._local_vars]
        _hvd.broadcast_variables(model_vars, root_rank=self.root_rank)
        optimizer = getattr(self.model, "optimizer", None)
        if optimizer is not None:
            _hvd.broadcast_variables(optimizer.variables, root_rank=self.root_rank)
        self.broadcast_done = True


class MetricAverageCallback(keras.callbacks.Callback):
    """Replaces every metric in the epoch's logs by its average over the ranks (put it
    before callbacks that read metrics: ReduceLROnPlateau, TensorBoard, checkpoints)."""

    def __init__(self, device=""):
        super().__init__()
        self.device = device

    def on_epoch_end(self, epoch, logs=None):
        if not logs:
            return
        # Sorted by name, so every rank reduces the same metrics in the same order.
        for metric in sorted(logs):
            value = np.asarray(logs[metric], dtype=np.float64)
            logs[metric] = float(_hvd.allreduce(value, op=_hvd.Average).numpy())


def _learning_rate(optimizer):
    return float(np.asarray(optimizer.learning_rate))


class LearningRateScheduleCallback(keras.callbacks.Callback):
    """Sets the learning rate to initial_lr * multiplier(epoch) from start_epoch until
    end_epoch: at each epoch's first batch (staircase) or at every batch with fractional
    epochs. `multiplier` is a function of the epoch or a number (then decay by that factor
    per epoch). Momentum correction scales a momentum that is a variable by new/old rate
    for the batch; Keras 3's SGD keeps momentum as a Python number compiled into the train
    step, so there it is left alone (with a warning)."""

    def __init__(self, initial_lr, multiplier, start_epoch=0, end_epoch=None, staircase=True,
                 momentum_correction=True, steps_per_epoch=None):
        super().__init__()
        if initial_lr is None:
            raise ValueError("Parameter `initial_lr` is required")
        self.initial_lr = initial_lr
        self.start_epoch = start_epoch
        self.end_epoch = end_epoch
        self.staircase = staircase
        self.momentum_correction = momentum_correction
        self.steps_per_epoch = steps_per_epoch
        self.current_epoch = None
        self.restore_momentum = None
        self._warned = False
        if not callable(multiplier):
            factor = multiplier
            self.multiplier = lambda epoch: factor ** (epoch - start_epoch)
        else:
            self.multiplier = multiplier

    def _autodetect_steps_per_epoch(self):
        if self.params.get("steps"):
            return self.params["steps"]
        raise ValueError("Could not autodetect the number of steps per epoch. Please specify "
                         f"the steps_per_epoch parameter to the {type(self).__name__}().")

    def _adjust_learning_rate(self, epoch):
        opt = self.model.optimizer
        old_lr = _learning_rate(opt)
        new_lr = self.initial_lr * self.multiplier(epoch)
        opt.learning_rate = new_lr
        if self.momentum_correction and hasattr(opt, "momentum") and old_lr > 0:
            momentum = getattr(opt, "momentum")
            if hasattr(momentum, "assign"):
                self.restore_momentum = float(np.asarray(momentum))
                momentum.assign(self.restore_momentum * new_lr / old_lr)
            elif not self._warned:
                self._warned = True
                warnings.warn(f"{type(self).__name__}: momentum_correction is skipped: "
                              f"{type(opt).__name__}.momentum is a Python number fixed in the "
                              "compiled train step", stacklevel=2)

    def _restore_momentum_if_needed(self):
        if self.restore_momentum is not None:
            self.model.optimizer.momentum.assign(self.restore_momentum)
            self.restore_momentum = None

    def on_train_begin(self, logs=None):
        if not self.staircase and not self.steps_per_epoch:
            self.steps_per_epoch = self._autodetect_steps_per_epoch()

    def on_epoch_begin(self, epoch, logs=None):
        self.current_epoch = epoch

    def on_batch_begin(self, batch, logs=None):
        if (self.current_epoch < self.start_epoch or
                (self.end_epoch is not None and self.current_epoch >= self.end_epoch)):
            return
        if self.staircase and batch == 0:
            self._adjust_learning_rate(self.current_epoch)
        elif not self.staircase:
            self._adjust_learning_rate(self.current_epoch + float(batch) / self.steps_per_epoch)

    def on_batch_end(self, batch, logs=None):
        self._restore_momentum_if_needed()

    def on_epoch_end(self, epoch, logs=None):
        if logs is not None:
            logs["lr"] = _learning_rate(self.model.optimizer)


class LearningRateWarmupCallback(LearningRateScheduleCallback):
    """Raises the learning rate from initial_lr / size() to initial_lr over
    `warmup_epochs` epochs, batch by batch (Horovod's warm-up for a rate scaled by
    size())."""

    def __init__(self, initial_lr, warmup_epochs=5, momentum_correction=True,
                 steps_per_epoch=None, verbose=0):
        def multiplier(epoch):
            # Shifted so the rate reaches round values at the ends of epochs, as Horovod's.
            epoch += 1.0 / self.steps_per_epoch
            return 1.0 / _hvd.size() * (epoch * (_hvd.size() - 1) / warmup_epochs + 1)

        super().__init__(initial_lr, multiplier, start_epoch=0, end_epoch=warmup_epochs,
                         staircase=False, momentum_correction=momentum_correction,
                         steps_per_epoch=steps_per_epoch)
        self.verbose = verbose

    def on_epoch_end(self, epoch, logs=None):
        super().on_epoch_end(epoch, logs)
        if epoch == self.end_epoch - 1 and self.verbose > 0 and _hvd.rank() == 0:
            print(f"\nEpoch {epoch + 1}: finished gradual learning rate warmup to "
                  f"{_learning_rate(self.model.optimizer):g}.")
