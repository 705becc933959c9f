"""
=============================
Quickstart: an encoding model
=============================

An encoding model predicts many responses (fMRI voxels, electrodes, genes:
"targets") from the same features (of stimuli, of conditions). Targets
differ in how much signal they carry, so the best regularisation differs
too. :class:`~skbatch.BatchedRidge` fits all targets at once, from one
decomposition of the features, and chooses an alpha for each target by
exact leave-one-out cross-validation.
"""

# %%
# Simulated data
# --------------
# 3,000 targets respond to 30 features. A third of them carry a signal whose
# strength varies from weak to strong; the others are pure noise.
import matplotlib.pyplot as plt
import numpy as np

from skbatch import BatchedRidge

rng = np.random.default_rng(0)
n_samples, n_features, n_targets = 400, 30, 3000
X = rng.standard_normal((n_samples, n_features))
weights = rng.standard_normal((n_features, n_targets)) / np.sqrt(n_features)
has_signal = rng.random(n_targets) < 1 / 3
true_r2 = np.where(has_signal, rng.uniform(0.02, 0.6, n_targets), 0.0)
# Scale each target's signal so that it explains true_r2 of its variance.
signal = X @ weights * np.sqrt(true_r2 / (1 - true_r2))
Y = signal + rng.standard_normal((n_samples, n_targets))

# The last 100 samples are held out to measure prediction accuracy.
X_train, X_test = X[:300], X[300:]
Y_train, Y_test = Y[:300], Y[300:]

# %%
# Fit, one alpha per target
# -------------------------
# ``alphas`` is the grid to choose from; ``cv=None`` (the default) is exact
# leave-one-out, the criterion of scikit-learn's ``RidgeCV``.
alphas = np.logspace(-1, 5, 13)
model = BatchedRidge(alphas=alphas).fit(X_train, Y_train)
print("coef_:", model.coef_.shape, " alpha_:", model.alpha_.shape)

test_r2 = model.score_per_target(X_test, Y_test)
for name, mask in [("with signal", has_signal), ("noise only", ~has_signal)]:
    print(f"median held-out R², targets {name}: {np.median(test_r2[mask]):.3f}")

# %%
# One alpha for all targets instead
# ---------------------------------
# ``alpha_per_target=False`` picks the single alpha that is best on average.
# It over-regularises strong targets and under-regularises noisy ones.
shared = BatchedRidge(alphas=alphas, alpha_per_target=False).fit(X_train, Y_train)
shared_r2 = shared.score_per_target(X_test, Y_test)
print(f"shared alpha: {shared.alpha_:g}")
print(
    "mean held-out R² over targets with signal: "
    f"{test_r2[has_signal].mean():.3f} per-target alpha, "
    f"{shared_r2[has_signal].mean():.3f} shared alpha"
)

# %%
# The chosen alphas follow the signal
# -----------------------------------
# Weak signals get strong regularisation, and noise targets the largest
# alphas of the grid: their best prediction is close to a constant.
fig, (ax_alpha, ax_r2) = plt.subplots(1, 2, figsize=(10, 4), layout="constrained")
ax_alpha.scatter(true_r2[has_signal], model.alpha_[has_signal], s=6, alpha=0.5)
ax_alpha.set_xlabel("true R² of the target")
ax_alpha.set_ylabel("alpha chosen by leave-one-out")
ax_alpha.set_yscale("log")
ax_alpha.set_title(f"{has_signal.sum()} targets with signal")

ax_r2.scatter(shared_r2[has_signal], test_r2[has_signal], s=6, alpha=0.5)
lims = [min(shared_r2.min(), test_r2.min()), max(shared_r2.max(), test_r2.max())]
ax_r2.plot(lims, lims, color="black", linewidth=1)
ax_r2.set_xlabel(f"held-out R², shared alpha = {shared.alpha_:g}")
ax_r2.set_ylabel("held-out R², per-target alpha")
ax_r2.set_title("Prediction accuracy of each target")
plt.show()

# %%
# Where next
# ----------
# Which of these targets are predicted better than chance? See
# :ref:`sphx_glr_auto_examples_plot_permutation_fwer.py`. How certain are the
# weights? See :ref:`sphx_glr_auto_examples_plot_bootstrap_intervals.py`.
