"""Serial dependence of residuals: lag-1 autocorrelation and block lengths.

Both work on the columns of a (n_samples, n_series) array, one series per
target, within the runs given by ``groups`` (never across a run boundary),
and serve the wrappers' choices for time series: ``BootstrapEstimator``'s
``block_size="auto"``, and the one rule by which the estimators warn that
rows are autocorrelated where their method assumes they are not
(:func:`autocorrelation_warning`).
"""

import math

import numpy as np

__all__ = ["autocorrelation_warning", "lag1_autocorrelation", "optimal_block_length"]

# Resampling rows one by one (an iid bootstrap, a shuffle) is wrong when the
# median over targets of their lag-1 autocorrelation within runs exceeds both
# figures. 0.2: the variance of a mean of AR(1) rows is then
# (1 + 0.2) / (1 - 0.2) = 1.5 times what exchangeable rows give, so iid
# standard errors are about 20% too small and shuffled nulls too narrow ...
AUTOCORRELATION_WARN = 0.2
# ... and this many standard errors of the statistic on white noise, about
# 1 / sqrt(lag-1 pairs within runs): a false alarm probability of 3e-5 there,
# so short series alone never warn.
AUTOCORRELATION_WARN_Z = 4.0

# Politis and White's constants (arch's ``optimal_block_length``): the
# flat-top window is 1 up to half its width, then falls linearly to 0.
_FLAT_TOP_HALF = 0.5
# D = c * sigma^4 in the optimal length (2 g^2 n / D)^(1/3): c = 2 for the
# stationary bootstrap, 4/3 for the circular one (Patton, Politis and White's
# 2009 correction); the moving-block bootstrap shares the circular value.
_D_FACTOR = {"stationary": 2.0, "circular": 4.0 / 3.0, "moving": 4.0 / 3.0}
# At least this many consecutive insignificant autocorrelations end the
# window search (k_n = max(5, log10(n))).
_MIN_INSIGNIFICANT_RUN = 5


def _window(n_samples):
    """``(k_n, m_max)`` of the rule for a series of ``n_samples`` rows."""
    kn = max(_MIN_INSIGNIFICANT_RUN, int(np.log10(n_samples)))
    return kn, int(np.ceil(np.sqrt(n_samples))) + kn


def min_rows_for_block_length():
    """Fewest rows a series needs for :func:`optimal_block_length`: the
    window's last lag must leave at least one product."""
    n = 2
    while _window(n)[1] + 2 > n:
        n += 1
    return n


def _one_run(x):
    """``(b_stationary, b_circular)`` per column of one run ``x``.

    arch's ``_single_optimal_block``, column by column at once: the same
    arithmetic, so the same values to rounding.
    """
    n = x.shape[0]
    eps = x - x.mean(axis=0)
    b_max = np.ceil(min(3 * np.sqrt(n), n / 3))
    kn, m_max = _window(n)
    cv = 2 * np.sqrt(np.log10(n) / n)
    acv = np.empty((m_max + 1, x.shape[1]))
    abs_acorr = np.empty_like(acv)
    with np.errstate(divide="ignore", invalid="ignore"):
        for i in range(m_max + 1):
            v1 = np.einsum("ij,ij->j", eps[i + 1 :], eps[i + 1 :])
            v2 = np.einsum("ij,ij->j", eps[: n - i - 1], eps[: n - i - 1])
            cross = np.einsum("ij,ij->j", eps[i:], eps[: n - i])
            acv[i] = cross / n
            abs_acorr[i] = np.abs(cross) / np.sqrt(v1 * v2)
    # opt_m = i - kn for the first i >= kn whose kn previous absolute
    # autocorrelations are all below cv.
    small = abs_acorr < cv
    windows = np.lib.stride_tricks.sliding_window_view(small, kn, axis=0)
    ok = windows[: m_max - kn + 1].all(axis=-1)
    found = ok.any(axis=0)
    opt_m = ok.argmax(axis=0)
    m = np.where(found, 2 * np.maximum(opt_m, 1), m_max)
    m = np.minimum(m, m_max)
    k = np.arange(1, m_max + 1)[:, None]
    ratio = k / m
    lam = np.where(ratio <= _FLAT_TOP_HALF, 1.0, 2 * (1 - ratio))
    lam = np.where(k <= m, lam, 0.0)
    g = (2 * lam * k * acv[1:]).sum(axis=0)
    lr_acv = acv[0] + (2 * lam * acv[1:]).sum(axis=0)
    with np.errstate(divide="ignore", invalid="ignore"):
        out = {
            scheme: np.minimum(
                ((2 * g**2) / (factor * lr_acv**2)) ** (1 / 3) * n ** (1 / 3), b_max
            )
            for scheme, factor in _D_FACTOR.items()
        }
    return out


def _runs(groups, n_samples):
    if groups is None:
        return [np.arange(n_samples)]
    _, codes = np.unique(groups, return_inverse=True)
    return [np.flatnonzero(codes == g) for g in range(codes.max() + 1)]


