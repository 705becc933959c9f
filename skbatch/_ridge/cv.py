"""Cross-validation schemes of the ridge solver, and their registry.

A scheme scores every alpha of a batch of targets from the decomposition of
the design matrix, without refitting per alpha:

- :class:`LeaveOneOut` (``cv=None``): exact leave-one-out from the thin SVD
  of all rows;
- :class:`GeneralizedCV` (``cv="gcv"``): generalized cross-validation from
  the same SVD;
- :class:`KFold` (an int, a splitter or an iterable of splits): one SVD per
  fold's training rows, the test rows predicted in that basis.

Every scheme implements the same small interface: ``split`` (draw and check
its folds), ``nbytes`` (device bytes of its decompositions, from the shapes
alone, before anything is decomposed), ``decompose`` and ``scores``.
:func:`cv_scheme` maps a ``cv`` value to a scheme: ``None`` and strings
through :data:`CV_SCHEMES`, anything else is K-fold. A new scheme is one
class here and one line in :data:`CV_SCHEMES`; ``BatchedRidge`` and the
ridge fast path of ``PermutationScorer`` then accept its key as ``cv``.
"""

import warnings

import numpy as np
from sklearn.model_selection import check_cv

# What scikit-learn raises for a bad parameter (a ValueError and a TypeError),
# private to it: BatchedRidge's other parameters raise it through
# ridge.py's _parameter_constraints, so a bad cv raises it too.
from sklearn.utils._param_validation import InvalidParameterError
from sklearn.utils.metadata_routing import get_routing_for_object

from .._backends.side_by_side import map_threads
from .._engine import Portable
from .._kernels import linalg as _linalg
from .._kernels.linalg import MIN_SCORED_ROWS

__all__ = [
    "CV_SCHEMES",
    "GeneralizedCV",
    "KFold",
    "LeaveOneOut",
    "check_fold_weights",
    "cv_scheme",
    "fold_rows",
    "uses_groups",
]

# Fewest rows (or rows of non-zero weight) a fit accepts: one row has no
# deviation from its mean, so nothing to fit and nothing to cross-validate.
MIN_SAMPLES = 2
# Row indices that form at most this many runs of consecutive rows (KFold
# without shuffling: two) are read as slices, views rather than copies.
MAX_ROW_RUNS = 4


def uses_groups(cv):
    """Whether splitter ``cv`` splits by groups, and so is given them.

    scikit-learn's splitters that do request ``groups`` for ``split`` in
    their metadata routing (GroupKFold, LeaveOneGroupOut...); its others
    ignore them, and some warn when given them (StratifiedKFold). Groups
    also serve the permutations, the bootstrap and a ridge's residual
    autocorrelation check, so they reach those splitters as None rather than
    as a warning on every fit. Any other splitter is given them, as
    ``cross_validate`` gives them.
    """
    if not type(cv).__module__.startswith("sklearn."):
        return True
    return bool(get_routing_for_object(cv).consumes("split", ["groups"]))


