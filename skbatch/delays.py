"""Delayer: time-delayed copies of the features, each run delayed on its own."""

import numbers
import warnings

import numpy as np
from sklearn.base import BaseEstimator, TransformerMixin

# _check_feature_names_in is private to scikit-learn but is what its own
# transformers' get_feature_names_out use (input_features checked against
# feature_names_in_, x0.. names without them); tests/test_delays.py checks
# its behaviour, so a change in it fails there.
from sklearn.utils.validation import (
    _check_feature_names_in,
    check_is_fitted,
    validate_data,
)

from ._estimators.base import as_output, host_input
from .random import check_groups

__all__ = ["Delayer", "lags_from_times"]

# What the rows a delay reaches before (or after) a run hold: 0, or the mean
# of each feature over the rows given to fit.
FILLS = ("zero", "mean")
# Zero fill warns for a feature whose mean lies more than this many standard
# deviations from 0: by Chebyshev at most 1/9 of its own rows are that far
# from its mean, so zeros at the run edges are outliers a fit explains by
# spreading weight over the delays.
ZERO_FILL_WARN_RATIO = 3.0
# The delays of Delayer() when neither delays nor tmin/tmax are given.
DEFAULT_DELAYS = (1, 2, 3, 4)
# How lag times in seconds become whole samples: "nearest" rounds both ends
# (MNE's ReceptiveField), "outward" floors tmin and ceils tmax (mTRFpy).
ROUNDINGS = ("nearest", "outward")


def _check_delays(delays):
    """``delays`` as a tuple of distinct Python ints, or an error naming it."""
    if isinstance(delays, str) or not hasattr(delays, "__iter__"):
        raise TypeError(
            f"delays must be a sequence of ints (e.g. (1, 2, 3, 4)), got "
            f"{type(delays).__name__}: {delays!r}"
        )
    values = list(np.asarray(delays, dtype=object).ravel())
    if not values or np.ndim(delays) != 1:
        raise ValueError(
            f"delays must be a non-empty 1-D sequence of ints, got {delays!r}"
        )
    for value in values:
        if isinstance(value, bool | np.bool_) or not isinstance(
            value, numbers.Integral
        ):
            raise TypeError(
                f"delays must hold ints (numbers of samples), got "
                f"{type(value).__name__} {value!r} in delays={delays!r}"
            )
    values = tuple(int(value) for value in values)
    if len(set(values)) != len(values):
        repeated = sorted({d for d in values if values.count(d) > 1})
        raise ValueError(
            f"delays must be distinct (a repeated delay only repeats columns), "
            f"got {repeated} more than once in delays={delays!r}"
        )
    return values


def _check_seconds(name, value):
    """A real, finite number of seconds (or Hz), or an error naming it."""
    if isinstance(value, bool | np.bool_) or not isinstance(value, numbers.Real):
        raise TypeError(
            f"{name} must be a real number, got {type(value).__name__}: {value!r}"
        )
    if not np.isfinite(value):
        raise ValueError(f"{name} must be finite, got {value!r}")
    return float(value)


