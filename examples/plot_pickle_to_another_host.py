"""
================================
Pickling a model to another host
================================

A model fitted on a GPU server should load on a laptop. skbatch stores
fitted arrays as host numpy and records the device in ``backend_`` as two
strings, so the pickle loads anywhere. Computing through a device the new
host lacks raises an error that says how to move the model; nothing moves
without being asked.

This page has no GPU, so the GPU server is simulated: the model is fitted
on the CPU and then *declared* to compute on ``cuda:0`` with
:meth:`~skbatch.BatchedRidge.to_device`, which is what a model fitted with
``device="cuda"`` looks like.
"""

# %%
# "On the GPU server"
# -------------------
import pickle

import matplotlib.pyplot as plt
import numpy as np

from skbatch import Backend, BatchedRidge

rng = np.random.default_rng(0)
X = rng.standard_normal((300, 20))
Y = X @ rng.standard_normal((20, 500)) + rng.standard_normal((300, 500))
model = BatchedRidge(alphas=np.logspace(-1, 5, 13)).fit(X, Y)
expected = model.predict(X)

# A model fitted with device="cuda" records this backend:
model.to_device(Backend("torch", "cuda:0"))
print("backend_:", model.backend_)
payload = pickle.dumps(model)
print(f"pickle: {len(payload) / 1e6:.1f} MB")

# %%
# "On the laptop"
# ---------------
# Unpickling never touches a device: it works without a GPU and without
# torch. The fitted arrays are plain numpy.
restored = pickle.loads(payload)
print("backend_:", restored.backend_)
print("coef_:", type(restored.coef_).__name__, restored.coef_.shape)

# %%
# Run-or-raise: computing on the missing device fails with instructions,
# rather than silently running somewhere else.
try:
    restored.predict(X)
except RuntimeError as exc:
    print(exc)

# %%
# The explicit move. ``to_device`` copies nothing: the arrays are already
# on the host, only ``backend_`` changes.
restored.to_device("cpu")
print("backend_:", restored.backend_)
np.testing.assert_allclose(restored.predict(X), expected)
print("same predictions as on the server")

# %%
# The same holds for the wrappers: :class:`~skbatch.BootstrapEstimator` and
# :class:`~skbatch.PermutationScorer` store numpy results, and their
# ``to_device`` also moves the ``estimator_`` they wrap.
fig, ax = plt.subplots(figsize=(5, 4), layout="constrained")
ax.scatter(expected[:, 0], restored.predict(X)[:, 0], s=8)
ax.set_xlabel("prediction before pickling (target 0)")
ax.set_ylabel("prediction after pickling and to_device('cpu')")
plt.show()