class CVScheme:
    """How alphas are scored. Subclasses implement :meth:`scores`."""

    #: Scorings the scheme computes; None is its default criterion.
    scorings = (None, "r2", "neg_mean_squared_error", "correlation")

    def __init__(self, cv=None):
        self.cv = cv

    def check_scoring(self, scoring):
        """Refuse a scoring the scheme does not compute."""
        if scoring not in self.scorings:
            raise ValueError(
                f"cv={self.cv!r} supports only scoring in {self.scorings}, got "
                f"scoring={scoring!r}"
            )

    def split(self, X, y, sample_weight=None, scoring=None, groups=None):
        """Draw and check the folds of ``X`` and ``y`` (host arrays); self.

        ``groups`` go to a splitter that uses them.
        """
        return self

    def weights(self, sample_weight):
        """``(sample_weight, n_effective)`` as the scheme's criterion reads them."""
        return sample_weight, None

    def nbytes(self, n_features, itemsize):
        """Device bytes of the scheme's decompositions beyond the full SVD."""
        return 0

    #: Whether :meth:`scores` reads ``UtY``, the targets' coordinates in the
    #: SVD of all rows.
    reads_projection = True
    #: Whether :meth:`scores` reads the targets' squared norms, the same for
    #: every design of a shared factorisation (given as ``shared``).
    reads_norms = False
    #: Whether :meth:`scores` reads U itself on every batch, not only
    #: ``UtY``: a design of a shared factorisation then forms it once.
    reads_basis = True

    def decompose(
        self, X, weight, backend, *, fit_intercept, full, folds=None, alpha=0.0
    ):
        """``(full(), state)``: the SVD of all rows, and what :meth:`scores` reads.

        ``full`` decomposes all rows; a scheme with decompositions of its own
        runs them side by side with it. ``folds``, one callable per split
        giving ``(U, s, X_test_V, coords)``, decomposes them in place of the
        scheme (:class:`skbatch._ridge.banded.SharedFactors`). ``alpha``, the
        smallest alpha solved, is that of the scheme's own SVDs
        (:func:`skbatch._kernels.linalg.svd_decompose`).
        """
        return full(), None

    def scores(self, solver, state, Y, Y_centered, Y_offset, UtY, shared=None):
        """Scores (n_alphas, n_targets) of one batch of device targets.

        ``shared``: a scheme's own projections of the batch, made once for
        the designs of one shared factorisation
        (:meth:`skbatch._ridge.banded.SharedFactors.project`).
        """
        raise NotImplementedError

    def no_model_score(self, Y, sample_weight, scoring, fit_intercept):
        """Each target's score without a model: the limit of an infinite alpha.

        The target's (weighted) mean, or 0 without an intercept, predicts
        every row: GCV's squared error of the spread around it, inflated by
        ``(n / (n - 1))^2``; the other schemes score their own held-out
        means. A correlation has no such limit: None.
        """
        if scoring == "correlation":
            return None
        if scoring == "r2":
            return np.zeros(Y.shape[1])
        center = np.average(Y, axis=0, weights=sample_weight) if fit_intercept else 0.0
        spread = np.average((Y - center) ** 2, axis=0, weights=sample_weight)
        if fit_intercept:
            n = Y.shape[0]
            spread *= (n / (n - 1)) ** 2
        return -spread


class LeaveOneOut(CVScheme):
    """Exact leave-one-out from the thin SVD of all rows (``cv=None``)."""

    def no_model_score(self, Y, sample_weight, scoring, fit_intercept):
        """The leave-one-out score of the mean of the other rows.

        Left out, row i is predicted by the (weighted) mean of the others,
        an error of ``(y_i - mean) * W / (W - w_i)`` (W the total weight), or
        by 0 without an intercept; scored as :meth:`scores` scores errors.
        """
        if scoring == "correlation":
            return None
        Y = np.asarray(Y, dtype=np.float64)
        n_samples = Y.shape[0]
        weight = np.ones(n_samples) if sample_weight is None else sample_weight
        errors = Y
        if fit_intercept:
            total = np.sum(weight)
            errors = (Y - weight @ Y / total) * (total / (total - weight))[:, None]
        if scoring is None:
            return -(weight @ errors**2) / n_samples
        return _linalg.score_per_target(
            Y, Y - errors, scoring, sample_weight=sample_weight, warn=False, xp=np
        )

    def scores(self, solver, state, Y, Y_centered, Y_offset, UtY, shared=None):
        return _linalg.loo_scores(
            solver.U,
            solver.s,
            UtY,
            Y_centered,
            solver.alphas,
            fit_intercept=solver.fit_intercept,
            sample_weight=solver.sample_weight,
            scoring=solver.scoring,
            xp=solver.xp,
        )


