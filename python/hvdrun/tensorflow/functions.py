"""Variables and Python objects across ranks (horovod.tensorflow.functions):
broadcast_variables, broadcast_object and allgather_object."""
import numpy as np
import tensorflow as tf

from hvdrun import _pickle
from hvdrun.tensorflow.mpi_ops import (_check_process_set, allgather, broadcast,
                                       global_process_set)

_broadcast_fns = {}


def _broadcast_group(variables, root_rank, process_set):
    # One tf.function per set of variables (as Horovod's): TensorFlow then submits every
    # broadcast at once and libhvdrun runs them back to back, instead of one eager
    # round trip per variable.
    key = (tuple(id(v) for v in variables), root_rank,  # Keras 3 variables lack ref()
           process_set.process_set_id)
    fn = _broadcast_fns.get(key)
    if fn is None:
        @tf.function(autograph=False)
        def fn():
            for v in variables:
                v.assign(broadcast(v, root_rank, process_set=process_set))
        _broadcast_fns[key] = fn
    fn()


def broadcast_variables(variables, root_rank, process_set=global_process_set, inplace=False):
    """Overwrites `variables` on every rank with rank `root_rank`'s values (model weights
    at the start of training, or after restoring a checkpoint on the root)."""
    _check_process_set(process_set, "broadcast_variables")
    variables = list(variables)
    if not variables:
        return None
    if tf.executing_eagerly():
        return _broadcast_group(variables, root_rank, process_set)
    return tf.group(*[v.assign(broadcast(v, root_rank, process_set=process_set))
                      for v in variables])


def _numpy(t, session):
    """The value of `t`: eagerly its own; in a TF1-style graph, run in `session` (or the
    default session), as Horovod's object functions do."""
    if tf.executing_eagerly():
        return t.numpy()
    session = session or tf.compat.v1.get_default_session()
    if session is None:
        raise ValueError("hvdrun.tensorflow: in graph mode, pass session= or run under a "
                         "default session")
    return session.run(t)


def _object_name(name, ps):
    """An object collective's name; within a process set other than every rank's it
    carries the set's id, so sets that overlap do not share names in flight."""
    return name if ps == 0 else f"{name}@{ps}"


def broadcast_object(obj, root_rank=0, session=None, name=None,
                     process_set=global_process_set):
    """Rank `root_rank`'s `obj` on every rank (pickled)."""
    ps = _check_process_set(process_set, "broadcast_object")
    name = _object_name(name or type(obj).__name__, ps)
    from hvdrun.tensorflow.mpi_ops import rank
    if rank() == root_rank:
        data = np.frombuffer(_pickle.dumps(obj), dtype=np.uint8)
        sz = np.array([data.size], dtype=np.int64)
    else:
        data, sz = None, np.array([0], dtype=np.int64)
    n = int(_numpy(broadcast(tf.constant(sz), root_rank, name + ".sz",
                             process_set=process_set), session)[0])
    if data is None:
        data = np.zeros(n, dtype=np.uint8)
    out = _numpy(broadcast(tf.constant(data), root_rank, name + ".t",
                           process_set=process_set), session)
    return _pickle.loads(out.tobytes())


def allgather_object(obj, session=None, name=None, process_set=global_process_set):
    """Every rank's `obj`, as a list in rank order (pickled)."""
    ps = _check_process_set(process_set, "allgather_object")
    name = _object_name(name or type(obj).__name__, ps)
    data = np.frombuffer(_pickle.dumps(obj), dtype=np.uint8)
    sizes = _numpy(allgather(tf.constant([data.size], dtype=tf.int64), name + ".sz",
                             process_set=process_set), session)
    gathered = _numpy(allgather(tf.constant(data), name + ".t", process_set=process_set),
                      session).tobytes()
    out, at = [], 0
    for s in sizes:
        out.append(_pickle.loads(gathered[at:at + int(s)]))
        at += int(s)
    return out