def lags_from_times(tmin, tmax, sfreq, rounding="nearest"):
    """Delays in samples spanning ``tmin`` to ``tmax`` seconds at ``sfreq`` Hz.

    Parameters
    ----------
    tmin, tmax : float
        First and last lag, in seconds; ``tmin <= tmax``. A negative lag
        pairs a response with a later stimulus.
    sfreq : float
        Sampling frequency, in Hz, > 0.
    rounding : {"nearest", "outward"}, default="nearest"
        "nearest": ``round(tmin * sfreq)`` to ``round(tmax * sfreq)``, as
        MNE's ``ReceptiveField`` (numpy's rounding, half to even).
        "outward": ``floor(tmin * sfreq)`` to ``ceil(tmax * sfreq)``, as
        mTRFpy's ``TRF.train`` (``mtrf.matrices.lags_idx``): the lags cover
        the whole window. Both take the products as floating point gives
        them (``0.7 * 10`` is ``7.000000000000001``, which "outward" ceils
        to 8, as mTRFpy does).

    Returns
    -------
    delays : tuple of int
        Every whole number of samples between the two rounded ends.

    Examples
    --------
    >>> from skbatch.delays import lags_from_times
    >>> lags = lags_from_times(-0.1, 0.4, 128)
    >>> lags[0], lags[-1], len(lags)
    (-13, 51, 65)
    >>> lags = lags_from_times(-0.1, 0.4, 128, rounding="outward")
    >>> lags[0], lags[-1], len(lags)
    (-13, 52, 66)
    """
    tmin = _check_seconds("tmin", tmin)
    tmax = _check_seconds("tmax", tmax)
    sfreq = _check_seconds("sfreq", sfreq)
    if sfreq <= 0:
        raise ValueError(f"sfreq must be > 0 (Hz), got {sfreq!r}")
    if tmin > tmax:
        raise ValueError(f"tmin must be <= tmax, got tmin={tmin!r} > tmax={tmax!r}")
    if not isinstance(rounding, str) or rounding not in ROUNDINGS:
        raise ValueError(
            f"rounding must be one of {', '.join(map(repr, ROUNDINGS))}, got "
            f"{type(rounding).__name__}: {rounding!r}"
        )
    if rounding == "nearest":
        first, last = np.round(tmin * sfreq), np.round(tmax * sfreq)
    else:
        first, last = np.floor(tmin * sfreq), np.ceil(tmax * sfreq)
    return tuple(range(int(first), int(last) + 1))


def _valid_rows(groups, n_samples, delays):
    """Rows whose every delay stays inside their run: none holds a fill.

    Parameters
    ----------
    groups : array-like of shape (n_samples,) or None
        Run of each row; None is one run.
    n_samples : int
        Number of rows.
    delays : sequence of int
        The delays, in samples.

    Returns
    -------
    mask : ndarray of bool of shape (n_samples,)
        True where row ``t`` of a run of ``n`` rows has ``t - d`` in
        ``0 .. n - 1`` for every delay ``d``: MNE's ``valid_samples_`` slice,
        taken in each run.
    """
    before = max(max(delays), 0)
    after = max(-min(delays), 0)
    mask = np.zeros(n_samples, dtype=bool)
    for rows in _runs(groups, n_samples):
        positions = np.arange(n_samples)[rows]
        mask[positions[before : max(positions.size - after, 0)]] = True
    return mask


def _check_fill(fill):
    """``fill`` as one of ``FILLS``, or an error naming it."""
    if not isinstance(fill, str) or fill not in FILLS:
        raise ValueError(
            f"fill must be one of {', '.join(map(repr, FILLS))}, got "
            f"{type(fill).__name__}: {fill!r}"
        )
    return fill


def _feature_means(X):
    """Mean of each column of ``X`` over its non-NaN rows, float64.

    NaN for a column of NaN only: its delayed copies are NaN anyway.
    """
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        return np.nanmean(X, axis=0, dtype=np.float64)


def _warn_uncentred(X, means):
    """Warn when zeros filled at the run edges are far from a feature's values."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        spreads = np.nanstd(X, axis=0, dtype=np.float64)
    with np.errstate(divide="ignore", invalid="ignore"):
        ratios = np.abs(means) / spreads
    far = np.flatnonzero(ratios > ZERO_FILL_WARN_RATIO)
    if far.size == 0:
        return
    j = int(far[0])
    warnings.warn(
        f"Delayer(fill='zero') fills the edges of each run with 0, but {far.size} "
        f"of {means.size} features have a mean more than {ZERO_FILL_WARN_RATIO:g} "
        f"standard deviations from 0 (feature {j}: mean {means[j]:.4g}, standard "
        f"deviation {spreads[j]:.4g}): the zero rows are outliers that spread a "
        f"model's weights over the delays. Pass fill='mean' to fill with each "
        f"feature's mean, or centre the features first.",
        UserWarning,
        stacklevel=3,
    )


def _runs(groups, n_samples):
    """Row indices of each run, every run's rows in their order in X."""
    if groups is None:
        return [slice(None)]
    _, codes = np.unique(groups, return_inverse=True)
    order = np.argsort(codes, kind="stable")
    bounds = np.flatnonzero(np.diff(codes[order])) + 1
    runs = []
    for rows in np.split(order, bounds):
        start = int(rows[0])
        contiguous = int(rows[-1]) - start + 1 == rows.size
        # A run of consecutive rows is a view, not a copy.
        runs.append(slice(start, start + rows.size) if contiguous else rows)
    return runs