def optimal_block_length(residuals, groups=None, block_scheme="circular"):
    """Politis and White's (2004) optimal block length, per column.

    The rule with Patton, Politis and White's (2009) correction, as
    ``arch.bootstrap.optimal_block_length`` computes it (``b_sb`` for
    "stationary", ``b_cb`` for "circular" and "moving"), on each run of
    ``groups`` separately, then averaged over the runs weighted by their
    lengths. A column constant within every run has no defined length: NaN.

    Parameters
    ----------
    residuals : ndarray of shape (n_samples,) or (n_samples, n_series)
    groups : array-like of shape (n_samples,) or None
        Runs, each at least :func:`min_rows_for_block_length` rows long.
    block_scheme : {"moving", "circular", "stationary"}, default="circular"

    Returns
    -------
    lengths : ndarray of shape (n_series,)
        Unrounded block lengths.

    Examples
    --------
    >>> import numpy as np
    >>> from skbatch._kernels.timeseries import optimal_block_length
    >>> e = np.random.default_rng(0).standard_normal(1000)
    >>> x = np.empty(1000)
    >>> x[0] = e[0]
    >>> for t in range(1, 1000):
    ...     x[t] = 0.8 * x[t - 1] + e[t]
    >>> bool(optimal_block_length(x)[0] > optimal_block_length(e)[0])
    True
    """
    residuals = np.asarray(residuals, dtype=np.float64)
    residuals = residuals.reshape(residuals.shape[0], -1)
    runs = _runs(groups, residuals.shape[0])
    total = np.zeros(residuals.shape[1])
    weight = 0
    for rows in runs:
        total += len(rows) * _one_run(residuals[rows])[block_scheme]
        weight += len(rows)
    return total / weight


def lag1_autocorrelation(residuals, groups=None):
    """Lag-1 autocorrelation of each column, within runs.

    ``sum e_t e_(t+1) / sum e_t^2`` over every run, each run centred on its
    own mean and no product spanning two runs. NaN for a column constant
    within every run.

    Parameters
    ----------
    residuals : ndarray of shape (n_samples,) or (n_samples, n_series)
    groups : array-like of shape (n_samples,) or None

    Returns
    -------
    r1 : ndarray of shape (n_series,)

    Examples
    --------
    >>> import numpy as np
    >>> from skbatch._kernels.timeseries import lag1_autocorrelation
    >>> lag1_autocorrelation(np.array([1.0, 2.0, 1.0, 2.0])).round(2)
    array([-0.75])
    """
    residuals = np.asarray(residuals, dtype=np.float64)
    residuals = residuals.reshape(residuals.shape[0], -1)
    cross = np.zeros(residuals.shape[1])
    square = np.zeros(residuals.shape[1])
    for rows in _runs(groups, residuals.shape[0]):
        eps = residuals[rows] - residuals[rows].mean(axis=0)
        cross += np.einsum("ij,ij->j", eps[1:], eps[:-1])
        square += np.einsum("ij,ij->j", eps, eps)
    with np.errstate(divide="ignore", invalid="ignore"):
        return np.where(square > 0, cross / square, math.nan)


def autocorrelation_warning(residuals, groups=None, *, floor=AUTOCORRELATION_WARN):
    """``(statistic, threshold, n_series)`` of the autocorrelation rule, or None.

    The statistic is the median over columns of their lag-1 autocorrelation
    within runs (:func:`lag1_autocorrelation`); the threshold the larger of
    ``floor`` and :data:`AUTOCORRELATION_WARN_Z` standard errors of that
    statistic on white noise, ``1 / sqrt(n_pairs)`` with ``n_pairs`` the
    lag-1 pairs within runs. The caller warns when the statistic exceeds the
    threshold, in its own words. None where no pair or no column has a
    defined value.

    Parameters
    ----------
    residuals : ndarray of shape (n_samples,) or (n_samples, n_series)
    groups : array-like of shape (n_samples,) or None
    floor : float, default=AUTOCORRELATION_WARN
        The least threshold, whatever the number of rows.

    Returns
    -------
    (statistic, threshold, n_series) : (float, float, int) or None
        ``n_series``: the columns with a defined autocorrelation.

    Examples
    --------
    >>> import numpy as np
    >>> from skbatch._kernels.timeseries import autocorrelation_warning
    >>> steps = np.cumsum(np.random.default_rng(0).standard_normal((101, 2)), axis=0)
    >>> statistic, threshold, n_series = autocorrelation_warning(steps)
    >>> bool(statistic > threshold), round(threshold, 3), n_series
    (True, 0.4, 2)
    """
    n_samples = np.shape(residuals)[0]
    n_pairs = n_samples - len(_runs(groups, n_samples))
    if n_pairs < 1:
        return None
    r1 = lag1_autocorrelation(residuals, groups)
    r1 = r1[np.isfinite(r1)]
    if not r1.size:
        return None
    threshold = max(floor, AUTOCORRELATION_WARN_Z / math.sqrt(n_pairs))
    return float(np.median(r1)), threshold, int(r1.size)