class GeneralizedCV(CVScheme):
    """Generalized cross-validation from the thin SVD (``cv="gcv"``).

    With weights, the criterion is ``(sum_i w_i r_i^2 / n_eff) /
    (1 - tr(H) / n_eff)^2`` with the weights normalised to sum to ``n_eff``,
    the number of rows of non-zero weight (:meth:`weights`).
    """

    scorings = (None,)
    reads_norms = True
    # U only forms the residual of a float32 batch or of targets whose norm
    # cancels (residual_sq_norm): Q coords serves that, formed per use.
    reads_basis = False

    def weights(self, sample_weight):
        if sample_weight is None:
            return None, None
        # Only the ratios of the weights then matter, and a row of weight 0
        # is the same as no row.
        n_effective = np.count_nonzero(sample_weight)
        return sample_weight * (n_effective / np.sum(sample_weight)), n_effective

    def scores(self, solver, state, Y, Y_centered, Y_offset, UtY, shared=None):
        xp = solver.xp
        basis, coords = solver.factored_U()
        sq_norm = _linalg.residual_sq_norm(
            basis,
            UtY,
            Y_centered,
            fit_intercept=solver.fit_intercept,
            total=shared,
            coords=coords,
            xp=xp,
        )
        return _linalg.gcv_scores(
            solver.s,
            UtY,
            sq_norm,
            solver.n_effective,
            solver.alphas,
            fit_intercept=solver.fit_intercept,
            xp=xp,
        )


