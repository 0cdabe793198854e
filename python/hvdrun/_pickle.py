"""Objects as bytes for broadcast_object and allgather_object: cloudpickle when installed
(it carries lambdas and classes defined in __main__, as Horovod's does), else pickle."""
import pickle

try:
    import cloudpickle as _pickler
except ImportError:  # pragma: no cover - cloudpickle is a dependency of the package
    _pickler = pickle


def dumps(obj):
    """`obj` as bytes."""
    return _pickler.dumps(obj)


def loads(data):
    """The object `data` was made from (only ever data from the job's own ranks)."""
    return pickle.loads(data)
