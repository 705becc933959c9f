"""
===============================
Memory budgets and OOM recovery
===============================

skbatch sizes every batch from a memory budget and recovers from
out-of-memory errors by splitting the batch that failed. Neither changes
the result. This example shrinks the budget, simulates out-of-memory errors
on the CPU, and shows the plan each fit records in ``fit_report_``.
"""

# %%
# The budget of this machine
# --------------------------
import time

import matplotlib.pyplot as plt
import numpy as np

from skbatch import BatchedRidge, PermutationScorer, auto_batch_size, memory_budget
from skbatch.testing import simulate_oom

print(f"host budget: {memory_budget():.1f} GB")
print(f"host budget for batches: {memory_budget(for_batching=True):.1f} GB")

# How many items of 1 MB fit in 0.1 GB, and in how many batches 1,000 run:
print(auto_batch_size(1000, 1e6, budget_gb=0.1))

# %%
# Seeing the plan
# ---------------
# Every fit records how it ran in ``fit_report_``: per loop of the engine,
# the items, the batch size, the batches run, the out-of-memory splits, the
# planned peak memory against the budget, and the time. ``verbose=1``
# prints the same figures as the fit runs.
rng = np.random.default_rng(0)
X = rng.standard_normal((200, 50))
Y = X @ rng.standard_normal((50, 20_000)) + rng.standard_normal((200, 20_000))
alphas = np.logspace(-1, 5, 13)

reference = BatchedRidge(alphas=alphas).fit(X, Y)
print(reference.fit_report_)

# %%
# A smaller budget: more, smaller batches, the same model
# -------------------------------------------------------
budgets = [1.0, 0.1, 0.04, 0.02]
n_batches, seconds = [], []
for budget in budgets:
    start = time.perf_counter()
    model = BatchedRidge(alphas=alphas, max_memory_gb=budget).fit(X, Y)
    seconds.append(time.perf_counter() - start)
    (stage,) = model.fit_report_.stages
    n_batches.append(stage.n_batches)
    assert np.array_equal(model.alpha_, reference.alpha_)
    # Equal to the last digits: batches of another size may sum in another
    # order, which moves near-zero weights by ~1e-16 (weights are of order 1).
    np.testing.assert_allclose(model.coef_, reference.coef_, rtol=0, atol=1e-12)
    print(
        f"max_memory_gb={budget:<5} {stage.batch_size:5d} targets per batch, "
        f"{stage.n_batches:3d} batch{'' if stage.n_batches == 1 else 'es'}, "
        f"{seconds[-1]:.2f} s"
    )

fig, ax = plt.subplots(figsize=(6, 3.5), layout="constrained")
ax.bar([str(b) for b in budgets], n_batches)
ax.set_xlabel("max_memory_gb")
ax.set_ylabel("batches of targets")
ax.set_title("20,000 targets, the same coefficients at every budget")
plt.show()

# %%
# Out-of-memory errors, simulated
# -------------------------------
# On a GPU, free memory changes while a fit runs, so a planned batch can
# still fail. :func:`skbatch.testing.simulate_oom` makes every batch larger
# than ``max_items`` raise a CUDA-style out-of-memory error, so the recovery
# runs on any machine: the batch is split, the halves retried, and later
# batches start at the size that worked.
with simulate_oom(max_items=1500):
    recovered = BatchedRidge(alphas=alphas).fit(X, Y)
np.testing.assert_allclose(recovered.coef_, reference.coef_, rtol=0, atol=1e-12)
print(recovered.fit_report_)
print("same coefficients after recovery")

# %%
# Errors before work, not after
# -----------------------------
# Keeping every permuted score of a large test needs memory; the estimator
# checks before it starts and says which knob to turn.
try:
    PermutationScorer(
        n_permutations=1_000_000,
        multioutput="raw_values",
        return_null=True,
        max_memory_gb=0.5,
    ).fit(X, Y)
except ValueError as exc:
    print(exc)
