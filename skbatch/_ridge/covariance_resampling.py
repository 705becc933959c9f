"""The covariance decomposition under PermutationScorer's ridge fast path.

Permuting (or sign-flipping) the rows of ``Y`` leaves X unchanged, so every
training covariance of the permutation test (each outer fold's, and each
inner fold's that chooses its alpha) is decomposed once, by one ``eigh``
(:class:`CovariancePermutedProblem`). The rows are cut once into *atoms*,
the coarsest partition of which every training and test set of the outer
and inner folds is a union (the trials, for leave-one-trial-out within
leave-one-trial-out): X's moments are formed once per atom, a training
set's are the sum of its atoms'. A batch of permutations is a batch of
extra target columns: their cross-moments with X are formed once per atom
in one pass over the rows (``X_a' P Y``), each training set's cross-moments
are sums of those, and every held-out score is computed from the
eigenbasis as :class:`~skbatch._ridge.covariance.CovarianceSolver` computes
it. No n x p factor is formed, nor any SVD.

:func:`permuted_decomposition` is the rule: the estimator's ``solver``
settled by :func:`~skbatch._ridge.covariance.choose_decomposition` on each
outer fold's training rows and inner scheme, as ``BatchedRidge`` settles it
on those rows; with "auto", :meth:`CovariancePermutedProblem.accurate` then
says whether the conditioning keeps the covariance
(:func:`build_permuted_problem`).
"""

import math

import numpy as np
from array_api_compat import device as array_device

from .._backends.side_by_side import cpu_workers, map_threads
from .._engine import Portable, plan_batches
from .._kernels import linalg as _linalg
from .covariance import (
    COVARIANCE_MAX_ERROR,
    check_decomposition,
    choose_decomposition,
    row_selections,
)
from .problems.permuted import (
    COUNTER_UPDATE_VALUES,
    PermutedRidgeProblem,
    device_scores,
)
from .problems.solver import CV_WORKSPACE_OVERHEAD
from .spec import RidgeSpec

__all__ = [
    "CovariancePermutedProblem",
    "permuted_decomposition",
    "build_permuted_problem",
    "row_atoms",
]

# p x p float64 matrices one decomposition holds while it runs beside the
# others: its training moments summed from the atoms' (overwritten by the
# centring), eigh's copy of them and workspace (2 p^2, LAPACK's divide and
# conquer), and its eigenvectors.
EIGH_WORKING_MATRICES = 5


def row_atoms(n_samples, sets):
    """The coarsest partition of the rows of which every set is a union.

    Parameters
    ----------
    n_samples : int
    sets : list of ndarrays of int
        Row indices.

    Returns
    -------
    atoms : list of ndarrays of int
        The rows of each atom (sorted), atoms ordered by their first row;
        rows in no set belong to none.
    members : list of lists of int
        For each set, its atoms.
    """
    membership = np.zeros((n_samples, len(sets)), dtype=bool)
    for j, rows in enumerate(sets):
        membership[rows, j] = True
    signature = np.packbits(membership, axis=1)
    _, first, labels = np.unique(
        signature, axis=0, return_index=True, return_inverse=True
    )
    labels = labels.reshape(-1)
    order = np.argsort(first, kind="stable")
    rank = np.empty_like(order)
    rank[order] = np.arange(order.size)
    labels = rank[labels]
    used = membership[first[order]].any(axis=1)
    atoms, index = [], {}
    for label in range(order.size):
        if used[label]:
            index[label] = len(atoms)
            atoms.append(np.flatnonzero(labels == label))
    members = [
        [index[label] for label in np.unique(labels[rows])] if len(rows) else []
        for rows in sets
    ]
    return atoms, members


