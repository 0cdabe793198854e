"""Horovod's elastic API for Keras (`horovod.tensorflow.keras.elastic` in Horovod) on Keras 3:
KerasState, CommitStateCallback, UpdateBatchStateCallback, UpdateEpochStateCallback, run."""
from hvdrun._keras.elastic import *  # noqa: F401,F403
from hvdrun._keras.elastic import __all__  # noqa: F401
