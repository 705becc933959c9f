"""
==========================================
Permutation tests with family-wise control
==========================================

Which targets does the model predict better than chance?
:class:`~skbatch.PermutationScorer` cross-validates the model on the true
responses and on permuted ones, for every target at once. Testing hundreds
of targets at 0.05 yields false positives by the dozen; the family-wise
p-values ``pvalue_fwer_`` (maximum statistic) keep the chance of even one
at 5%.
"""

# %%
# Data: 400 targets, 40 with signal
# ---------------------------------
import matplotlib.pyplot as plt
import numpy as np

from skbatch import BatchedRidge, PermutationScorer
from skbatch.plotting import PermutationTestDisplay

rng = np.random.default_rng(0)
n_samples, n_features, n_targets = 150, 10, 400
X = rng.standard_normal((n_samples, n_features))
has_signal = np.zeros(n_targets, dtype=bool)
has_signal[:40] = True
weights = rng.standard_normal((n_features, n_targets)) * has_signal
Y = 0.4 * X @ weights + rng.standard_normal((n_samples, n_targets)) * 2.0

# %%
# The test
# --------
# For ridge, permutations are extra targets through one decomposition per
# fold, so 200 permutations of 400 targets take seconds. ``return_null``
# keeps every permuted score, for the plots below; p-values do not need it.
perm = PermutationScorer(
    BatchedRidge(alphas=np.logspace(-1, 5, 13), cv="gcv"),
    n_permutations=200,
    cv=5,
    multioutput="raw_values",
    return_null=True,
    random_state=0,
).fit(X, Y)

for name, pvalue in [("uncorrected", perm.pvalue_), ("FWER", perm.pvalue_fwer_)]:
    significant = pvalue <= 0.05
    print(
        f"{name:>11}: {significant.sum():3d} significant, "
        f"{(significant & has_signal).sum():2d} of 40 true effects, "
        f"{(significant & ~has_signal).sum():2d} false positives"
    )

# %%
# Every target at once
# --------------------
# Observed cross-validated R² against the family-wise p-value; the dashed
# line is the 0.05 threshold. The p-values cannot go below
# ``1 / (n_permutations + 1)``.
PermutationTestDisplay.from_estimator(perm)
plt.show()

# %%
# One target's null distribution
# ------------------------------
# A target with signal, and one without.
fig, axes = plt.subplots(1, 2, figsize=(10, 4), layout="constrained")
PermutationTestDisplay.from_estimator(perm, target=0, ax=axes[0])
PermutationTestDisplay.from_estimator(perm, target=n_targets - 1, ax=axes[1])
plt.show()

# %%
# Where the family-wise threshold comes from
# ------------------------------------------
# For each permutation, take the best score over all 400 targets. A target
# is significant at 5% family-wise when its score beats 95% of these maxima:
# the threshold is far above that of any single target's null.
max_null = perm.permutation_scores_.max(axis=1)
threshold = np.quantile(max_null, 0.95)
fig, ax = plt.subplots()
ax.hist(
    perm.permutation_scores_[:, ~has_signal].ravel(),
    bins=60,
    density=True,
    alpha=0.6,
    label="permuted scores, all noise targets",
)
ax.hist(
    max_null,
    bins=30,
    density=True,
    alpha=0.6,
    label="max over targets, per permutation",
)
ax.axvline(
    threshold, color="black", linestyle="--", label=f"95% of the max: {threshold:.3f}"
)
ax.set_xlabel("cross-validated R²")
ax.legend()
plt.show()

# %%
# Within-block permutations
# -------------------------
# When rows come in blocks that are not exchangeable (runs, sessions), pass
# ``groups``: responses are permuted within each block only, and the blocks
# also reach the ``cv`` splitter.
from sklearn.model_selection import GroupKFold  # noqa: E402

runs = np.repeat(np.arange(5), n_samples // 5)
perm_runs = PermutationScorer(
    BatchedRidge(alphas=np.logspace(-1, 5, 13), cv="gcv"),
    n_permutations=100,
    cv=GroupKFold(n_splits=5),
    multioutput="raw_values",
    random_state=0,
).fit(X, Y[:, :50], groups=runs)
print(f"{(perm_runs.pvalue_fwer_ <= 0.05).sum()} of the first 50 targets significant")