def permuted_decomposition(spec, X, splits, schemes):
    """``"svd"`` or ``"covariance"``: the decomposition of the fast path.

    The estimator's ``spec.solver`` settled on every outer fold's training
    rows and inner ``scheme`` as ``BatchedRidge`` settles it on its data
    (:func:`~skbatch._ridge.covariance.choose_decomposition`): the
    covariance only where every fold takes it. scikit-learn's estimators
    (``solver="svd"``), per-target fixed alphas and ``BandedRidge`` keep
    the SVD.

    Raises
    ------
    ValueError
        For ``solver="covariance"`` with an inner scheme without folds, as
        ``BatchedRidge.fit`` raises it.
    """
    # A BandedSpec (a RidgeSpec with bands) keeps its own permutation path,
    # whatever the BandedRidge's solver.
    if type(spec) is not RidgeSpec or spec.solver == "svd" or spec.fixed_per_target:
        return "svd"
    chosen = set()
    for (train, _), scheme in zip(splits, schemes):
        check_decomposition(spec.solver, scheme)
        chosen.add(choose_decomposition(spec.solver, scheme, X[train]))
    return "covariance" if chosen == {"covariance"} else "svd"


def build_permuted_problem(problem_class, *args, solver, fallback, **kwargs):
    """The fast path's problem: ``problem_class(*args, **kwargs)``, or, for a
    :class:`CovariancePermutedProblem` that ``solver="auto"`` does not keep
    (:meth:`~CovariancePermutedProblem.accurate`), the SVD's
    :class:`~skbatch._ridge.problems.PermutedRidgeProblem` once
    ``fallback()`` (its memory check) has passed."""
    problem = problem_class(*args, **kwargs)
    if (
        isinstance(problem, CovariancePermutedProblem)
        and solver == "auto"
        and not problem.accurate()
    ):
        del problem
        fallback()
        problem = PermutedRidgeProblem(*args, **kwargs)
    return problem


class _Basis(Portable):
    """One training set decomposed: its atoms, moments and eigenbasis, and
    the test rows it predicts."""

    def __init__(self, atoms, test):
        self.atoms, self.n_test = atoms, len(test)
        self.test = test


