"""Horovod's Keras callbacks (`horovod.keras.callbacks`) for Keras 3."""
from hvdrun._keras.callbacks import (BroadcastGlobalVariablesCallback,  # noqa: F401
                                     LearningRateScheduleCallback, LearningRateWarmupCallback,
                                     MetricAverageCallback)
