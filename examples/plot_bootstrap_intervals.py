"""
==============================
Bootstrap confidence intervals
==============================

How certain is each weight of a fitted model?
:class:`~skbatch.BootstrapEstimator` refits the model on resamples of the
rows and reports a standard error and a confidence interval for each fitted
attribute. Linear models take a batched path: a batch of replicates costs
one weighted Gram matrix and solve.
"""

# %%
# Data with known weights
# -----------------------
import matplotlib.pyplot as plt
import numpy as np
from sklearn.linear_model import Ridge

from skbatch import BatchedRidge, BootstrapEstimator
from skbatch.plotting import BootstrapDisplay

rng = np.random.default_rng(0)
n_samples, n_features = 200, 12
X = rng.standard_normal((n_samples, n_features))
true_coef = np.zeros(n_features)
true_coef[:5] = [2.0, -1.5, 1.0, 0.5, -0.3]
y = X @ true_coef + 1.5 * rng.standard_normal(n_samples)

# %%
# Intervals of every weight
# -------------------------
boot = BootstrapEstimator(Ridge(alpha=1.0), n_bootstrap=1000, random_state=0)
boot.fit(X, y)
coef = boot.results_["coef_"]
for j in range(n_features):
    print(
        f"x{j:<3} estimate {coef.estimate[j]:6.3f}  SE {coef.standard_error[j]:.3f}"
        f"  95% CI [{coef.ci_lower[j]:6.3f}, {coef.ci_upper[j]:6.3f}]"
        f"  true {true_coef[j]:5.2f}"
    )

# %%
# The display draws the ``top_k`` largest estimates, sorted, with their
# intervals; here with the true weights on top.
display = BootstrapDisplay.from_estimator(boot, top_k=n_features)
display.ax_.plot(
    true_coef[display.indices_],
    np.arange(n_features),
    "x",
    color="tab:red",
    label="true weight",
)
display.ax_.legend()
plt.show()

# %%
# Percentile or basic intervals
# -----------------------------
# ``ci_method="basic"`` reflects the percentile interval around the
# estimate. The replicates are the same (same ``random_state``), only the
# interval differs.
basic = BootstrapEstimator(
    Ridge(alpha=1.0), n_bootstrap=1000, ci_method="basic", random_state=0
).fit(X, y)
print("percentile:", np.round(coef.ci_lower[:3], 3), np.round(coef.ci_upper[:3], 3))
print(
    "basic:     ",
    np.round(basic.results_["coef_"].ci_lower[:3], 3),
    np.round(basic.results_["coef_"].ci_upper[:3], 3),
)

# %%
# Clustered rows: resample whole groups
# -------------------------------------
# Rows from the same subject share a subject effect, so they are not
# independent. Resampling rows ignores that and gives intervals that are too
# narrow; passing ``groups`` resamples whole subjects.
n_subjects = 20
subject = np.repeat(np.arange(n_subjects), n_samples // n_subjects)
subject_slope = rng.normal(0.0, 0.8, n_subjects)
y_clustered = y + subject_slope[subject] * X[:, 0]

rows = BootstrapEstimator(Ridge(alpha=1.0), n_bootstrap=500, random_state=0)
rows.fit(X, y_clustered)
clusters = BootstrapEstimator(Ridge(alpha=1.0), n_bootstrap=500, random_state=0)
clusters.fit(X, y_clustered, groups=subject)
for name, est in [("rows", rows), ("subjects", clusters)]:
    result = est.results_["coef_"]
    print(
        f"resampling {name:>8}: 95% CI of x0 "
        f"[{result.ci_lower[0]:.3f}, {result.ci_upper[0]:.3f}]"
    )

# %%
# Many targets at once
# --------------------
# With a :class:`~skbatch.BatchedRidge`, every target is bootstrapped in the
# same batched solves; alphas are chosen once, on all data, and held fixed
# across replicates (``tune_per_replicate=False``).
Y = X @ rng.standard_normal((n_features, 300)) + 3.0 * rng.standard_normal(
    (n_samples, 300)
)
many = BootstrapEstimator(
    BatchedRidge(alphas=np.logspace(-1, 5, 13)), n_bootstrap=500, random_state=0
).fit(X, Y)
result = many.results_["coef_"]
print("coef_ intervals:", result.ci_lower.shape)
BootstrapDisplay.from_estimator(many, target=0, top_k=8)
plt.show()