class Delayer(TransformerMixin, BaseEstimator):
    """Time-delayed copies of the features, for encoding models of time series.

    A response at time t often depends on the stimulus a few samples
    earlier (the haemodynamic lag of fMRI): the output holds, for each delay
    ``d`` of ``delays``, the features shifted ``d`` samples later, so that
    row t of the block of delay ``d`` is row ``t - d`` of the input. Delay 0
    is the input itself; where a delay reaches before the start of a run
    the block holds the fill (zeros by default, or each feature's mean); a
    negative delay shifts the other way (the fill at the end of each run).

    With ``groups`` (runs), each run is delayed on its own: no row receives
    values from another run. A run's rows are taken in their order in
    ``X``; they need not be consecutive, and runs may come in any order.

    The delays are given in samples (``delays``) or, as MNE's
    ``ReceptiveField`` and mTRFpy take them, as a window of lags in seconds
    (``tmin``, ``tmax``) at a sampling frequency (``sfreq``): one way or the
    other, not both.

    Parameters
    ----------
    delays : sequence of int, default=None
        Distinct delays, in samples. The output has one block of
        ``n_features`` columns per delay, in the order of ``delays``. None
        (with no ``tmin`` / ``tmax``) means ``(1, 2, 3, 4)``.
    tmin, tmax : float, default=None
        First and last lag, in seconds (``tmin <= tmax``), given together
        with ``sfreq`` instead of ``delays``: every whole number of samples
        from the rounded ``tmin * sfreq`` to the rounded ``tmax * sfreq``
        (see :func:`~skbatch.delays.lags_from_times`).
    sfreq : float, default=None
        Sampling frequency in Hz, needed with ``tmin`` and ``tmax``; given
        with ``delays``, it only gives the lag times ``times_``.
    rounding : {"nearest", "outward"}, default="nearest"
        How ``tmin`` and ``tmax`` become samples. "nearest" rounds both, as
        MNE's ``ReceptiveField`` (-0.1 to 0.4 s at 128 Hz: lags -13 to 51);
        "outward" floors ``tmin`` and ceils ``tmax``, as mTRFpy (-13 to 52).
        Only with ``tmin`` / ``tmax``.
    fill : {"zero", "mean"}, default="zero"
        What the rows a delay reaches outside a run hold. "zero": zeros,
        right for centred features; fitting it on features whose mean lies
        more than 3 standard deviations from 0 warns
        (``UserWarning``), since those zeros are outliers that spread a
        model's weights over the delays. "mean": each feature's mean over
        the rows given to :meth:`fit` (all runs together): the filled rows
        sit at the centre of the feature's values, as zeros do for a
        centred feature.

    Attributes
    ----------
    delays_ : tuple of int
        The delays, in samples: the validated ``delays``, or those of
        ``tmin`` / ``tmax``, increasing.
    times_ : ndarray of shape (n_delays,) or None
        The lag of each delay in seconds, ``delays_ / sfreq``; None without
        ``sfreq``.
    valid_samples_ : ndarray of bool of shape (n_samples,)
        For each row given to :meth:`fit`: True when every delay of it stays
        inside its run (no fill in the row), as MNE's ``valid_samples_``
        (a slice there, of every epoch) but per run of ``groups``.
    fill_values_ : ndarray of shape (n_features_in_,)
        The value filled in for each feature, float64: zeros, or the means
        of the features seen in fit (NaN values left out).
    n_features_in_ : int
        Number of features seen in fit.
    feature_names_in_ : ndarray of shape (n_features_in_,)
        Names of features seen in fit, when X has string column names.

    See Also
    --------
    skbatch.BatchedRidge : Ridge regression on the delayed features.

    Notes
    -----
    **Runs through a pipeline.** ``fit_transform(X, groups=runs)`` and
    ``transform(X, groups=runs)`` take the runs directly. Inside a
    :class:`~sklearn.pipeline.Pipeline`, with
    ``sklearn.set_config(enable_metadata_routing=True)``, ``groups`` given
    to the pipeline's ``fit`` (or to ``cross_validate(..., params={"groups":
    runs})``, or to ``PermutationScorer.fit`` and ``BootstrapEstimator.fit``)
    reaches the Delayer's ``fit`` and ``transform``: both are requested by
    default, as scikit-learn's group splitters request ``groups``
    (``set_fit_request(groups=False)`` and
    ``set_transform_request(groups=False)`` turn that off). Without
    routing, pass ``delayer__groups=runs`` to ``Pipeline.fit``; its
    ``predict`` then delays the test rows as one run.

    **Mean fill, and MNE.** ``fill="mean"`` fills with the value MNE's
    ``ReceptiveField(fit_intercept=True)`` fills with when it delays its
    training data (``_delay_time_series(fill_mean=True)``): each feature's
    mean over every sample of every epoch, not per run. Two differences:
    the mean is learnt at :meth:`fit` and applied by :meth:`transform` to
    any data, as scikit-learn's transformers apply their fitted statistics
    (MNE takes the mean of whatever it delays, so its predictions on new
    data are filled with that data's mean); and the delayed values are
    those of the input, where MNE also shifts each delayed segment of an
    epoch so that its mean is the fill value.

    **Bands of delayed features.** :meth:`delayed_bands` maps the bands of
    the input columns (a label per column, or index arrays) to the output
    columns, for ``BandedRidge(bands=...)`` after a Delayer: each band keeps
    its delayed copies.

    **Arrays.** numpy arrays and pandas DataFrames (their column names give
    :meth:`get_feature_names_out`); torch and jax arrays are delayed on the
    host and returned in their library, on their device.

    Examples
    --------
    >>> import numpy as np
    >>> from skbatch import Delayer
    >>> X = np.arange(1.0, 6.0)[:, None]
    >>> Delayer(delays=(0, 1, -1)).fit_transform(X)
    array([[1., 0., 2.],
           [2., 1., 3.],
           [3., 2., 4.],
           [4., 3., 5.],
           [5., 4., 0.]])
    >>> runs = [0, 0, 0, 1, 1]
    >>> Delayer(delays=(1,)).fit_transform(X, groups=runs).ravel()
    array([0., 1., 2., 0., 4.])
    >>> Delayer(delays=(1, 2)).fit(X).get_feature_names_out()
    array(['x0_delay1', 'x0_delay2'], dtype=object)
    >>> Delayer(delays=(2,), fill="mean").fit_transform(X).ravel()
    array([3., 3., 1., 2., 3.])

    Lags in seconds, as MNE takes them, and the rows no fill reaches:

    >>> delayer = Delayer(tmin=-0.1, tmax=0.2, sfreq=10.0).fit(X)
    >>> delayer.delays_, delayer.times_
    ((-1, 0, 1, 2), array([-0.1,  0. ,  0.1,  0.2]))
    >>> delayer.valid_samples_
    array([False, False,  True,  True, False])
    """

    __metadata_request__fit = {"groups": True}
    __metadata_request__transform = {"groups": True}

    def __init__(
        self,
        delays=None,
        *,
        tmin=None,
        tmax=None,
        sfreq=None,
        rounding="nearest",
        fill="zero",
    ):
        self.delays = delays
        self.tmin = tmin
        self.tmax = tmax
        self.sfreq = sfreq
        self.rounding = rounding
        self.fill = fill

    def _delays(self):
        """The delays in samples and the sampling frequency (or None), checked."""
        in_seconds = self.tmin is not None or self.tmax is not None
        if in_seconds and self.delays is not None:
            raise ValueError(
                f"give the delays in samples (delays=) or a window of lags in "
                f"seconds (tmin=, tmax=, sfreq=), not both: got delays="
                f"{self.delays!r}, tmin={self.tmin!r}, tmax={self.tmax!r}"
            )
        sfreq = self.sfreq
        if sfreq is not None:
            sfreq = _check_seconds("sfreq", sfreq)
            if sfreq <= 0:
                raise ValueError(f"sfreq must be > 0 (Hz), got {self.sfreq!r}")
        if not in_seconds:
            if self.rounding != "nearest":
                raise ValueError(
                    f"rounding applies to tmin and tmax in seconds; with delays in "
                    f"samples leave it at 'nearest', got {self.rounding!r}"
                )
            delays = DEFAULT_DELAYS if self.delays is None else self.delays
            return _check_delays(delays), sfreq
        missing = [
            name
            for name, value in (
                ("tmin", self.tmin),
                ("tmax", self.tmax),
                ("sfreq", self.sfreq),
            )
            if value is None
        ]
        if missing:
            raise ValueError(
                f"lags in seconds need tmin, tmax and sfreq together; "
                f"{' and '.join(missing)} missing (tmin={self.tmin!r}, "
                f"tmax={self.tmax!r}, sfreq={self.sfreq!r})"
            )
        return lags_from_times(self.tmin, self.tmax, sfreq, self.rounding), sfreq

    def __sklearn_tags__(self):
        tags = super().__sklearn_tags__()
        # Missing values are shifted like any other.
        tags.input_tags.allow_nan = True
        tags.transformer_tags.preserves_dtype = ["float64", "float32"]
        return tags

    def fit(self, X, y=None, groups=None):
        """Check the delays and learn the fill of each feature of ``X``.

        Parameters
        ----------
        X : array-like of shape (n_samples, n_features)
            Training data.
        y : None
            Ignored.
        groups : array-like of shape (n_samples,), default=None
            Runs: they give ``valid_samples_``; nothing else is learnt from
            them (the mean of ``fill="mean"`` is over all rows).

        Returns
        -------
        self : object
            Fitted transformer.
        """
        delays, sfreq = self._delays()
        fill = _check_fill(self.fill)
        X, _ = host_input(X)
        X = validate_data(self, X, dtype="numeric", ensure_all_finite=False)
        groups = check_groups(groups, X.shape[0])
        means = _feature_means(X)
        if fill == "mean":
            fill_values = means
        else:
            fill_values = np.zeros(X.shape[1])
            if any(delays):
                _warn_uncentred(X, means)
        self.delays_, self.fill_values_ = delays, fill_values
        self.times_ = None if sfreq is None else np.asarray(delays) / sfreq
        self.valid_samples_ = _valid_rows(groups, X.shape[0], delays)
        # Integers filled with means come out as floats, whatever the means.
        self._fills_means = fill == "mean"
        return self

    def transform(self, X, groups=None):
        """Delay every feature by every delay, within each run.

        Parameters
        ----------
        X : array-like of shape (n_samples, n_features)
            Samples in time order (within each run).
        groups : array-like of shape (n_samples,), default=None
            Run of each sample; None delays all rows as one run.

        Returns
        -------
        X_delayed : array of shape (n_samples, n_features * len(delays))
            Column ``k * n_features + j`` is feature j delayed by
            ``delays[k]``. numpy for numpy input (in X's dtype; float64 for
            integers filled with their means), or the input's library, on
            its device.
        """
        check_is_fitted(self)
        X, source = host_input(X)
        X = validate_data(
            self, X, dtype="numeric", ensure_all_finite=False, reset=False
        )
        n_samples, n_features = X.shape
        groups = check_groups(groups, n_samples)
        dtype = X.dtype
        if dtype.kind != "f" and self._fills_means:
            dtype = np.dtype(np.float64)
        fill = self.fill_values_.astype(dtype)
        out = np.empty((n_samples, n_features * len(self.delays_)), dtype=dtype)
        for rows in _runs(groups, n_samples):
            run = X[rows]
            length = run.shape[0]
            delayed = np.empty((length, out.shape[1]), dtype=dtype)
            for k, delay in enumerate(self.delays_):
                block = delayed[:, k * n_features : (k + 1) * n_features]
                kept = max(length - abs(delay), 0)
                if delay >= 0:
                    block[: length - kept] = fill
                    block[length - kept :] = run[:kept]
                else:
                    block[kept:] = fill
                    block[:kept] = run[length - kept :]
            out[rows] = delayed
        return as_output(out, source)

    def fit_transform(self, X, y=None, groups=None):
        """Fit, then delay ``X`` within the runs ``groups``.

        Parameters
        ----------
        X : array-like of shape (n_samples, n_features)
            Training data.
        y : None
            Ignored.
        groups : array-like of shape (n_samples,), default=None
            Run of each sample.

        Returns
        -------
        X_delayed : array of shape (n_samples, n_features * len(delays))
            As :meth:`transform`.
        """
        return self.fit(X, y, groups=groups).transform(X, groups=groups)

    def get_feature_names_out(self, input_features=None):
        """Names of the delayed columns: ``"{feature}_delay{d}"``.

        Parameters
        ----------
        input_features : array-like of str or None, default=None
            Input feature names; None uses ``feature_names_in_``, or
            ``x0, x1, ...``.

        Returns
        -------
        feature_names_out : ndarray of str objects
            One block per delay, in the order of ``delays``.
        """
        check_is_fitted(self)
        names = _check_feature_names_in(self, input_features)
        return np.asarray(
            [f"{name}_delay{delay}" for delay in self.delays_ for name in names],
            dtype=object,
        )

    def delayed_bands(self, bands):
        """The bands of the input columns, mapped to the delayed columns.

        Each output column belongs to the band of the input column it
        delays, so a banded model regularises every delayed copy of a
        feature space together. Needs no fit.

        Parameters
        ----------
        bands : array-like of shape (n_features,) or list of array-like of int
            A band label per input column, or a list of disjoint arrays of
            input column indices covering every column (the two forms
            ``BandedRidge(bands=...)`` takes).

        Returns
        -------
        delayed : ndarray of shape (n_features * len(delays),) or list of ndarray
            The same form: the labels repeated once per delay, or each
            band's indices in every block of delayed columns.

        Raises
        ------
        ValueError
            If the index arrays do not partition the columns, or the bands
            do not match ``n_features_in_`` of a fitted Delayer.

        Examples
        --------
        >>> from skbatch import Delayer
        >>> delayer = Delayer(delays=(1, 2))
        >>> delayer.delayed_bands(["motion", "motion", "words"])
        array(['motion', 'motion', 'words', 'motion', 'motion', 'words'],
              dtype='<U6')
        >>> delayer.delayed_bands([[0, 1], [2]])
        [array([0, 1, 3, 4]), array([2, 5])]
        """
        n_delays = len(self._delays()[0])
        as_indices = isinstance(bands, list | tuple) and all(
            np.ndim(band) == 1 and not isinstance(band, str) for band in bands
        )
        if as_indices:
            indices = [np.asarray(band) for band in bands]
            for band in indices:
                if band.size and band.dtype.kind not in "iu":
                    raise ValueError(
                        f"bands given as index arrays must hold ints, got dtype "
                        f"{band.dtype}"
                    )
            n_features = sum(band.size for band in indices)
            if not indices or not np.array_equal(
                np.sort(np.concatenate(indices)), np.arange(n_features)
            ):
                raise ValueError(
                    f"bands given as index arrays must be disjoint and cover every "
                    f"input column 0 ... n_features - 1 once, got {bands!r}"
                )
        else:
            labels = np.asarray(bands)
            if labels.ndim != 1 or labels.size == 0:
                raise ValueError(
                    f"bands must be one label per input column, or a list of index "
                    f"arrays, got an array of shape {labels.shape}"
                )
            n_features = labels.size
        if hasattr(self, "n_features_in_") and n_features != self.n_features_in_:
            raise ValueError(
                f"bands describe {n_features} input columns but the Delayer was "
                f"fit on {self.n_features_in_}"
            )
        if as_indices:
            offsets = n_features * np.arange(n_delays)
            return [
                (band[None, :] + offsets[:, None]).ravel().astype(np.intp)
                for band in indices
            ]
        return np.tile(labels, n_delays)
