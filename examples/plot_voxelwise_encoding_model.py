"""
============================
A voxelwise encoding model
============================

The whole analysis of an fMRI encoding model, from stimulus features to the
figures of a paper: delays for the haemodynamic lag, two feature spaces with
an alpha each (banded ridge), leave-one-run-out cross-validation, a held-out
run scored against the noise ceiling, circular-shift permutation p-values
with family-wise (FWER) and false-discovery-rate (FDR) control, and
block-bootstrap intervals of the weights of the best voxels.

The data are simulated, so every finding is checked against the truth:
runs of unequal length, features and noise autocorrelated in time (as fMRI
time series are), and voxels that follow one feature space, the other, both
or none.
"""

# %%
# Simulated runs
# --------------
# Four training runs of unequal length, and a held-out run presented three
# times (the repeats give the noise ceiling). Two feature spaces: 10
# "low-level" features and 20 "semantic" ones, both smooth in time. A voxel
# responds to the features 1 to 4 samples (TRs) earlier, with a
# haemodynamic-like profile over the delays.
import matplotlib.pyplot as plt
import numpy as np
from sklearn.linear_model import Ridge
from sklearn.model_selection import LeaveOneGroupOut

from skbatch import (
    BandedRidge,
    BatchedRidge,
    BootstrapEstimator,
    Delayer,
    PermutationScorer,
    explainable_variance,
)
from skbatch.plotting import PermutationTestDisplay

rng = np.random.default_rng(0)
run_lengths = [260, 220, 300, 240]
n_test, n_repeats = 200, 3
n_low, n_semantic = 10, 20
n_voxels = 600
delays = (1, 2, 3, 4)
hrf = np.array([0.4, 1.0, 0.8, 0.3])  # response per delay, in delays' order


def ar1(n_samples, n_columns, phi):
    """AR(1) series along axis 0, unit variance: a time series' smoothness."""
    shocks = rng.standard_normal((n_samples, n_columns)) * np.sqrt(1 - phi**2)
    series = np.empty_like(shocks)
    series[0] = rng.standard_normal(n_columns)
    for t in range(1, n_samples):
        series[t] = phi * series[t - 1] + shocks[t]
    return series


def features(n_samples):
    return ar1(n_samples, n_low + n_semantic, phi=0.7)


X_runs = [features(n) for n in run_lengths]
X_test = features(n_test)
space = np.array(["low-level"] * n_low + ["semantic"] * n_semantic)

# Which voxels follow which space: 15% low-level, 15% semantic, 10% both.
kind = rng.choice(
    ["low-level", "semantic", "both", "none"], n_voxels, p=[0.15, 0.15, 0.1, 0.6]
)
weights = rng.standard_normal((n_low + n_semantic, n_voxels))
weights[:n_low, (kind == "semantic") | (kind == "none")] = 0
weights[n_low:, (kind == "low-level") | (kind == "none")] = 0
# Share of each voxel's variance the stimulus drives: its noise ceiling.
true_r2 = np.where(kind == "none", 0.0, rng.uniform(0.05, 0.5, n_voxels))


# The true weight of each delayed column (one block of features per delay),
# scaled so that the signal explains true_r2 of a voxel's variance, the
# noise (AR(1) too) having unit variance.
true_coef = np.concatenate([h * weights for h in hrf])
runs = np.repeat(np.arange(len(run_lengths)), run_lengths)
X_train = np.concatenate(X_runs)
signal_var = (Delayer(delays).fit_transform(X_train, groups=runs) @ true_coef).var(0)
true_coef *= np.sqrt(true_r2 / (1 - true_r2) / np.maximum(signal_var, 1e-12))


def responses(X, n_draws=1):
    """Signal plus AR(1) noise, for ``n_draws`` presentations of a run X."""
    signal = Delayer(delays).fit_transform(X) @ true_coef
    return [signal + ar1(len(X), n_voxels, phi=0.5) for _ in range(n_draws)]


Y_train = np.concatenate([responses(X)[0] for X in X_runs])
Y_repeats = np.stack(responses(X_test, n_repeats))

# %%
# Delays, run by run
# ------------------
# :class:`~skbatch.Delayer` adds the features of 1 to 4 TRs earlier; with the
# runs as ``groups`` no run receives samples of another. ``delayed_bands``
# carries each column's feature space over to its delayed copies.
delayer = Delayer(delays=delays)
Xd_train = delayer.fit_transform(X_train, groups=runs)
Xd_test = delayer.transform(X_test)
bands = delayer.delayed_bands(space)
print(f"{Xd_train.shape[1]} delayed features, {len(run_lengths)} runs")

# %%
# Banded ridge, leave one run out
# -------------------------------
# One alpha per feature space and voxel, chosen by leave-one-run-out
# cross-validation: rows of a time series predict their neighbours, so
# leave-one-out would choose too small alphas.
alphas = np.logspace(-1, 5, 13)
banded = BandedRidge(
    bands=bands, alphas=alphas, band_weights=20, cv=LeaveOneGroupOut()
).fit(Xd_train, Y_train, groups=runs)

