"""The replicate estimator of a ``BandedRidge`` whose choices a bootstrap holds.

:class:`HeldBandedRidge` fits banded ridge at fixed band weights and alpha
per target, with no search; :func:`held_banded_ridge` makes one from a fitted
``BandedRidge``. Both are importable from :mod:`skbatch.banded`.
"""

import numbers

import numpy as np
from sklearn.base import BaseEstimator, MultiOutputMixin, RegressorMixin
from sklearn.linear_model import Ridge
from sklearn.utils.validation import check_is_fitted, validate_data

from .._ridge.banded import check_band_weights, check_bands
from .._ridge.banded.bootstrap import HeldBands
from .._ridge.spec import check_alphas

__all__ = ["HeldBandedRidge", "held_banded_ridge"]


class HeldBandedRidge(MultiOutputMixin, RegressorMixin, BaseEstimator):
    """Banded ridge at fixed band weights and alpha per target, no search.

    The replicate estimator of :class:`~skbatch.BootstrapEstimator` around
    a :class:`BandedRidge` whose choices are held fixed (see
    :func:`held_banded_ridge`), which solves its replicates in batches from
    the problem it states (``__skbatch_held_bands__``) and refits it where
    that path does not apply (a callable ``attributes``, the jackknife of
    BCa when its closed form does not). Target j is
    scikit-learn's ``Ridge(alpha=alpha[j])`` on X's columns rescaled band by
    band by ``sqrt(band_weights[j])``, bands of weight 0 left out (their
    coefficients 0), the coefficients mapped back to X's columns.

    Parameters
    ----------
    bands : array-like of shape (n_features,) or list of ndarray
        A band label per column, or the columns of each band, as
        :class:`BandedRidge` takes them.
    band_weights : array-like of shape (n_targets, n_bands)
        Each target's weights (non-negative, no row all zero; rows are
        divided by their sums), band b in column b.
    alphas : array-like of shape (n_targets,)
        Each target's overall alpha, positive.
    fit_intercept : bool, default=True

    Examples
    --------
    >>> import numpy as np
    >>> from skbatch.banded import HeldBandedRidge
    >>> rng = np.random.default_rng(0)
    >>> X, Y = rng.standard_normal((30, 4)), rng.standard_normal((30, 2))
    >>> held = HeldBandedRidge(
    ...     [np.array([0, 1]), np.array([2, 3])],
    ...     np.array([[0.5, 0.5], [1.0, 0.0]]),
    ...     np.array([1.0, 10.0]),
    ... ).fit(X, Y)
    >>> held.coef_[1, 2:].tolist()
    [0.0, 0.0]
    """

    def __init__(self, bands, band_weights, alphas, *, fit_intercept=True):
        self.bands = bands
        self.band_weights = band_weights
        self.alphas = alphas
        self.fit_intercept = fit_intercept

    def __skbatch_held_bands__(self, n_features, n_targets):
        """The fixed problem ``fit`` solves on X of ``n_features`` columns and
        ``n_targets`` targets, for the bootstrap's batched path
        (:class:`skbatch._ridge.banded.bootstrap.HeldBands`), checked: bands a
        partition of the columns (:func:`check_bands`), a row of band weights
        (:func:`check_band_weights`, none all zero) and a positive alpha per
        target."""
        columns, _ = check_bands(self.bands, n_features)
        if isinstance(self.band_weights, numbers.Integral):
            raise TypeError(
                f"band_weights of HeldBandedRidge must be an array of shape "
                f"(n_targets, {len(columns)}), one row per target, got "
                f"{self.band_weights!r}"
            )
        weights = check_band_weights(self.band_weights, len(columns))
        alphas = check_alphas(self.alphas)
        for name, size in (("band_weights", weights.shape[0]), ("alphas", alphas.size)):
            if size != n_targets:
                raise ValueError(
                    f"{name} has {size} row(s) or value(s), one per target is "
                    f"needed ({n_targets} targets)"
                )
        return HeldBands(columns, weights, alphas, fit_intercept=self.fit_intercept)

    def fit(self, X, y, sample_weight=None):
        """Fit every target at its band weights and alpha.

        Parameters
        ----------
        X : array-like of shape (n_samples, n_features)
        y : array-like of shape (n_samples,) or (n_samples, n_targets)
        sample_weight : array-like of shape (n_samples,), default=None

        Returns
        -------
        self : object
        """
        X, y = validate_data(self, X, y, multi_output=True, y_numeric=True)
        Y = y.reshape(X.shape[0], -1)
        held = self.__skbatch_held_bands__(X.shape[1], Y.shape[1])
        alphas = held.alphas
        design, chosen = held.design(X)
        coef = np.zeros((Y.shape[1], X.shape[1]))
        intercept = np.zeros(Y.shape[1])
        for c in range(len(design.kept)):
            (columns,) = np.nonzero(chosen == c)
            ridge = Ridge(
                alpha=alphas[columns], fit_intercept=self.fit_intercept, solver="svd"
            ).fit(design.design(c), Y[:, columns], sample_weight=sample_weight)
            coef[np.ix_(columns, design.kept[c])] = ridge.coef_ * design.scales[c]
            intercept[columns] = ridge.intercept_
        one_target = y.ndim == 1
        self.coef_ = coef[0] if one_target else coef
        self.intercept_ = float(intercept[0]) if one_target else intercept
        return self

    def predict(self, X):
        """Predictions ``X @ coef_.T + intercept_``.

        Parameters
        ----------
        X : array-like of shape (n_samples, n_features)

        Returns
        -------
        y_pred : ndarray of shape (n_samples,) or (n_samples, n_targets)
        """
        check_is_fitted(self)
        X = validate_data(self, X, reset=False)
        return X @ self.coef_.T + self.intercept_


def held_banded_ridge(fitted):
    """The replicate estimator of a fitted :class:`BandedRidge` whose
    choices a bootstrap holds fixed: a :class:`HeldBandedRidge` at every
    target's band weights and alpha."""
    return HeldBandedRidge(
        fitted._band_columns,
        np.atleast_2d(fitted.band_weights_),
        np.atleast_1d(fitted.alpha_),
        fit_intercept=fitted.fit_intercept,
    )
