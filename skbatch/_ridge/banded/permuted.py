"""The permutation fast path of a banded ridge: the search redone on every
permuted target (:class:`BandedPermutedProblem`)."""

from dataclasses import dataclass

import numpy as np

from ..._kernels import linalg as _linalg
from ..problems import (
    CV_WORKSPACE_OVERHEAD,
    PermutedRidgeProblem,
    RidgeSolver,
    device_scores,
)
from ..spec import RidgeSpec
from .bands import band_candidates, check_band_weights, check_bands, check_concentration
from .factors import (
    BandedDesign,
    CandidateBasis,
    SharedFactors,
    _projected,
    check_candidate_count,
)


@dataclass(frozen=True)
class BandedSpec(RidgeSpec):
    """The banded ridge problem a ``BandedRidge`` fit solves.

    A :class:`~skbatch._ridge.spec.RidgeSpec` (the search's alphas, cv,
    scoring, intercept and dtype) with the parameters that give the bands
    and the candidates once the number of columns is known
    (:meth:`design`).
    """

    bands: object = None
    band_weights: object = 100
    concentration: object = (0.1, 1.0)
    random_state: object = 0

    def design(self, X):
        """The :class:`BandedDesign` of X's candidates, parameters checked."""
        columns, _ = check_bands(self.bands, X.shape[1])
        weights = check_band_weights(self.band_weights, len(columns))
        concentration = check_concentration(self.concentration)
        candidates = band_candidates(
            weights, len(columns), concentration, self.random_state
        )
        return BandedDesign(X, columns, candidates)


def banded_spec(estimator):
    """The :class:`BandedSpec` of an estimator that states one (a
    ``__skbatch_banded_spec__()`` method: ``BandedRidge``), else None."""
    own = getattr(estimator, "__skbatch_banded_spec__", None)
    return None if own is None else own()


def permuted_problem(spec):
    """The class of the permutation fast path's problem for ``spec``."""
    return (
        BandedPermutedProblem
        if isinstance(spec, BandedSpec)
        else (PermutedRidgeProblem)
    )