class KFold(CVScheme):
    """Held-out folds: one SVD per fold's training rows (int, splitter, splits).

    The score of each alpha is the unweighted mean of its fold scores, as in
    ``GridSearchCV``; None scores R^2.
    """

    splits = None

    def splitter(self):
        """The scikit-learn splitter whose folds this scheme scores."""
        return check_cv(self.cv)

    def split(self, X, y, sample_weight=None, scoring=None, groups=None):
        n_samples = X.shape[0]
        splitter = self.splitter()
        if not uses_groups(splitter):
            groups = None
        self.splits = [
            (
                fold_rows(train, n_samples, fold, "training"),
                fold_rows(test, n_samples, fold, "test"),
            )
            for fold, (train, test) in enumerate(splitter.split(X, y, groups))
        ]
        _check_splits(self.splits, self.cv, sample_weight, scoring)
        return self

    def nbytes(self, n_features, itemsize):
        # Per fold, the training basis and the test rows in it, the rank at
        # its bound.
        return itemsize * sum(
            (len(train) + len(test)) * min(len(train), n_features)
            for train, test in self.splits
        )

    reads_projection = False
    reads_basis = False

    def decompose(
        self, X, weight, backend, *, fit_intercept, full, folds=None, alpha=0.0
    ):
        bases = [None] * len(self.splits) if folds is None else folds

        def fold(split, basis):
            return _Fold(
                X,
                weight,
                *split,
                backend,
                fit_intercept=fit_intercept,
                basis=basis,
                alpha=alpha,
            )

        # All rows and every fold: independent decompositions, side by side.
        parts = [
            full,
            *(
                lambda split=split, basis=basis: fold(split, basis)
                for split, basis in zip(self.splits, bases)
            ),
        ]
        full_result, *folds = map_threads(lambda part: part(), parts, backend)
        return full_result, folds

    def scores(self, solver, state, Y, Y_centered, Y_offset, UtY, shared=None):
        total = 0.0
        for k, fold in enumerate(state):
            # The fold's training rows of the targets centred on all rows:
            # U's columns are orthogonal to the (weighted) mean direction, so
            # projecting them equals projecting the rows centred on their own
            # means, and the training mean is one shift of the test targets.
            coords = None
            if shared is None:
                UtY_fold, train_mean = fold.project(
                    Y_centered, with_mean=solver.fit_intercept
                )
            else:
                # U = Q coords: the shared Q'Y of the fold, mapped to U's
                # coordinates, or the test rows to Q's where that is cheaper.
                UtY_fold, train_mean = shared[k]
                coords = fold.coords
                if not _maps_test_rows(
                    coords, fold.X_test_V, len(solver.alphas), Y.shape[1]
                ):
                    UtY_fold, coords = coords.T @ UtY_fold, None
            # Offset first, then the small training mean: in float32 their sum
            # would round the mean away on targets far from zero.
            y_true = fold.test_rows(Y) - Y_offset
            y_true -= train_mean
            total = total + _linalg.holdout_scores(
                fold.s,
                fold.X_test_V,
                UtY_fold,
                y_true,
                solver.alphas,
                scoring=solver.scoring or "r2",
                sample_weight=fold.test_weight,
                coords=coords,
                xp=solver.xp,
            )
        return total / len(state)

    def shared_scores(self, solvers, Y, Y_offset, shared):
        """Scores (n_solvers, n_alphas, n_targets) of designs of one shared
        factorisation (:class:`skbatch._ridge.banded.SharedFactors`) for a
        batch of device targets: those of :meth:`scores` for each solver,
        with each fold's test targets and their spread made once for all the
        designs, not once per design.

        ``shared``: each fold's ``(Q_k'Y[train], training mean)``.
        """
        first = solvers[0]
        xp, scoring = first.xp, first.scoring or "r2"
        n_alphas, n_targets = len(first.alphas), Y.shape[1]
        total = 0.0
        for k, fold in enumerate(first.state):
            QtY, train_mean = shared[k]
            # As scores forms them; the same test rows and weights in every
            # design's fold.
            y_true = fold.test_rows(Y) - Y_offset
            y_true -= train_mean
            spread = _linalg.holdout_spread(y_true, scoring, fold.test_weight, xp=xp)
            scores = []
            for solver in solvers:
                design = solver.state[k]
                UtY, coords = QtY, design.coords
                if not _maps_test_rows(coords, design.X_test_V, n_alphas, n_targets):
                    UtY, coords = coords.T @ QtY, None
                scores.append(
                    _linalg.holdout_scores(
                        design.s,
                        design.X_test_V,
                        UtY,
                        y_true,
                        first.alphas,
                        scoring=scoring,
                        sample_weight=fold.test_weight,
                        coords=coords,
                        spread=spread,
                        xp=xp,
                    )
                )
            total = total + xp.stack(scores)
        return total / len(first.state)

    def no_model_score(self, Y, sample_weight, scoring, fit_intercept):
        """The mean over folds of each training mean's score on its test rows.

        Every fold predicts its test rows by the (weighted) mean of its
        training rows, or by 0 without an intercept, scored (R^2 without a
        scoring) and averaged as :meth:`scores` does.
        """
        scoring = scoring or "r2"
        if scoring == "correlation":
            return None
        Y = np.asarray(Y, dtype=np.float64)
        total = 0.0
        for train, test in self.splits:
            prediction = np.zeros(Y.shape[1])
            if fit_intercept:
                weight = None if sample_weight is None else sample_weight[train]
                prediction = np.average(Y[train], axis=0, weights=weight)
            total = total + _linalg.score_per_target(
                Y[test],
                np.broadcast_to(prediction, (len(test), Y.shape[1])),
                scoring,
                sample_weight=None if sample_weight is None else sample_weight[test],
                warn=False,
                xp=np,
            )
        return total / len(self.splits)


def _maps_test_rows(coords, X_test_V, n_alphas, n_targets):
    """Whether mapping each alpha's filtered test rows into Q's coordinates
    (n_test x rank x n_columns per alpha, then n_test x n_columns per alpha
    and target) costs fewer products for a batch of ``n_targets`` than
    mapping Q'Y into U's (rank x n_columns per target, then n_test x rank
    per alpha and target). The first does not grow with the batch; the
    second does."""
    n_columns, rank = coords.shape
    n_test = X_test_V.shape[0]
    rows = n_alphas * n_test * (rank * n_columns + n_columns * n_targets)
    projection = rank * n_columns * n_targets + n_alphas * n_test * rank * n_targets
    return rows < projection


# ``cv`` values that name a scheme; any other value is K-fold.
CV_SCHEMES = {None: LeaveOneOut, "gcv": GeneralizedCV}


