"""
==============================
GridSearchCV with BatchedRidge
==============================

:class:`~skbatch.BatchedRidge` is a scikit-learn regressor: it works in a
``Pipeline``, in ``GridSearchCV`` and in ``cross_val_score``. ``score``
returns the mean R² over targets, the number a search maximises. A common
pattern: the search tunes the preprocessing, while ``BatchedRidge`` chooses
each target's alpha internally, by leave-one-out, at no extra cost.
"""

# %%
# Data whose signal lives in a few directions
# -------------------------------------------
import matplotlib.pyplot as plt
import numpy as np
from sklearn.decomposition import PCA
from sklearn.model_selection import GridSearchCV, cross_val_score
from sklearn.pipeline import make_pipeline
from sklearn.preprocessing import StandardScaler

from skbatch import BatchedRidge

rng = np.random.default_rng(0)
n_samples, n_features, n_targets, n_latent = 300, 60, 200, 6
latent = rng.standard_normal((n_samples, n_latent))
X = latent @ rng.standard_normal((n_latent, n_features)) + rng.standard_normal(
    (n_samples, n_features)
)
Y = latent @ rng.standard_normal((n_latent, n_targets)) + 2.0 * rng.standard_normal(
    (n_samples, n_targets)
)

# %%
# The search
# ----------
pipeline = make_pipeline(
    StandardScaler(), PCA(), BatchedRidge(alphas=np.logspace(-1, 5, 13))
)
search = GridSearchCV(pipeline, {"pca__n_components": [2, 4, 6, 10, 20, 40]}, cv=5).fit(
    X, Y
)
print("best:", search.best_params_, f"mean R² {search.best_score_:.3f}")

components = search.cv_results_["param_pca__n_components"].data.astype(int)
fig, ax = plt.subplots(figsize=(6, 4), layout="constrained")
ax.errorbar(
    components,
    search.cv_results_["mean_test_score"],
    yerr=search.cv_results_["std_test_score"],
    marker="o",
)
ax.set_xlabel("PCA components")
ax.set_ylabel("mean R² over targets (5-fold CV)")
ax.set_title(f"{n_targets} targets, signal in {n_latent} latent directions")
plt.show()

# %%
# The refitted pipeline keeps one alpha per target
# ------------------------------------------------
ridge = search.best_estimator_[-1]
print("alpha_ per target:", ridge.alpha_.shape)
values, counts = np.unique(ridge.alpha_, return_counts=True)
for value, count in zip(values, counts):
    print(f"  alpha {value:10.2f}: {count} target{'' if count == 1 else 's'}")

# %%
# ``cross_val_score`` works the same way
# ---------------------------------------
scores = cross_val_score(BatchedRidge(alphas=np.logspace(-1, 5, 13)), X, Y, cv=5)
print("cross-validated mean R² without PCA:", np.round(scores, 3))

# %%
# Per-target scores
# -----------------
# ``score`` averages over targets so that the search has one number to
# compare; ``score_per_target`` gives them all.
X_train, X_test, Y_train, Y_test = X[:240], X[240:], Y[:240], Y[240:]
best = search.best_estimator_.fit(X_train, Y_train)
per_target = best[-1].score_per_target(best[:-1].transform(X_test), Y_test)
print(
    f"held-out R² per target: min {per_target.min():.3f}, "
    f"median {np.median(per_target):.3f}, max {per_target.max():.3f}"
)