class BandedPermutedProblem(PermutedRidgeProblem):
    """The permutation fast path of ``BandedRidge``: the search redone per
    permuted target.

    As :class:`~skbatch._ridge.problems.PermutedRidgeProblem`, with one
    solver per candidate in every outer fold (the candidate's rescaled
    training rows, the fold's inner scheme): each permuted column keeps the
    (candidate, alpha) pair of best inner score, as ``BandedRidge.fit``
    chooses it on that fold's training rows, and that pair predicts the
    fold's test rows. The null is that of refits of the estimator.

    Parameters
    ----------
    As :class:`~skbatch._ridge.problems.PermutedRidgeProblem`; ``spec`` is a
    :class:`BandedSpec`.
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
        self.alphas = backend.asarray(spec.alphas, dtype)
        design = spec.design(X)
        n_candidates = len(design.candidates)
        schemes = [inner_scheme(X[train], Y[train], train) for train, _ in splits]
        # Each outer fold's training rows factorised once for its candidates,
        # as BandedRidge.fit factorises X.
        factors = [
            SharedFactors(
                X[train],
                None,
                scheme,
                backend,
                dtype,
                fit_intercept=spec.fit_intercept,
            )
            if SharedFactors.applies(n_candidates, len(train), X.shape[1], scheme)
            else None
            for (train, _), scheme in zip(splits, schemes)
        ]
        solvers = [[] for _ in splits]
        tests = [[] for _ in splits]
        for c in range(n_candidates):
            Z = design.design(c)
            for k, ((train, test), scheme) in enumerate(zip(splits, schemes)):
                solver = RidgeSolver(
                    Z[train],
                    None,
                    spec.alphas,
                    scheme,
                    backend,
                    dtype,
                    fit_intercept=spec.fit_intercept,
                    scoring=spec.scoring,
                    basis=None
                    if factors[k] is None
                    else factors[k].basis(design.kept[c], design.scales[c]),
                )
                solvers[k].append(solver)
                tests[k].append(solver.rows_in_basis(backend.asarray(Z[test], dtype)))
        self.folds = [
            (backend.asarray(train), backend.asarray(test), *fold)
            for (train, test), *fold in zip(splits, solvers, tests, factors)
        ]
        rank = max(s.s.shape[0] for fold in solvers for s in fold)
        self._plan_items(rank, spec.alphas.size)
        # The shared factors, held, and their projections of each batch (as
        # check_memory charges them).
        itemsize = np.dtype(dtype).itemsize
        self.fixed_bytes += sum(
            SharedFactors.nbytes(len(train), X.shape[1], scheme, itemsize)
            for (train, _), scheme, fold_factors in zip(splits, schemes, factors)
            if fold_factors is not None
        )
        _, per_target = self.held_bytes(X, splits, spec, schemes, itemsize)
        self.device_bytes_per_item += (
            CV_WORKSPACE_OVERHEAD * itemsize * self.n_targets * per_target
        )

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
        """As :meth:`PermutedRidgeProblem.check_memory`, after a check of the
        count of candidates alone on the largest outer fold
        (:func:`check_candidate_count`): :meth:`held_bytes` draws them."""
        columns, _ = check_bands(spec.bands, X.shape[1])
        weights = check_band_weights(spec.band_weights, len(columns))
        largest = max(range(len(splits)), key=lambda k: len(splits[k][0]))
        check_candidate_count(
            weights,
            columns,
            len(splits[largest][0]),
            schemes[largest],
            dtype,
            backend,
            max_memory_gb,
            n_targets=Y.shape[1],
            n_alphas=spec.alphas.size,
            store_cv_results=False,
        )
        super().check_memory(
            X,
            Y,
            splits,
            spec,
            schemes,
            backend,
            dtype,
            n_permutations=n_permutations,
            max_memory_gb=max_memory_gb,
        )

    @classmethod
    def held_bytes(cls, X, splits, spec, schemes, itemsize):
        """Every outer fold's decompositions, once per candidate: on the
        fold's shared factors (as :meth:`__init__` builds them) the factors
        (:meth:`SharedFactors.nbytes`) and each candidate's
        :meth:`CandidateBasis.nbytes`, with the factors' projections of every
        permuted target (:meth:`SharedFactors.bytes_per_target`); else each
        candidate's own SVD of its rescaled training rows. Every candidate
        holds its test rows in its basis. Ranks at their bounds."""
        design = spec.design(X[:1])
        n_candidates = len(design.candidates)
        widths = [design.n_columns(c) for c in range(n_candidates)]
        p = X.shape[1]
        held = per_target = 0
        for (train, test), scheme in zip(splits, schemes):
            n_train, n_test = len(train), len(test)
            if not SharedFactors.applies(n_candidates, n_train, p, scheme):
                held += sum(
                    cls.solver_bytes(n_train, n_test, k, scheme, itemsize)
                    for k in widths
                )
                continue
            held += SharedFactors.nbytes(n_train, p, scheme, itemsize)
            for k in widths:
                held += CandidateBasis.nbytes(n_train, p, k, scheme, itemsize)
                held += itemsize * n_test * min(n_train, k)
            per_target = max(per_target, SharedFactors.bytes_per_target(p, scheme))
        return held, per_target

    def _held_solvers(self):
        """``(solver, test rows in its basis)`` of every candidate of every
        outer fold."""
        for _, _, solvers, tests, _ in self.folds:
            yield from zip(solvers, tests)

    def scores(self, indices):
        xp = self.xp
        permuted = self._permute(indices)
        total = 0.0
        for train, test, solvers, tests, factors in self.folds:
            Y_train = xp.take(permuted, train, axis=0)
            best = predictions = None
            projected = _projected(solvers, factors, Y_train, full=True)
            for (solver, Y_centered, Y_offset, UtY, shared), X_test_V in zip(
                projected, tests
            ):
                scores = solver.scores(
                    Y_train, Y_centered, Y_offset, UtY, shared=shared
                )
                index, score = _linalg.select_alpha(scores, xp=xp)
                score = xp.where(xp.isnan(score), -xp.inf, score)
                alpha = xp.take(self.alphas, index, axis=0)
                candidate = solver.predict(X_test_V, UtY, Y_offset, alpha)
                if best is None:
                    best, predictions = score, candidate
                    continue
                # Ties keep the first candidate, as the fit's search does.
                better = score > best
                best = xp.where(better, score, best)
                predictions = xp.where(better[None, :], candidate, predictions)
            Y_test = xp.take(permuted, test, axis=0)
            total = total + device_scores(Y_test, predictions, self.scoring, xp)
        return xp.reshape(total / len(self.folds), (indices.shape[0], self.n_targets))
