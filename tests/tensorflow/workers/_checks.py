"""What the TensorFlow workers compare with: a result against expected values, and a
function run both eagerly and as a tf.function."""
import numpy as np
import tensorflow as tf


def check(got, want, what, tol=0.0):
    """Asserts that `got` has `want`'s shape and values (within `tol`), naming `what`."""
    got = np.asarray(got, dtype=np.float64)
    assert got.shape == np.shape(want), (what, got.shape, np.shape(want))
    assert np.allclose(got, want, rtol=tol, atol=tol), (what, got, want)


def both(fn):
    """fn run eagerly and as a tf.function (results as NumPy)."""
    eager = tf.nest.map_structure(lambda t: t.numpy(), fn())
    graph = tf.nest.map_structure(lambda t: t.numpy(), tf.function(fn, autograph=False)())
    return [("eager", eager), ("graph", graph)]
