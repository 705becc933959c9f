"""The bands, band weights and candidates of a banded ridge, checked before
any work (the count of candidates before any is drawn)."""

import numbers
from collections.abc import Mapping, Set

import numpy as np
from array_api_compat import array_namespace

from ..._kernels import linalg as _linalg
from ...random import resolve_entropy
from ..spec import centred_column_norms, decomposed_dtype, smallest_alpha

# Band weights below this share of their candidate's largest are 0 (drawn or
# given: himalaya's draws hold weights of 1e-15): such a band's alpha is
# 1e12 times the others', which leaves its coefficients at 0 to within
# rounding, while its columns, rescaled by the square root of the weight,
# would be beyond what the SVD resolves beside the others
# (skbatch._kernels.linalg.svd_decompose refuses such a spread of column norms).
WEIGHT_FLOOR = 1e-12
# Seeds that numpy's legacy RandomState takes as one 32-bit word (MT19937's
# init_genrand, as himalaya's RandomState(int) seeds): below this.
LEGACY_SEED_LIMIT = 2**32


def check_bands(bands, n_features):
    """Column indices of each band and the bands' names.

    Parameters
    ----------
    bands : None, array-like of shape (n_features,) or list of array-like
        A label (int >= 0 or str) per column, in any order (columns of one
        band may be interleaved), or one array of column indices per band.
        None: one band of every column.
    n_features : int

    Returns
    -------
    columns : list of ndarray of int
        The columns of each band, increasing.
    names : ndarray of shape (n_bands,)
        The labels sorted (as ``np.unique`` sorts them, and himalaya orders
        its groups), or 0 .. n_bands - 1 for index arrays and None. Band b
        is column b of ``band_weights``.

    Raises
    ------
    ValueError, TypeError
        Naming ``bands``, for anything that is not a partition of the columns.
    """
    if bands is None:
        return [np.arange(n_features)], np.arange(1)
    if isinstance(bands, str | Mapping | Set) or np.isscalar(bands):
        raise TypeError(
            f"bands must be None, a label per column of X or a list of column "
            f"index arrays, got {type(bands).__name__}: {bands!r}"
        )
    items = list(bands)
    if not items:
        raise ValueError(
            "bands is empty: give a label per column of X or a list of column "
            "index arrays, or None for one band"
        )
    if any(np.ndim(item) != 0 for item in items):
        for b, item in enumerate(items):
            if isinstance(item, str) or np.ndim(item) != 1:
                raise TypeError(
                    f"bands as a list of column index arrays needs a 1-D array "
                    f"per band; bands[{b}] is {item!r} (shape {np.shape(item)}). "
                    f"For a label per column, give scalar labels only."
                )
        return _bands_from_indices(items, n_features), np.arange(len(items))
    strings = [isinstance(item, str) for item in items]
    if any(strings) and not all(strings):
        # numpy would read the numbers as strings too.
        raise TypeError(
            f"bands labels must all be int or all be str, got "
            f"{sorted({type(item).__name__ for item in items})}"
        )
    labels = np.asarray(items)
    if labels.dtype.kind not in "iuUSO":
        raise TypeError(
            f"bands must be int or str labels (one per column of X) or a list "
            f"of 1-D column index arrays, got labels of dtype {labels.dtype}"
        )
    if labels.dtype.kind == "O" and not all(isinstance(v, str) for v in labels):
        raise TypeError(
            f"bands labels must all be int or all be str, got "
            f"{sorted({type(v).__name__ for v in labels})}"
        )
    if labels.size != n_features:
        raise ValueError(
            f"bands must have one label per column of X ({n_features} columns), "
            f"got {labels.size} labels"
        )
    if labels.dtype.kind == "i" and np.any(labels < 0):
        raise ValueError(
            f"bands has negative label {int(labels[labels < 0][0])}: labels are "
            f"ints >= 0 or strings. Every column is in a band (in himalaya a "
            f"negative label leaves a column out: drop those columns from X)"
        )
    names, inverse = np.unique(labels, return_inverse=True)
    inverse = inverse.ravel()
    columns = [np.flatnonzero(inverse == b) for b in range(names.size)]
    return columns, names


def _bands_from_indices(items, n_features):
    owner = np.full(n_features, -1)
    columns = []
    for b, item in enumerate(items):
        indices = np.asarray(item)
        if indices.size == 0:
            raise ValueError(f"bands[{b}] is empty: every band needs a column")
        if indices.dtype.kind not in "iu":
            raise TypeError(
                f"bands[{b}] must hold integer column indices, got dtype "
                f"{indices.dtype}"
            )
        outside = indices[(indices < 0) | (indices >= n_features)]
        if outside.size:
            raise ValueError(
                f"bands[{b}] has column index {int(outside[0])}, out of range "
                f"for X of {n_features} columns (0 to {n_features - 1})"
            )
        values, counts = np.unique(indices, return_counts=True)
        if np.any(counts > 1):
            raise ValueError(
                f"bands[{b}] lists column {int(values[counts > 1][0])} more than "
                f"once; each column is in one band, once"
            )
        taken = owner[indices] >= 0
        if taken.any():
            column = int(indices[taken][0])
            raise ValueError(
                f"bands: column {column} is in bands[{int(owner[column])}] and "
                f"bands[{b}]; bands must be disjoint"
            )
        owner[indices] = b
        columns.append(np.sort(indices).astype(np.intp))
    missing = np.flatnonzero(owner < 0)
    if missing.size:
        raise ValueError(
            f"bands must cover every column of X: {missing.size} column(s) are "
            f"in no band, the first {int(missing[0])}"
        )
    return columns