class CovariancePermutedProblem(PermutedRidgeProblem):
    """Permutations as extra targets through one ``eigh`` per training set.

    :class:`~skbatch._ridge.problems.PermutedRidgeProblem`'s interface and
    draws (``problem(ids)``, ``observed()``, the sizes), on the covariance
    decomposition: the moments of X per atom (:func:`row_atoms`), one
    ``eigh`` per outer fold's training covariance and, when the estimator
    chooses its alpha, per inner fold's; a batch's cross-moments per atom.
    Inner folds score every alpha as
    :class:`~skbatch._ridge.covariance.CovarianceSolver` scores them (test
    rows through the eigenbasis), the alpha is chosen as
    :meth:`~skbatch._ridge.problems.RidgeSolver.choose_alpha` chooses it,
    and the outer test rows are predicted from its coefficients.

    Parameters
    ----------
    As :class:`~skbatch._ridge.problems.PermutedRidgeProblem`; ``spec``
    without per-target fixed alphas, ``inner_scheme`` giving K-fold schemes.
    """

    def __init__(
        self,
        X,
        Y,
        splits,
        spec,
        inner_scheme,
        backend,
        dtype,
        scoring,
        *,
        n_permutations,
        permutation,
    ):
        self._hold_targets(X, Y, backend, dtype, scoring, n_permutations, permutation)
        xp = self.xp
        self.n_scorings = len(scoring) if isinstance(scoring, tuple) else 1
        many = not spec.alpha_per_target and self.n_targets > 1
        self.columns_per_choice = self.n_targets if many else 1
        self.alphas, self.fit_intercept = spec.alphas, spec.fit_intercept
        self.inner_scoring = spec.scoring or "r2"
        self.n_features = p = X.shape[1]
        self.X = backend.asarray(X, dtype)
        work = self.work_dtype = _linalg.decomposition_dtype(self.X, xp)
        self.anchor = 0
        self.x_shift_work = (
            xp.astype(self.X[self.anchor], work)
            if self.fit_intercept
            else xp.zeros(p, dtype=work, device=array_device(self.X))
        )
        self.x_shift = xp.astype(self.x_shift_work, self.X.dtype)
        sets, self.folds = [], []
        for train, test in splits:
            inner = []
            if spec.tunes:
                scheme = inner_scheme(X[train], Y[train], train)
                for inner_train, inner_test in scheme.splits:
                    inner.append((train[inner_train], train[inner_test]))
            sets += [train, *(rows for rows, _ in inner)]
            self.folds.append((_Basis(None, test), [_Basis(None, t) for _, t in inner]))
        atoms, members = row_atoms(self.n_samples, sets)
        self.atoms = [row_selections(rows, backend) for rows in atoms]
        bases = [basis for outer, inner in self.folds for basis in (outer, *inner)]
        for basis, atoms_of in zip(bases, members):
            basis.atoms = atoms_of
            basis.test = row_selections(basis.test, backend, block=max(basis.n_test, 1))

        def moments(selections):
            return _linalg.gram_moments(
                self.X, selections, None, self.x_shift_work, work, xp=xp
            )

        self.atom_moments = map_threads(moments, self.atoms, backend)
        alpha = float(np.min(self.alphas))

        def decompose(basis):
            weight, sums, gram = _sum_moments(self.atom_moments, basis.atoms)
            covariance = _linalg.centred_gram(
                gram, sums, weight, fit_intercept=self.fit_intercept
            )
            del gram
            eigenvalues, V = _linalg.covariance_eigh(covariance, overwrite=True, xp=xp)
            condition = _linalg.covariance_condition(eigenvalues, alpha, xp=xp)
            cast = [xp.astype(a, self.X.dtype, copy=False) for a in (eigenvalues, V)]
            return condition, (weight, sums), (*cast, V)

        decomposed = map_threads(decompose, bases, backend)
        self.condition = max(part[0] for part in decomposed)
        for basis, (_, moments_k, (eigenvalues, V, V_work)) in zip(bases, decomposed):
            basis.moments = moments_k
            basis.eigenvalues, basis.V, basis.V_work = eigenvalues, V, V_work
        self.n_atoms, self.n_bases = len(atoms), len(bases)
        self.n_test = max(basis.n_test for basis in bases)
        self.fixed_bytes = self._fixed_bytes()
        self.device_bytes_per_item, self.host_bytes_per_item = self.item_bytes(
            self.n_samples,
            self.n_targets,
            p,
            self.n_atoms,
            self.n_test,
            self.alphas.size,
            dtype,
            n_scorings=self.n_scorings,
        )
        self.max_batch_size = max(1, self.max_columns // self.n_targets)

    def accurate(self):
        """Whether ``eps * cond(C + alpha I)`` of every covariance, at the
        smallest alpha, stays below ``COVARIANCE_MAX_ERROR`` (the rule of
        :meth:`~skbatch._ridge.covariance.CovarianceSolver.accurate`)."""
        eps = float(self.xp.finfo(self.work_dtype).eps)
        return eps * self.condition <= COVARIANCE_MAX_ERROR

    # ------------------------------------------------------------------ memory

    @staticmethod
    def item_bytes(
        n_samples,
        n_targets,
        n_features,
        n_atoms,
        n_test,
        n_alphas,
        dtype,
        *,
        n_scorings=1,
    ):
        """Device and host bytes of one permutation (``n_targets`` columns).

        On the device, per column: the gathered targets (n), a block of rows
        cast and shifted for the cross-moments, the cross-moments of every
        atom (n_atoms x p, in float64) and a training set's sum of them,
        centred and in V's basis, one alpha's filtered coordinates and
        coefficients (a few p), the test targets, predictions, errors and
        squares (a few n_test) and the scores of every alpha; on the host,
        as :meth:`PermutedRidgeProblem.item_bytes`.
        """
        itemsize = np.dtype(dtype).itemsize
        p = n_features
        block = min(n_samples, _linalg.COVARIANCE_ROW_BLOCK)
        per_column = itemsize * (
            n_samples + 2 * block + 6 * n_test + 2 * n_alphas
        ) + 8 * ((n_atoms + 1) * (p + 1) + 5 * p)
        device = CV_WORKSPACE_OVERHEAD * n_targets * per_column
        counter = COUNTER_UPDATE_VALUES + (itemsize != 8)
        host = 8 * n_samples + 8 * n_targets * (n_scorings + counter)
        return device + 16 * n_samples, host

    @staticmethod
    def held_nbytes(n_samples, n_features, n_atoms, n_bases, n_test, itemsize, backend):
        """Device bytes held whatever the batch, from the shapes: X in the
        compute dtype, the moments of every atom and every training set
        (p x p and p, float64), an eigenbasis per training set (float64, and
        its cast in another compute dtype); while the sets are decomposed,
        ``EIGH_WORKING_MATRICES`` p x p per decomposition in flight; while a
        fold is scored, its centred test rows and their coordinates in V's
        basis, per batch in flight."""
        p = n_features
        workers = 1 if backend is None else cpu_workers(backend)
        square = 8 * (p * p + p + 1)
        bases = n_bases * (8 * (p * p + 2 * p) + (itemsize != 8) * itemsize * p * p)
        decomposing = workers * EIGH_WORKING_MATRICES * 8 * p * p
        scoring = workers * 2 * itemsize * n_test * p
        return (
            itemsize * n_samples * p
            + n_atoms * square
            + bases
            + max(decomposing, scoring)
        )

    @staticmethod
    def _shapes(n_samples, splits, spec, schemes):
        """``(n_atoms, n_bases, n_test)``: atoms, training sets decomposed and
        the most test rows of one of them, from the folds."""
        sets, tests = [], []
        for (train, test), scheme in zip(splits, schemes):
            sets.append(train)
            tests.append(len(test))
            if spec.tunes:
                for inner_train, inner_test in scheme.splits:
                    sets.append(train[inner_train])
                    tests.append(len(inner_test))
        atoms, _ = row_atoms(n_samples, sets)
        return len(atoms), len(sets), max(tests)

    @classmethod
    def check_memory(
        cls,
        X,
        Y,
        splits,
        spec,
        schemes,
        backend,
        dtype,
        *,
        n_permutations,
        max_memory_gb,
    ):
        """Refuse, before any moment is formed, permutations whose data and
        decompositions cannot fit the budget: :meth:`held_nbytes` and the
        targets held, then the engine's plan of ``n_permutations`` against
        the budget (:func:`skbatch._engine.plan_batches`), which raises."""
        n_samples, n_features = X.shape
        itemsize = np.dtype(dtype).itemsize
        n_atoms, n_bases, n_test = cls._shapes(n_samples, splits, spec, schemes)
        held = cls.held_nbytes(
            n_samples, n_features, n_atoms, n_bases, n_test, itemsize, backend
        )
        device, host = cls.item_bytes(
            n_samples,
            Y.shape[1],
            n_features,
            n_atoms,
            n_test,
            spec.alphas.size,
            dtype,
        )
        plan_batches(
            n_permutations,
            backend=backend,
            device_bytes_per_item=device,
            host_bytes_per_item=host,
            fixed_bytes=itemsize * Y.size + held,
            max_memory_gb=max_memory_gb,
        )

    def _fixed_bytes(self):
        itemsize = np.dtype(self.dtype).itemsize
        held = self.held_nbytes(
            self.n_samples,
            self.n_features,
            self.n_atoms,
            self.n_bases,
            self.n_test,
            itemsize,
            self.backend,
        )
        return itemsize * math.prod(self.Y.shape) + held

    # ------------------------------------------------------------------ scores

    def _cross(self, Y, y_shift):
        """``(sums, cross)`` of the targets ``Y`` over every atom, in the
        work dtype: one pass over the rows."""
        return [
            _linalg.cross_moments(
                self.X,
                Y,
                selections,
                None,
                self.x_shift_work,
                y_shift,
                self.work_dtype,
                xp=self.xp,
            )
            for selections in self.atoms
        ]

    def _fitted(self, basis, cross, y_shift):
        """``(V'X'Y, x means, y means)`` of a training set: its centred
        cross-moments in V's basis (compute dtype) and the offsets that
        centre rows on its (weighted) means, as a shift (a row of the data)
        and the small mean of the deviations from it."""
        xp, dtype = self.xp, self.X.dtype
        weight, x_sums = basis.moments
        y_sums, products = _sum_cross(cross, basis.atoms)
        centred = _linalg.centred_cross(
            products, x_sums, y_sums, weight, fit_intercept=self.fit_intercept
        )
        VtXtY = xp.astype(xp.permute_dims(basis.V_work, (1, 0)) @ centred, dtype)
        y_shift = xp.astype(y_shift, dtype)
        if not self.fit_intercept:
            return VtXtY, (self.x_shift, 0.0), (y_shift, 0.0)
        x_offset = xp.astype(x_sums / weight, dtype)
        y_offset = xp.astype(y_sums / weight, dtype)
        return VtXtY, (self.x_shift, x_offset), (y_shift, y_offset)

    def _test_rows(self, A, basis):
        """The test rows of ``A`` a training set predicts: a view when one run."""
        xp = self.xp
        rows = [_linalg._block_rows(A, selection, xp) for selection in basis.test]
        return rows[0] if len(rows) == 1 else xp.concat(rows, axis=0)

    def _centred_rows(self, A, basis, shift, offset):
        """Its test rows less ``shift``, then less ``offset``: the first
        difference is exact, so that the mean's rounding in float32 does not
        shift every centred row."""
        return (self._test_rows(A, basis) - shift) - offset

    def _choose(self, scores):
        """Alpha per column from the inner scores (n_alphas, columns), as
        :meth:`~skbatch._ridge.problems.RidgeSolver.choose_alpha` chooses."""
        xp = self.xp
        columns_per_choice = self.columns_per_choice
        if columns_per_choice > 1:
            scores = xp.mean(
                xp.reshape(scores, (self.alphas.size, -1, columns_per_choice)),
                axis=2,
            )
        best, _ = _linalg.select_alpha(scores, xp=xp)
        if columns_per_choice > 1:
            best = xp.reshape(
                xp.broadcast_to(best[:, None], (best.shape[0], columns_per_choice)),
                (-1,),
            )
        alphas = self.backend.asarray(self.alphas, self.dtype)
        return xp.take(alphas, best, axis=0)

    def scores(self, indices):
        """Per-target score, averaged over outer folds, of each row permutation
        (as :meth:`PermutedRidgeProblem.scores`)."""
        xp = self.xp
        n_items = indices.shape[0]
        permuted = self._permute(indices)
        work = self.work_dtype
        y_shift = (
            xp.astype(permuted[self.anchor], work)
            if self.fit_intercept
            else xp.zeros(permuted.shape[1], dtype=work, device=array_device(permuted))
        )
        cross = self._cross(permuted, y_shift)
        total = 0.0
        for outer, inner in self.folds:
            if inner:
                inner_scores = 0.0
                for basis in inner:
                    VtXtY, x_means, y_means = self._fitted(basis, cross, y_shift)
                    inner_scores = inner_scores + _linalg.covariance_holdout_scores(
                        self._centred_rows(self.X, basis, *x_means),
                        basis.V,
                        basis.eigenvalues,
                        VtXtY,
                        self._centred_rows(permuted, basis, *y_means),
                        self.alphas,
                        scoring=self.inner_scoring,
                        y_dtype=permuted.dtype,
                        xp=xp,
                    )
                alpha = self._choose(inner_scores / len(inner))
            else:
                alpha = self.backend.asarray(self.alphas, self.dtype)
            VtXtY, x_means, (y_shift_c, y_offset) = self._fitted(outer, cross, y_shift)
            coef = _linalg.covariance_coef(
                outer.V, outer.eigenvalues, VtXtY, alpha, xp=xp
            )
            predictions = self._centred_rows(self.X, outer, *x_means) @ coef
            predictions = (predictions + y_offset) + y_shift_c
            y_test = self._test_rows(permuted, outer)
            total = total + device_scores(y_test, predictions, self.scoring, xp)
        n_targets = self.n_targets
        if self.n_scorings > 1:
            total = xp.reshape(total, (self.n_scorings, n_items, n_targets))
            total = xp.permute_dims(total, (1, 0, 2))
            return xp.reshape(
                total / len(self.folds), (n_items, self.n_scorings * n_targets)
            )
        return xp.reshape(total / len(self.folds), (n_items, n_targets))


def _sum_moments(moments, atoms):
    """``(weight, sums, gram)`` of a union of atoms: a new gram matrix."""
    weight, sums, gram = moments[atoms[0]]
    gram = gram + 0.0
    for atom in atoms[1:]:
        weight = weight + moments[atom][0]
        sums = sums + moments[atom][1]
        gram += moments[atom][2]
    return weight, sums, gram


def _sum_cross(cross, atoms):
    """``(sums, cross)`` of a union of atoms."""
    sums, products = cross[atoms[0]]
    for atom in atoms[1:]:
        sums = sums + cross[atom][0]
        products = products + cross[atom][1]
    return sums, products