def cv_scheme(cv, scoring=None):
    """A new scheme for ``cv``, with ``scoring`` checked against it.

    Raises
    ------
    ValueError
        For a string that names no scheme, or a scoring the scheme does not
        compute.
    """
    if cv is None or isinstance(cv, str):
        if cv not in CV_SCHEMES:
            names = [name for name in CV_SCHEMES if name is not None]
            raise InvalidParameterError(
                f"cv must be None (leave-one-out), an int, a CV splitter, an "
                f"iterable of splits or one of {names}, got {cv!r}"
            )
        scheme = CV_SCHEMES[cv](cv)
    else:
        scheme = KFold(cv)
    scheme.check_scoring(scoring)
    return scheme


def fold_rows(rows, n_samples, fold, part):
    """The rows of one side of a split as non-negative int indices, checked.

    Splits given by the user index rows as ``X[rows]`` would, as scikit-learn
    reads them: integers, negative ones counted from the end, or a boolean
    mask over the rows.
    """
    rows = np.asarray(rows)
    if rows.ndim != 1:
        raise ValueError(
            f"cv fold {fold}: the {part} rows must be 1-D, got an array of "
            f"shape {rows.shape}"
        )
    if rows.dtype == bool:
        if rows.size != n_samples:
            raise ValueError(
                f"cv fold {fold}: a boolean mask of {part} rows must have one "
                f"entry per sample ({n_samples}), got {rows.size}"
            )
        return np.flatnonzero(rows)
    if rows.size == 0:
        return np.zeros(0, dtype=np.intp)
    if rows.dtype.kind not in "iu":
        raise TypeError(
            f"cv fold {fold}: the {part} rows must be integer indices or a "
            f"boolean mask, got dtype {rows.dtype}"
        )
    low, high = rows.min(), rows.max()
    if low < -n_samples or high >= n_samples:
        outside = rows[(rows < -n_samples) | (rows >= n_samples)]
        raise ValueError(
            f"cv fold {fold}: {part} row index {int(outside[0])} is out of range "
            f"for {n_samples} samples"
        )
    if low < 0:
        rows = np.where(rows < 0, rows + n_samples, rows)
    return rows.astype(np.intp, copy=False)


def check_fold_weights(splits, sample_weight, *, scored_per_fold=True):
    """Refuse a fold whose training rows, or (``scored_per_fold``) test rows,
    all weigh 0, naming it: nothing to fit, or a score of 0 / 0 (NaN)."""
    if sample_weight is None:
        return
    for i, (train, test) in enumerate(splits):
        if not np.any(sample_weight[train]):
            raise ValueError(
                f"sample_weight is 0 on all {len(train)} training rows of cv fold "
                f"{i}: that fold has nothing to fit; give some of its training "
                "rows a positive weight or use another cv"
            )
        if scored_per_fold and not np.any(sample_weight[test]):
            raise ValueError(
                f"sample_weight is 0 on all {len(test)} test rows of cv fold {i}: "
                "that fold has nothing to score (its score would be NaN, 0 / 0); "
                "give some of its test rows a positive weight or use a cv "
                "whose test folds each hold rows of positive weight"
            )


def _check_splits(splits, cv, sample_weight, scoring):
    """Refuse folds no ridge can be fit or scored on; warn of undefined scores.

    Run on the host before any decomposition: a refused fit has changed
    nothing.
    """
    if not splits:
        raise ValueError(
            f"cv must yield at least one train/test split, got none from cv={cv!r} "
            "(an empty list or an exhausted generator?)"
        )
    for i, (train, test) in enumerate(splits):
        if len(test) == 0:
            raise ValueError(
                f"cv yielded an empty test fold (fold {i}, with {len(train)} "
                "training rows): every fold must hold out at least one row"
            )
        if len(train) < MIN_SAMPLES:
            raise ValueError(
                f"cv fold {i} has {len(train)} training row(s): a ridge fit needs "
                f"at least {MIN_SAMPLES} samples; use fewer folds"
            )
    check_fold_weights(splits, sample_weight)
    sizes = np.array([len(test) for _, test in splits])
    if scoring != "neg_mean_squared_error" and np.any(sizes < MIN_SCORED_ROWS):
        name = "correlation" if scoring == "correlation" else "R^2"
        warnings.warn(
            f"cv has test folds of fewer than {MIN_SCORED_ROWS} rows (test fold "
            f"sizes {np.array2string(sizes, threshold=20)}): their {name} is "
            "undefined (NaN), so every alpha scores NaN, the first alpha is "
            "kept and best_score_ is NaN. Use fewer folds, cv=None (exact "
            "leave-one-out) or scoring='neg_mean_squared_error'.",
            UserWarning,
            # Past this function, KFold.split, fit and its atomic_fit wrapper,
            # to the caller's line.
            stacklevel=5,
        )