def _numbers(value):
    """``value`` as an ndarray of ints or floats, or None for what numpy
    cannot read as numbers (bools included). The caller refuses first what
    numpy would read as numbers by mistake (a string: ``"1"``)."""
    try:
        values = np.asarray(value)
    except (TypeError, ValueError):
        return None
    return values if values.dtype.kind in "iuf" else None


def check_concentration(concentration):
    """``concentration`` as a non-empty 1-D float64 array of positive values."""
    values = None if isinstance(concentration, str) else _numbers(concentration)
    if values is None:
        raise TypeError(
            f"concentration must be a positive float or a 1-D sequence of "
            f"positive floats, got {type(concentration).__name__}: "
            f"{concentration!r}"
        )
    values = np.atleast_1d(values.astype(np.float64))
    if (
        values.ndim != 1
        or values.size == 0
        or not np.all(np.isfinite(values))
        or np.any(values <= 0)
    ):
        raise ValueError(
            f"concentration must be positive and finite, one value or a "
            f"non-empty 1-D sequence of them, got {concentration!r}"
        )
    return values


def check_band_weights(band_weights, n_bands):
    """An int of candidates to draw, or explicit candidates normalised.

    Returns
    -------
    int or ndarray of shape (n_candidates, n_bands)
        Rows of an explicit array divided by their sums.
    """
    if isinstance(band_weights, numbers.Integral) and not isinstance(
        band_weights, bool
    ):
        if band_weights < 1:
            raise ValueError(
                f"band_weights must be an int >= 1 (candidates to draw) or an "
                f"array of candidates, got {band_weights!r}"
            )
        return int(band_weights)
    values = None
    if not isinstance(band_weights, str | bool | numbers.Number):
        values = _numbers(band_weights)
    if values is None:
        raise TypeError(
            f"band_weights must be an int >= 1 (candidates to draw) or an array "
            f"of shape (n_candidates, n_bands) of non-negative weights, got "
            f"{type(band_weights).__name__}: {band_weights!r}"
        )
    values = values.astype(np.float64)
    if values.ndim != 2 or values.shape[0] == 0 or values.shape[1] != n_bands:
        raise ValueError(
            f"band_weights as an array must have shape (n_candidates, {n_bands}), "
            f"one column per band, got shape {values.shape}"
        )
    if not np.all(np.isfinite(values)) or np.any(values < 0):
        raise ValueError(
            "band_weights must be non-negative and finite, got "
            f"{np.count_nonzero(~(values >= 0) | ~np.isfinite(values))} value(s) "
            "that are not"
        )
    zero = np.flatnonzero(values.max(axis=1) == 0)
    if zero.size:
        raise ValueError(
            f"band_weights row {int(zero[0])} is all zero: every candidate needs "
            f"a band of positive weight"
        )
    return _normalised(values)


def _normalised(values):
    """Rows of non-negative finite values, none all zero, divided by their
    sums. Each row is first scaled by the power of two that brings its
    largest value into [0.5, 1), so that its sum is at most n_bands: a row of
    finite values whose sum overflows (``[1e308, 1e308]``) is normalised
    exactly (``[0.5, 0.5]``). A power of two scales without rounding, so
    every other row is divided by its sum to the last bit as before (only
    values below 2**-1000 of their row's largest, far below
    :data:`WEIGHT_FLOOR`, can lose bits as subnormals)."""
    _, exponent = np.frexp(values.max(axis=1, keepdims=True))
    values = np.ldexp(values, -exponent)
    return values / values.sum(axis=1, keepdims=True)


def n_candidates(band_weights, n_bands):
    """The number of candidates of checked ``band_weights``
    (:func:`check_band_weights`), from the count or the array alone,
    nothing drawn: a count draws one with one band (:func:`band_candidates`)."""
    if not isinstance(band_weights, int):
        return len(band_weights)
    return 1 if n_bands == 1 else band_weights


