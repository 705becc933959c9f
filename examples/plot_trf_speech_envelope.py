"""
===================================================
Temporal response functions of EEG to speech
===================================================

An EEG/MEG encoding model of continuous speech, as MNE-Python's
``ReceptiveField`` and mTRFpy fit it: the speech envelope, delayed by -100
to 400 ms, predicts every channel with ridge regression, and the weights
over the lags are the channel's temporal response function (TRF). Here the
EEG is simulated (8 trials of unequal length, 16 channels, autocorrelated
noise), so the true TRF is known. On top of the peers' TRFs, skbatch gives
bootstrap intervals on every weight and a per-channel permutation p-value
with family-wise control.
"""

# %%
# Simulated EEG: a P1-N1-P2 response to the envelope
# --------------------------------------------------
import warnings

import matplotlib.pyplot as plt
import numpy as np
from scipy.signal import lfilter
from sklearn.model_selection import LeaveOneGroupOut
from sklearn.pipeline import make_pipeline

from skbatch import (
    AlphaEdgeWarning,
    BatchedRidge,
    BootstrapEstimator,
    Delayer,
    PermutationScorer,
    trf_from_estimator,
)
from skbatch.plotting import TRFDisplay

rng = np.random.default_rng(0)
sfreq = 64.0  # Hz
lengths = rng.integers(15, 21, size=8) * int(sfreq)  # 8 trials of 15-20 s
trials = np.repeat(np.arange(8), lengths)
n_channels = 16


def smooth(x, width):
    window = np.hanning(width)
    return np.convolve(x, window / window.sum(), mode="same")


# The envelope: rectified noise smoothed over ~150 ms, z-scored.
envelope = np.concatenate([smooth(np.abs(rng.standard_normal(n)), 10) for n in lengths])
envelope = (envelope - envelope.mean()) / envelope.std()

# The true TRF: positive at 50 ms, negative at 100 ms, positive at 200 ms.
lag_times = np.arange(0, 0.3, 1 / sfreq)
true_trf = sum(
    amplitude * np.exp(-0.5 * ((lag_times - peak) / 0.02) ** 2)
    for amplitude, peak in [(0.5, 0.05), (-1.0, 0.1), (0.6, 0.2)]
)
# Channels 0-9 carry it with decreasing gain; channels 10-15 are noise only.
gain = np.r_[np.linspace(1.0, 0.2, 10), np.zeros(6)]
eeg = np.empty((trials.size, n_channels))
for trial in range(8):
    rows = trials == trial
    response = np.convolve(envelope[rows], true_trf)[: rows.sum()]
    # AR(1) noise: EEG's background is slow.
    noise = lfilter(
        [1.0], [1.0, -0.8], rng.standard_normal((rows.sum(), n_channels)), axis=0
    )
    eeg[rows] = response[:, None] * gain + 2.0 * noise
channels = [f"EEG{c:02d}" for c in range(n_channels)]

# %%
# Lags in seconds, each trial delayed on its own
# ----------------------------------------------
# ``Delayer(tmin, tmax, sfreq)`` rounds the window to samples as MNE's
# ``ReceptiveField`` does (-6 to 26 samples here; ``rounding="outward"``
# gives mTRFpy's -7 to 26). The delayed design serves the three fits below.
delayer = Delayer(tmin=-0.1, tmax=0.4, sfreq=sfreq)
X_delayed = delayer.fit_transform(envelope[:, None], groups=trials)
print(
    f"lags: {delayer.delays_[0]} to {delayer.delays_[-1]} samples, "
    f"{1000 * delayer.times_[0]:.0f} to {1000 * delayer.times_[-1]:.0f} ms"
)

# %%
# Alpha per channel, leaving one trial out
# ----------------------------------------
# A noise channel is best predicted by its mean: for some, the score still
# rises at the largest alpha, which warns (``AlphaEdgeWarning``).
ridge = BatchedRidge(alphas=np.logspace(0, 6, 7), cv=LeaveOneGroupOut())
ridge.fit(X_delayed, eeg, groups=trials)
# Known and expected here: the fits below refit the same data, silently.
warnings.filterwarnings("ignore", category=AlphaEdgeWarning)

# %%
# Intervals: blocks of each trial resampled
# -----------------------------------------
# :class:`~skbatch.BootstrapEstimator` resamples moving blocks of 2 s that
# never cross a trial, the alphas held at the full-data choice; ridge
# takes its batched path (all replicates through weighted Gram matrices).
boot = BootstrapEstimator(
    ridge, n_bootstrap=500, block_size=int(2 * sfreq), random_state=0
).fit(X_delayed, eeg, groups=trials)
trf = trf_from_estimator(boot, delayer=delayer)
print("TRF array:", trf.coef.shape, "(channels, features, lags)")

# %%
# Which channels respond? A permutation test per channel
# ------------------------------------------------------
# Held-out correlation of each channel, leaving one trial out, against
# circular shifts of the EEG within each trial (they keep its
# autocorrelation); ``pvalue_fwer_`` controls the family-wise error over
# the 16 channels. Permutations are extra targets through the same
# decompositions.
perm = PermutationScorer(
    ridge,
    n_permutations=100,
    scoring="correlation",
    cv=LeaveOneGroupOut(),
    multioutput="raw_values",
    permutation_type="circular_shift",
    random_state=0,
).fit(X_delayed, eeg, groups=trials)
for name, r, p in zip(channels, perm.score_, perm.pvalue_fwer_):
    print(f"{name}: r = {r:5.2f}, FWER p = {p:.3f}")

# %%
# The TRFs with their 95% intervals
# ---------------------------------
# Three responding channels and one noise channel, the lags in ms, the true
# TRFs (scaled by each channel's gain) in black; the legend gives each
# channel's family-wise p-value.
labels = [f"{c} (p_FWER={p:.3f})" for c, p in zip(channels, perm.pvalue_fwer_)]
display = TRFDisplay.from_estimator(
    boot, delayer=delayer, targets=[0, 3, 6, 12], target_names=labels
)
for c in (0, 3, 6):
    display.ax_[0].plot(lag_times * 1000, gain[c] * true_trf, "k", lw=0.8)
display.ax_[0].set_title("speech envelope")
plt.show()

# %%
# The same model as one pipeline
# ------------------------------
# ``trf_from_estimator`` also reads a fitted ``Pipeline(Delayer,
# BatchedRidge)`` (or a BootstrapEstimator around it, bootstrapping
# ``"named_steps.batchedridge.coef_"``); the user guide's TRF page maps it
# to MNE's ``ReceptiveField`` and mTRFpy. Without metadata routing, the
# trials reach each step by name.
pipeline = make_pipeline(
    Delayer(tmin=-0.1, tmax=0.4, sfreq=sfreq),
    BatchedRidge(alphas=np.logspace(0, 6, 7), cv=LeaveOneGroupOut()),
)
pipeline.fit(
    envelope[:, None], eeg, delayer__groups=trials, batchedridge__groups=trials
)
print("same TRFs:", np.allclose(trf_from_estimator(pipeline).coef, trf.coef))