def _row_runs(indices):
    """``[(position, row, length), ...]`` of consecutive runs, or None if many."""
    indices = np.asarray(indices)
    breaks = np.flatnonzero(np.diff(indices) != 1) + 1
    if indices.size == 0 or breaks.size >= MAX_ROW_RUNS:
        return None
    bounds = np.concatenate(([0], breaks, [indices.size]))
    return [
        (int(start), int(indices[start]), int(stop - start))
        for start, stop in zip(bounds[:-1], bounds[1:])
    ]


class _Fold(Portable):
    """One train/test split: its training rows decomposed, its rows located."""

    def __init__(
        self, X, weight, train, test, backend, *, fit_intercept, basis=None, alpha=0.0
    ):
        xp = backend.xp
        self.xp = xp
        self.train_runs, self.test_runs = _row_runs(train), _row_runs(test)
        self.train, self.test = backend.asarray(train), backend.asarray(test)
        self.n_train = len(train)
        self.root_weight = self.test_weight = None
        train_weight = None
        if weight is not None:
            # Test rows are scored with their weights, as RidgeCV(cv=K) does.
            self.test_weight = xp.take(weight, self.test, axis=0)
            train_weight = xp.take(weight, self.train, axis=0)
            self.root_weight = xp.sqrt(train_weight)
            self.total_weight = xp.sum(train_weight)
        # The fold's basis in that of a shared factorisation (U = Q coords),
        # or of its own SVD.
        self.coords = None
        if basis is not None:
            self.U, self.s, self.X_test_V, self.coords = basis()
            return
        self.U, self.s, self.X_test_V = _linalg.fold_basis(
            xp.take(X, self.train, axis=0),
            xp.take(X, self.test, axis=0),
            fit_intercept=fit_intercept,
            sample_weight=train_weight,
            alpha=alpha,
            xp=xp,
        )

    def _blocks(self, A, runs, indices):
        """``(positions, rows of A)`` pairs covering the fold's rows of ``A``."""
        if runs is None:
            return [(slice(None), self.xp.take(A, indices, axis=0))]
        return [
            (slice(position, position + length), A[row : row + length])
            for position, row, length in runs
        ]

    def project(self, Y_centered, *, with_mean):
        """``U' Y_centered[train]``, one product per run of rows.

        With ``with_mean``, also the (weighted) mean of those rows, unscaled,
        read in the same pass: ``Y_centered`` rows carry sqrt(w), so
        ``sqrt(w)' Y_centered[train] / sum(w[train])`` is the training mean
        of ``Y - Y_offset``. Without it the mean is 0.0.
        """
        xp = self.xp
        UtY = total = 0.0
        for positions, rows in self._blocks(Y_centered, self.train_runs, self.train):
            UtY = UtY + self.U[positions].T @ rows
            if not with_mean:
                continue
            if self.root_weight is None:
                total = total + xp.sum(rows, axis=0)
            else:
                total = total + self.root_weight[positions] @ rows
        if not with_mean:
            return UtY, 0.0
        if self.root_weight is None:
            return UtY, total / self.n_train
        return UtY, total / self.total_weight

    def test_rows(self, Y):
        """``Y[test]``: a view when the test rows are one run."""
        blocks = self._blocks(Y, self.test_runs, self.test)
        if len(blocks) == 1:
            return blocks[0][1]
        return self.xp.concat([rows for _, rows in blocks], axis=0)