def band_candidates(band_weights, n_bands, concentration, random_state):
    """The candidates (n_candidates, n_bands), rows on the simplex.

    For an int m: m candidates, the first weighting every band equally, the
    others Dirichlet draws whose concentration cycles through
    ``concentration`` (candidate k draws at ``concentration[k % len]``), as
    himalaya's random search (``himalaya.ridge.solve_banded_ridge_random_search``)
    draws them: its ``generate_dirichlet_samples(m, n_bands, concentration,
    random_state)``, every concentration's draws in one block of
    ``ceil(m / len)`` from a legacy ``numpy.random.RandomState``, the rows
    interleaved, the first then replaced by the equal weights. The draws
    equal himalaya's for an int ``random_state`` below 2**32 (a
    ``RandomState(random_state)`` both); another ``random_state`` seeds the
    RandomState with the entropy it gives
    (:func:`skbatch.random.resolve_entropy`), where himalaya would draw from
    a RandomState instance itself. Unlike himalaya, a draw that float64
    cannot hold (a tiny concentration: every weight 0 or NaN) is a vertex
    of the simplex, drawn after all the others, and weights below
    :data:`WEIGHT_FLOOR` of their row's largest are 0. One band has one
    candidate, weight 1.
    """
    if not isinstance(band_weights, int):
        return _floored(band_weights)
    if n_bands == 1:
        return np.ones((1, 1))
    rng = _legacy_rng(resolve_entropy(random_state))
    per_concentration = -(-band_weights // concentration.size)
    blocks = np.stack(
        [
            rng.dirichlet(np.full(n_bands, scale), per_concentration)
            for scale in concentration
        ]
    )
    # (concentration, draw, band) -> draw k at concentration k % len.
    candidates = np.swapaxes(blocks, 0, 1).reshape(-1, n_bands)[:band_weights]
    candidates[0] = 1.0 / n_bands
    # A tiny concentration can draw all weights as 0 or NaN in float64: the
    # limit, a vertex of the simplex.
    lost = np.flatnonzero(
        ~(np.all(np.isfinite(candidates), axis=1) & (candidates.sum(axis=1) > 0))
    )
    candidates[lost] = np.eye(n_bands)[rng.randint(n_bands, size=lost.size)]
    return _floored(candidates)


def _legacy_rng(entropy):
    """The RandomState that himalaya's ``check_random_state(entropy)`` gives
    for an entropy below :data:`LEGACY_SEED_LIMIT`; larger entropy seeds
    MT19937 through a SeedSequence."""
    if entropy < LEGACY_SEED_LIMIT:
        return np.random.RandomState(entropy)
    return np.random.RandomState(np.random.MT19937(entropy))


def check_candidate_scales(
    X,
    columns,
    candidates,
    dtype,
    backend,
    *,
    fit_intercept,
    sample_weight=None,
    alphas=None,
):
    """Refuse, before any work, X or a candidate whose rescaled columns are on
    scales too far apart for the SVD (:func:`skbatch._kernels.linalg.
    check_column_spread`, for alphas from the smallest of ``alphas`` on;
    None: least squares): X's own spread first, as every ridge refuses it,
    then each candidate's, its bands' columns times the square roots of
    their weights. The second names ``band_weights``, the candidate and both
    spreads: a weight small beside X's spread makes a design that the weight
    alone does not explain.
    """
    norms = centred_column_norms(X, fit_intercept, sample_weight)
    if norms is None:
        # The estimator's own check of X refuses NaN and inf, naming them.
        return
    decomposed = decomposed_dtype(dtype, backend)
    alpha = smallest_alpha(alphas)
    # array_api_compat's numpy namespace: numpy 1.x has no astype function.
    xp = array_namespace(norms)
    spread = _linalg.column_spread(norms, xp)
    _linalg.check_column_spread(
        *spread, decomposed, alpha=alpha, norm=_linalg.frobenius_norm(norms, xp)
    )
    limit = _linalg.max_column_spread(decomposed)
    for c, gamma in enumerate(candidates):
        scaled = np.concatenate(
            [norms[cols] * np.sqrt(gamma[b]) for b, cols in enumerate(columns)]
        )
        ratio = _linalg.column_spread(scaled, xp)[0]
        norm = _linalg.frobenius_norm(scaled, xp)
        needed = _linalg.shrinking_alpha(norm, decomposed)
        if ratio > limit and alpha < needed:
            raise ValueError(
                f"band_weights: candidate {c} ({np.array2string(gamma, precision=3)}) "
                f"rescales X's columns to norms {ratio:.3g} times apart (X's own: "
                f"{spread[0]:.3g}), beyond the {limit:.2g} a ridge solve in "
                f"{decomposed} resolves for alphas below {needed:.2g} (the "
                f"smallest is {alpha:.3g}). Rescale the bands to similar scales "
                f"(e.g. sklearn.preprocessing.StandardScaler), or give "
                f"band_weights without weights that small (drawn candidates: a "
                f"larger concentration)."
            )


def _floored(candidates):
    """Rows with the weights below :data:`WEIGHT_FLOOR` of their largest at 0,
    normalised again."""
    candidates = np.where(
        candidates < WEIGHT_FLOOR * candidates.max(axis=1, keepdims=True),
        0.0,
        candidates,
    )
    return _normalised(candidates)
