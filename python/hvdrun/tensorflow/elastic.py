"""Horovod's elastic API for TensorFlow 2 (`horovod.tensorflow.elastic`): `hvd.elastic.run`,
TensorFlowKerasState (a Keras model and its optimizer), TensorFlowState (a list of
variables), ObjectState, HostsUpdatedInterrupt. States live in host memory: commit()
copies them, restore() goes back to the last commit after a failed collective, sync()
broadcasts rank 0's. docs/tensorflow.md and docs/elastic.md say what survives what."""
import functools

import tensorflow as tf

from hvdrun._elastic import HostsUpdatedInterrupt, State, bound_object_state, framework_run
from hvdrun.tensorflow.functions import broadcast_object, broadcast_variables
from hvdrun.tensorflow.mpi_ops import HorovodInternalError, init, rank, shutdown

_WHAT = "hvdrun.tensorflow"


ObjectState = bound_object_state(broadcast_object, rank, __name__)


def _is_collective_failure(error):
    # hvdrun's kernels fail with FailedPreconditionError, naming the op (HvdrunAllreduce,
    # HvdrunBroadcast, ...) in the message eagerly and inside tf.function.
    return isinstance(error, tf.errors.FailedPreconditionError) and "Hvdrun" in str(error)


def run(func):
    """Decorates `func(state, ...)`, a training function whose first argument is a State:
    the state is synced from rank 0 before it runs; a failed collective (an hvdrun op's
    error inside TensorFlow, or HorovodInternalError) restores the last commit,
    re-initialises hvdrun.tensorflow (shutdown(), init()) and runs `func` again;
    HostsUpdatedInterrupt does the same without the restore. `func` must not be a
    collective itself: ranks that join would meet it while the others sync."""

    @functools.wraps(func)
    def translated(state, *args, **kwargs):
        try:
            return func(state, *args, **kwargs)
        except tf.errors.OpError as e:
            if _is_collective_failure(e):
                raise HorovodInternalError(f"{_WHAT}: a collective failed: {e.message}") from e
            raise

    return framework_run(translated, _WHAT, init, shutdown, HorovodInternalError)


class _VariablesState(ObjectState):
    """A list of variables (returned by `variables()`, asked at every use, so that an
    optimizer's slots created after the state are included) saved as host copies,
    assigned back by restore() and broadcast from rank 0 by sync(), beside the picklable
    attributes of ObjectState."""

    def __init__(self, variables, **kwargs):
        self._variables = variables
        self._saved_values = []
        self._save_variables()
        super().__init__(**kwargs)

    def save(self):
        self._save_variables()
        super().save()

    def restore(self):
        for var, value in self._saved_values:
            var.assign(value)
        super().restore()

    def sync(self):
        broadcast_variables(self._variables(), root_rank=0)
        self._save_variables()
        super().sync()

    def _save_variables(self):
        self._saved_values = [(var, tf.identity(var)) for var in self._variables()]


def _optimizer_variables(optimizer):
    if optimizer is None:
        return []
    variables = optimizer.variables
    return list(variables() if callable(variables) else variables)


def _build_optimizer(optimizer, variables):
    """Creates `optimizer`'s slot variables (momentum, Adam's moments) for `variables`
    where Keras has not yet: it creates them on the first apply, so a rank that trained
    has them and a rank that joins the job, or has not stepped yet, does not, and the
    ranks would broadcast different lists of variables (each rank's sync meeting the
    others' in a different collective, and the job stalling). Built as Keras builds it
    in `apply`, in the optimizer's name scope."""
    if optimizer is None or getattr(optimizer, "built", True) or not hasattr(optimizer, "build"):
        return
    import keras

    with keras.name_scope(optimizer.name, caller=optimizer):
        optimizer.build(variables)
    optimizer.built = True


class TensorFlowKerasState(_VariablesState):
    """The state of a Keras model and its optimizer (Keras 3 or tf.keras), with any
    picklable attributes given as keywords (epoch=0, batch=0, ...).

    Arguments:
        model: a built Keras model (model.build(input_shape) or called once).
        optimizer: its optimizer; default model.optimizer (set by compile()).
        backend: Horovod's TF1 session provider; accepted and unused (eager only).
        kwargs: further attributes of the state.
    """

    def __init__(self, model, optimizer=None, backend=None, **kwargs):
        if not getattr(model, "built", True):
            raise ValueError("Model must be built first. Run `model.build(input_shape)`.")
        self.model = model
        self.optimizer = optimizer or getattr(model, "optimizer", None)
        self.backend = backend
        super().__init__(
            lambda: list(self.model.variables) + _optimizer_variables(self.optimizer), **kwargs)

    def sync(self):
        """Broadcasts rank 0's model and optimizer variables (and attributes) to every rank,
        having built the optimizer for the model's trainable variables if it is not yet
        built, so that every rank has the same variables to broadcast (a rank that joins
        a running job has no slot variables until it steps; rank 0 has)."""
        _build_optimizer(self.optimizer, self.model.trainable_variables)
        super().sync()


class TensorFlowState(_VariablesState):
    """The state of a list of tf.Variable (eager TensorFlow 2), with any picklable
    attributes given as keywords.

    Arguments:
        variables: the variables to track (required: TensorFlow 2 has no global list).
        session: Horovod's TF1 session; must be None.
        kwargs: further attributes of the state.
    """

    def __init__(self, variables=None, session=None, **kwargs):
        if session is not None or not tf.executing_eagerly():
            raise NotImplementedError(f"{_WHAT}.elastic.TensorFlowState: TF1 sessions and "
                                      "graph mode are not supported; use it eagerly")
        if variables is None:
            raise ValueError(f"{_WHAT}.elastic.TensorFlowState: pass the variables to track "
                             "(TensorFlow 2 has no global variable list)")
        self.variables = list(variables)
        self.session = None
        super().__init__(lambda: self.variables, **kwargs)


__all__ = ["HorovodInternalError", "HostsUpdatedInterrupt", "ObjectState", "State",
           "TensorFlowKerasState", "TensorFlowState", "run"]