# %%
# The held-out run against the noise ceiling
# ------------------------------------------
# The explainable variance of the three repeats is the largest R² a model of
# the stimulus can reach on one repeat. A voxel on the diagonal is
# explained as well as its noise allows.
ceiling = explainable_variance(Y_repeats)
test_r2 = np.mean([banded.score_per_target(Xd_test, Y) for Y in Y_repeats], axis=0)
shares = np.mean([banded.score_per_band(Xd_test, Y) for Y in Y_repeats], axis=0)

colors = {"low-level": "tab:blue", "semantic": "tab:orange", "both": "tab:green"}
colors["none"] = "tab:gray"
fig, axes = plt.subplots(1, 2, figsize=(10, 4.2), layout="constrained")
for name, color in colors.items():
    mask = kind == name
    axes[0].scatter(ceiling[mask], test_r2[mask], s=6, color=color, label=name)
    axes[1].scatter(shares[0, mask], shares[1, mask], s=6, color=color, label=name)
top = max(ceiling.max(), test_r2.max())
axes[0].plot([0, top], [0, top], "k--", linewidth=1)
axes[0].set(xlabel="noise ceiling (explainable variance)", ylabel="held-out R²")
axes[0].set_title("Each voxel against its ceiling")
axes[0].legend(title="true feature space", fontsize="small")
axes[1].set(xlabel="R² of the low-level space", ylabel="R² of the semantic space")
axes[1].set_title("The held-out R² split between the spaces")
plt.show()

# %%
# Circular-shift permutation test
# -------------------------------
# Shuffling the rows of a time series would break its autocorrelation and
# give p-values too small; a circular shift of each run keeps it. Each
# voxel's alpha is held at the one BatchedRidge chose by leave-one-run-out
# (one ridge per voxel, on both spaces), which takes the fast path: the
# permutations are extra targets of one decomposition per fold. No p-value of
# 200 permutations is below 1/(200 + 1), so in the figure -log10 p stops at
# 2.30, where the voxels that beat every permutation sit.
ridge = BatchedRidge(alphas=alphas, cv=LeaveOneGroupOut()).fit(
    Xd_train, Y_train, groups=runs
)
test = PermutationScorer(
    Ridge(alpha=ridge.alpha_),
    n_permutations=200,
    cv=LeaveOneGroupOut(),
    permutation_type="circular_shift",
    multioutput="raw_values",
).fit(Xd_train, Y_train, groups=runs)
has_signal = kind != "none"
for name, pvalue in [("FWER", test.pvalue_fwer_), ("FDR", test.pvalue_fdr_)]:
    found = pvalue <= 0.05
    print(
        f"{name} <= 0.05: {found.sum()} voxels, {(found & has_signal).sum()} of "
        f"{has_signal.sum()} with signal, {(found & ~has_signal).sum()} without"
    )
PermutationTestDisplay.from_estimator(test)
plt.title("Cross-validated R² and family-wise p-values")
plt.show()

# %%
# Block-bootstrap intervals of the best voxels' weights
# -----------------------------------------------------
# Blocks of 20 consecutive TRs within runs are resampled, which keeps the
# autocorrelation that an i.i.d. bootstrap of rows would break. For the best
# voxel of each kind, the weights of its three strongest features over the
# delays, with their 95% intervals (bands) and the true weights (crosses):
# the haemodynamic profile, recovered with its uncertainty. Ridge shrinks
# the weights towards 0, and an interval covers its true weight 95% of the
# time, one weight at a time.
best = [
    int(np.flatnonzero(kind == name)[np.argmax(test.score_[kind == name])])
    for name in ("low-level", "semantic")
]
boot = BootstrapEstimator(
    Ridge(alpha=ridge.alpha_[best]), n_bootstrap=300, block_size=20
).fit(Xd_train, Y_train[:, best], groups=runs)
coef = boot.results_["coef_"]
n_features = n_low + n_semantic
fig, axes = plt.subplots(1, 2, figsize=(10, 4), layout="constrained", sharey=True)
for k, (voxel, ax) in enumerate(zip(best, axes)):
    by_delay = true_coef[:, voxel].reshape(len(delays), n_features)
    for f in np.argsort(-np.abs(by_delay).sum(0))[:3]:
        columns = np.arange(len(delays)) * n_features + f
        line = ax.plot(delays, coef.estimate[k, columns], "o-", label=f"x{f}")[0]
        ax.fill_between(
            delays,
            coef.ci_lower[k, columns],
            coef.ci_upper[k, columns],
            color=line.get_color(),
            alpha=0.25,
        )
        ax.plot(delays, by_delay[:, f], "x", color=line.get_color())
    ax.axhline(0, color="black", linewidth=0.8, linestyle=":")
    ax.set(xlabel="delay (TRs)", xticks=delays)
    ax.set_title(f"voxel {voxel}, {kind[voxel]} features")
    ax.legend(title="feature", fontsize="small")
axes[0].set_ylabel("weight, 95% block-bootstrap interval")
plt.show()
