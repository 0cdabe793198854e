"""A drop-in for `horovod.keras` on Keras 3 with the TensorFlow backend: change
`import horovod.keras as hvd` to `import hvdrun.keras as hvd`. See
docs/tensorflow.md for what is and is not provided."""
from hvdrun._keras.api import *  # noqa: F401,F403
from hvdrun._keras.api import __all__, unsupported as _unsupported  # noqa: F401
from hvdrun.keras import elastic  # noqa: F401


def __getattr__(name):
    error = _unsupported("hvdrun.keras", name)
    if error is not None:
        raise error
    raise AttributeError(f"module 'hvdrun.keras' has no attribute {name!r}")
