"""The check that Keras runs on the TensorFlow backend, which hvdrun's Keras support
(the DistributedOptimizer of _keras_optimizer.py, SyncBatchNormalization, hvdrun.keras)
needs: its collectives are TensorFlow ops. Keras is imported on the first check only, so
that importing hvdrun.tensorflow does not import it."""

_WHAT = "hvdrun.keras"


def _check_backend():
    import keras

    backend = keras.backend.backend()
    if backend != "tensorflow":
        raise NotImplementedError(
            f"{_WHAT}: Keras' {backend} backend is not supported; hvdrun's Keras support runs "
            "on the TensorFlow backend (KERAS_BACKEND=tensorflow). With the torch backend, use "
            "hvdrun.torch's DistributedOptimizer on the model's torch parameters")
