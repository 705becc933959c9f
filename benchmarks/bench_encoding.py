"""BandedRidge at encoding scale: runs, two feature spaces, leave-one-run-out.

Workload: 10 runs of 280-320 rows (3,000 rows), features AR(1) within each
run (restarting at each run), two bands of 30 and 300 columns, 20,000
targets (``--n-targets``): 40% driven by the small band, 40% by the large
one, 20% noise only, every target z-scored within each run. The same 20
candidate band weightings (himalaya's Dirichlet draws) and 9 alphas for
every method, ``LeaveOneGroupOut`` over the runs, R^2, float64 numpy.
Timed in the same run:

- ``BandedRidge(cv=LeaveOneGroupOut())`` with the runs as ``groups``, with
  the seconds of its search and refit stages (``fit_report_``), and the
  same with ``dtype="float32"`` (the share of targets whose choice is that
  of float64, and on the first 2,000 targets what a different choice
  costs: its float64 score below the float64 best);
- himalaya's ``BandedRidgeCV`` with the same splits and candidates, on the
  first ``--himalaya-targets`` targets (its time is linear in the targets:
  the figure is also given scaled to all of them), or skipped with 0;
- ``BatchedRidge(cv=LeaveOneGroupOut())``, one alpha for all columns;
- the GEMM floor: the matrix products no search over these candidates,
  alphas and folds avoids, at the rate of one core on a GEMM of their
  shape timed here.
  Per fold, the training targets projected once on the fold's basis of all
  columns (2 n_train p t); per candidate, fold and alpha, the held-out
  predictions (2 n_test r t, r the candidate's columns); the refit's
  projection and coefficients (2 n p t + 2 p^2 t).

Printed: seconds (the median of ``--repeats`` runs), the floor's share of
BandedRidge's CPU seconds (the floor at the rate of one core, in CPU time:
on a loaded host the wall clock says more of the other processes than of
the fit), and the share of driven targets whose chosen dominant band
(weight above 1/2) is the band that drives them.

``--partition-nulls T1 T2``: the permutation nulls of
``variance_partitioning``'s unique variance on these data (2 bands, the
same estimator, outer folds leaving one run out), measured at T1 and T2
targets and extrapolated to ``--n-targets`` (a line through the two: each
null has a part that does not grow with the targets, the decompositions)
and to ``--null-permutations`` (1,000) per band:

- the band-row null (``null="band_rows"``): band b's rows shifted, the full
  model refit with its search on every fold: ``band_null_scores`` itself,
  timed on ``--band-row-permutations`` permutations (2) of band 0 (the
  full model's searches cost the same whichever band moves);
- Freedman–Lane with held hyperparameters (``null="freedman_lane"``): the
  full model's decompositions on every fold (once, shared by both bands),
  the reduced model's (once per band), then ``--held-permutations``
  permutations per band in one call of the null's task (8: what
  ``variance_partitioning`` puts in a call at 20,000 targets, a window of
  32 resamples in its 8 GB batching budget, run as 4 calls), ``--held-repeats``
  calls (the median, after one call untimed: a process maps its scratch
  arrays once), on one BLAS thread and on all of them (parts of the
  targets side by side, one per thread: ``held_parts``) (at choices
  drawn from the grid; the reduced model's one fit on all rows, a search,
  is not counted);
- Freedman–Lane with the searches redone (``null_hyperparameters=
  "searched"``): the band-row null's searches of the full model and a
  search of the reduced model per fold (timed on the first fold).

The held null's GEMM floor, per permutation and target: the product
``X'Wy*`` of all rows (2 n p) and per fold that of its held-out rows (2
n_test p: a fold's products are the total less them), and per fold, for
the full and the reduced model at the target's candidate of r kept columns
(r <= n_train here), ``V'(X'Wy*)`` (2 r^2) and the test rows' predictions
(2 n_test r); or, for the targets of a candidate and alpha that go
through its hat matrix (``HeldModel._hat``, where that takes fewer flops),
the test rows' predictions from the products (2 n_test r) and the hat
matrix, made once per call (2 r^2 n_test over the call's permutations,
once per part of the targets side by side); or, for a model that scores
from products (a reduced model of few columns: ``HeldModel.from_moments``),
``V'(X'Wy*)``, the test rows' ``B'Wy*`` (2 r^2) and the Gram matrix's
product (2 r^2); at the rate of one core (a GEMM of the script's shape,
timed after the nulls, and after each one-thread call); printed as its
share of the held null's CPU seconds on one thread and of its wall seconds
on all threads (the floor divided by the threads).

With one size the figures are scaled in proportion to the targets (an
upper bound: per-permutation overheads are counted as if they grew with
them), the decompositions added once. ``--skip-searches`` times the held
null alone.

Run: ``python benchmarks/bench_encoding.py [--n-targets 20000] [--repeats 1]``;
the nulls alone: ``python benchmarks/bench_encoding.py --partition-nulls 2000
--held-permutations 4 --band-row-permutations 1``, or the held one:
``--partition-nulls 2000 --skip-searches``.
"""

import argparse
import os
import time

import joblib
import numpy as np
from sklearn.model_selection import LeaveOneGroupOut
from threadpoolctl import threadpool_info, threadpool_limits

from skbatch import BandedRidge, BatchedRidge
from skbatch._ridge.banded import band_candidates

N_RUNS = 10
# Rows per run, drawn in [RUN_ROWS[0], RUN_ROWS[1]): runs of unequal length.
RUN_ROWS = (280, 321)
BANDS = (30, 300)
N_CANDIDATES = 20
ALPHAS = np.logspace(-2, 6, 9)
# AR(1) coefficient of the features within a run.
AR_COEF = 0.7
# Shares of targets driven by band 0 and by band 1; the rest is noise.
DRIVEN = (0.4, 0.4)
# Targets on which the float32 search's choices are scored in float64.
LOSS_TARGETS = 2000
# Repeats of the GEMM that sets the reference rate; the best is kept.
GEMM_REPEATS = 5


def ar1(rng, n, p, coef):
    """(n, p) AR(1) series of unit variance."""
    noise = rng.standard_normal((n, p))
    out = np.empty_like(noise)
    out[0] = noise[0]
    scale = np.sqrt(1 - coef**2)
    for i in range(1, n):
        out[i] = coef * out[i - 1] + scale * noise[i]
    return out


def zscored(A, runs):
    out = np.empty_like(A)
    for r in np.unique(runs):
        rows = runs == r
        block = A[rows]
        out[rows] = (block - block.mean(axis=0)) / block.std(axis=0)
    return out


def make_data(n_targets, seed=0):
    rng = np.random.default_rng(seed)
    lengths = rng.integers(*RUN_ROWS, size=N_RUNS)
    runs = np.repeat(np.arange(N_RUNS), lengths)
    X = np.concatenate([ar1(rng, m, sum(BANDS), AR_COEF) for m in lengths])
    X = zscored(X, runs)
    labels = np.repeat(np.arange(len(BANDS)), BANDS)
    driver = np.full(n_targets, -1)
    n0, n1 = (int(share * n_targets) for share in DRIVEN)
    driver[:n0], driver[n0 : n0 + n1] = 0, 1
    Y = np.empty((X.shape[0], n_targets))
    block = 2000
    for start in range(0, n_targets, block):
        cols = slice(start, start + block)
        m = len(driver[cols])
        signal = np.zeros((X.shape[0], m))
        for b in range(len(BANDS)):
            which = driver[cols] == b
            W = rng.standard_normal((BANDS[b], int(which.sum())))
            part = X[:, labels == b] @ W
            signal[:, which] = part / part.std(axis=0)
        noise = rng.uniform(1.0, 3.0, m) * rng.standard_normal((X.shape[0], m))
        Y[:, cols] = signal + noise
    return X, zscored(Y, runs), labels, runs, driver


def gemm_rate(n, r, t):
    """Flop/s of one core on an (r x n) @ (n x t) product, in CPU time: other
    processes on a loaded host slow the wall clock, much less a CPU second."""
    rng = np.random.default_rng(1)
    A, B = rng.standard_normal((r, n)), rng.standard_normal((n, t))
    with threadpool_limits(limits=1):
        A @ B
        best = np.inf
        for _ in range(GEMM_REPEATS):
            start = time.process_time()
            A @ B
            best = min(best, time.process_time() - start)
    return 2.0 * n * r * t / best


def floor_flops(splits, p, t, ranks):
    """The products of the docstring's GEMM floor."""
    n = sum(len(test) for _, test in splits)
    total = sum(2.0 * len(train) * p * t for train, _ in splits)
    for r in ranks:
        for _, test in splits:
            total += ALPHAS.size * 2.0 * len(test) * r * t
    return total + 2.0 * n * p * t + 2.0 * p * p * t


def timed(fn, repeats):
    """The result, and the median wall and CPU seconds (all threads) of
    ``repeats`` runs."""
    seconds, cpu, result = [], [], None
    for _ in range(repeats):
        start, start_cpu = time.perf_counter(), time.process_time()
        result = fn()
        seconds.append(time.perf_counter() - start)
        cpu.append(time.process_time() - start_cpu)
    return result, float(np.median(seconds)), float(np.median(cpu))


def float32_loss(X, Y, labels, candidates, runs):
    """How much the float32 search's choices lose: the share of targets whose
    (candidate, alpha) differs from float64's, the largest float64 score
    lost by taking the float32 choice, and the largest |float32 - float64|
    score over every pair (both searches store every pair's score)."""
    scores = []
    for dtype in ("float64", "float32"):
        model = BandedRidge(
            labels,
            alphas=ALPHAS,
            band_weights=candidates,
            cv=LeaveOneGroupOut(),
            dtype=dtype,
            store_cv_results=True,
        ).fit(X, Y, groups=runs)
        scores.append(model.cv_results_["scores"].reshape(Y.shape[1], -1))
    exact, single = scores
    rows = np.arange(Y.shape[1])
    chosen, chosen_single = exact.argmax(axis=1), single.argmax(axis=1)
    lost = exact[rows, chosen] - exact[rows, chosen_single]
    return (
        np.mean(chosen != chosen_single),
        lost.max(),
        np.abs(single - exact).max(),
    )


def dominant_agreement(band_weights, driver):
    driven = driver >= 0
    return np.mean(np.argmax(band_weights[driven], axis=1) == driver[driven])


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n-targets", type=int, default=20000)
    parser.add_argument("--repeats", type=int, default=1)
    parser.add_argument(
        "--himalaya-targets",
        type=int,
        default=2000,
        help="targets himalaya fits (0 skips it); its time is scaled to all",
    )
    parser.add_argument(
        "--only-banded", action="store_true", help="time BandedRidge alone"
    )
    parser.add_argument(
        "--partition-nulls",
        type=int,
        nargs="+",
        metavar="T",
        help="time variance_partitioning's nulls at these targets alone (two "
        "sizes: a line through them; one: in proportion)",
    )
    parser.add_argument("--null-permutations", type=int, default=1000)
    parser.add_argument(
        "--held-permutations",
        type=int,
        default=8,
        help="permutations per call of the held null (the docstring)",
    )
    parser.add_argument(
        "--held-repeats",
        type=int,
        default=3,
        help="calls of the held null timed (the median is kept)",
    )
    parser.add_argument(
        "--band-row-permutations",
        type=int,
        default=2,
        help="permutations of the band-row null timed",
    )
    parser.add_argument(
        "--skip-searches",
        action="store_true",
        help="time the held null alone (the searched nulls take a search a fold)",
    )
    args = parser.parse_args()
    if args.partition_nulls:
        partition_nulls(args)
        return
    X, Y, labels, runs, driver = make_data(args.n_targets)
    n, p = X.shape
    t = Y.shape[1]
    splits = list(LeaveOneGroupOut().split(X, Y, runs))
    from himalaya.ridge._random_search import generate_dirichlet_samples

    drawn = np.asarray(
        generate_dirichlet_samples(N_CANDIDATES, len(BANDS), [0.1, 1.0], random_state=0)
    )
    candidates = band_candidates(drawn, len(BANDS), None, None)
    ranks = [int(np.sum((gamma > 0)[labels])) for gamma in candidates]
    blas = {(i["internal_api"], i["num_threads"]) for i in threadpool_info()}
    print(
        f"n={n} ({N_RUNS} runs), bands={BANDS}, targets={t}, {len(candidates)} "
        f"candidates, {ALPHAS.size} alphas, LeaveOneGroupOut, float64 numpy; "
        f"BLAS {sorted(blas)}; load average {os.getloadavg()[0]:.2f}",
        flush=True,
    )
    rate = gemm_rate(n // N_RUNS * (N_RUNS - 1), p, min(t, 4000))
    floor = floor_flops(splits, p, t, ranks) / rate
    print(
        f"GEMM rate of one core {rate / 1e9:.1f} GFLOP/s; GEMM floor {floor:.1f} CPU s",
        flush=True,
    )

    def banded(dtype="auto"):
        return BandedRidge(
            labels,
            alphas=ALPHAS,
            band_weights=candidates,
            cv=LeaveOneGroupOut(),
            dtype=dtype,
        ).fit(X, Y, groups=runs)

    model, seconds, cpu = timed(banded, args.repeats)
    stages = ", ".join(
        f"{stage.name} {stage.seconds:.1f} s" for stage in model.fit_report_.stages
    )
    agree = dominant_agreement(np.atleast_2d(model.band_weights_), driver)
    print(
        f"BandedRidge           {seconds:8.1f} s  ({stages}); {cpu:.1f} CPU s, "
        f"the GEMM floor {floor / cpu:.0%} of them; dominant band right for "
        f"{agree:.1%} of driven targets",
        flush=True,
    )
    if args.only_banded:
        return
    single, single_seconds, _ = timed(lambda: banded("float32"), args.repeats)
    same = np.mean(
        np.all(single.band_weights_ == model.band_weights_, axis=1)
        & (single.alpha_ == model.alpha_)
    )
    print(
        f"BandedRidge float32   {single_seconds:8.1f} s; float64 / float32 "
        f"{seconds / single_seconds:.1f}x; same choice as float64 for {same:.2%} "
        f"of targets; dominant band right for "
        f"{dominant_agreement(single.band_weights_, driver):.1%}",
        flush=True,
    )
    loss = float32_loss(X, Y[:, :LOSS_TARGETS], labels, candidates, runs)
    print(
        f"float32 choices on the first {min(LOSS_TARGETS, t)} targets: "
        f"{loss[0]:.1%} differ from float64's, each within {loss[1]:.1e} of the "
        f"float64 best (float64 R^2; float32 scores within {loss[2]:.1e} of it)",
        flush=True,
    )
    h = min(args.himalaya_targets, t)
    if h:
        from himalaya.backend import set_backend
        from himalaya.ridge import BandedRidgeCV

        set_backend("numpy")

        def himalaya_fit():
            return BandedRidgeCV(
                groups=labels,
                solver_params=dict(
                    n_iter=drawn,
                    alphas=ALPHAS,
                    progress_bar=False,
                    n_targets_batch=1000,
                    n_alphas_batch=ALPHAS.size,
                    n_targets_batch_refit=1000,
                ),
                cv=splits,
                fit_intercept=True,
            ).fit(X, Y[:, :h])

        fitted, h_seconds, _ = timed(himalaya_fit, args.repeats)
        # deltas_ = log(band weight / alpha): the largest is the dominant band.
        weights = np.asarray(fitted.deltas_).T
        scaled = h_seconds * t / h
        print(
            f"himalaya BandedRidgeCV {h_seconds:8.1f} s on {h} targets, "
            f"{scaled:.1f} s scaled to {t}; himalaya / BandedRidge "
            f"{scaled / seconds:.1f}x; dominant band right for "
            f"{dominant_agreement(weights, driver[:h]):.1%}",
            flush=True,
        )
    _, ridge_seconds, _ = timed(
        lambda: BatchedRidge(alphas=ALPHAS, cv=LeaveOneGroupOut()).fit(
            X, Y, groups=runs
        ),
        args.repeats,
    )
    print(
        f"BatchedRidge          {ridge_seconds:8.1f} s; BandedRidge / BatchedRidge "
        f"{seconds / ridge_seconds:.1f}x",
        flush=True,
    )


def null_tasks(X, Y, labels, runs, candidates, args, seed=0):
    """Per band, the seconds of each null at these targets (docstring),
    the held null's setup seconds and floor flops per permutation.

    A permutation of the band-row null is ``band_null_scores`` itself (band
    b's rows shifted within runs, the full model's search on every outer
    fold), timed on ``--band-row-permutations`` permutations; of the searched
    Freedman–Lane null, one search of the full and one of the reduced model
    per fold on the permuted targets, timed on the first outer fold and
    counted once per fold. The held null runs as ``variance_partitioning``
    runs it (:func:`~skbatch._ridge.freedman_lane.band_null_task`'s
    :class:`~skbatch._ridge.freedman_lane_held.HeldNullProblem`, the full
    model's decompositions shared by both bands) at choices drawn from the
    candidates and alphas: its cost depends on the candidates' kept columns
    and the grouping of the targets, not on which target holds which.
    """
    from sklearn.base import clone

    from skbatch._ridge.freedman_lane_held import (
        HeldNullProblem,
        held_fold,
        held_parts,
    )
    from skbatch._ridge.partition_inference import band_null_scores

    rng = np.random.default_rng(seed)
    splits = list(LeaveOneGroupOut().split(X, Y, runs))
    bands = [np.flatnonzero(labels == b) for b in range(len(BANDS))]
    n_targets = Y.shape[1]
    permutation = dict(permutation_type="circular_shift", exact=False)

    def estimator(model_bands):
        # One band has one candidate, as variance_partitioning restricts them.
        weights = candidates if len(model_bands) > 1 else np.ones((1, 1))
        return BandedRidge(
            model_bands, alphas=ALPHAS, band_weights=weights, cv=LeaveOneGroupOut()
        )

    def searched_fold(model, columns):
        train, test = splits[0]
        start = time.perf_counter()
        clone(model).fit(X[np.ix_(train, columns)], Y[train], groups=runs[train])
        return (time.perf_counter() - start) * len(splits)

    def drawn(weights):
        rows = rng.integers(len(weights), size=n_targets)
        return weights[rows], rng.choice(ALPHAS, size=n_targets)

    def held_models(columns, model_bands, weights):
        choices = [drawn(weights) for _ in splits]
        return [
            held_fold(
                X, train, test, None, columns, model_bands, choice, fit_intercept=True
            )
            for (train, test), choice in zip(splits, choices)
        ]

    everything = np.arange(X.shape[1])
    rows = {}
    start = time.perf_counter()
    full = held_models(everything, bands, candidates)
    rows["held setup, full model"] = time.perf_counter() - start
    for b in range(len(BANDS)):
        keep = bands[1 - b]
        if not args.skip_searches and b > 0:
            # The full model's searches cost the same whichever band moves.
            rows[f"band rows, band {b}"] = rows["band rows, band 0"]
            rows[f"searched, band {b}"] = rows["band rows, band 0"] + searched_fold(
                estimator([np.arange(keep.size)]), keep
            )
        elif not args.skip_searches:
            ids = np.arange(args.band_row_permutations)
            start = time.perf_counter()
            band_null_scores(
                ids,
                model=estimator(bands),
                X=X,
                Y=Y,
                columns=bands[b],
                splits=splits,
                sample_weight=None,
                groups=runs,
                entropy=seed,
                permutation=permutation,
            )
            rows[f"band rows, band {b}"] = (time.perf_counter() - start) / ids.size
            # The searched null refits the full model as the band-row null
            # does, and the reduced model besides.
            rows[f"searched, band {b}"] = rows[f"band rows, band {b}"] + searched_fold(
                estimator([np.arange(keep.size)]), keep
            )
        start = time.perf_counter()
        reduced = held_models(keep, [np.arange(keep.size)], np.ones((1, 1)))
        held = HeldNullProblem(
            X,
            full,
            reduced,
            fitted=np.zeros_like(Y),
            residuals=Y,
            splits=splits,
            sample_weight=None,
            groups=runs,
            entropy=0,
            permutation=permutation,
            fit_intercept=True,
            average="rows",
        )
        rows[f"held setup, band {b}"] = time.perf_counter() - start
        ids = np.arange(args.held_permutations)
        flops = held_flops(held, ids.size)
        rows[f"held flops, band {b}"] = flops
        rows[f"held flops in parts, band {b}"] = held_flops(
            held, ids.size, held_parts(n_targets)
        )
        # Two processes: half the permutations a call each.
        rows[f"held flops in halves, band {b}"] = held_flops(held, -(-ids.size // 2))
        n_train = X.shape[0] // N_RUNS * (N_RUNS - 1)
        # One call before the timed ones, on one thread and on all: its
        # scratch arrays are mapped, the fitted values' products per fold made
        # and, on all threads, the parts of targets that run side by side,
        # once per process (the benchmark row's 1,000 permutations run on in
        # the same process).
        for threads in (1, None):
            with threadpool_limits(limits=threads):
                held(ids)
        for threads in (1, None):
            walls, cpus, shares, rates = [], [], [], []
            with threadpool_limits(limits=threads):
                for _ in range(args.held_repeats):
                    start, start_cpu = time.perf_counter(), time.process_time()
                    held(ids)
                    walls.append((time.perf_counter() - start) / ids.size)
                    cpus.append((time.process_time() - start_cpu) / ids.size)
                    if threads == 1:
                        # The GEMM rate timed right after each call: the
                        # host's rate drifts by 10-20% from minute to minute,
                        # so each call's share of the floor takes its own.
                        rate = gemm_rate(n_train, X.shape[1], 2000)
                        rates.append(rate)
                        shares.append(flops / rate / cpus[-1])
            name = "1 thread" if threads == 1 else "all threads"
            rows[f"held {name}, band {b}"] = float(np.median(walls))
            rows[f"held {name} CPU, band {b}"] = float(np.median(cpus))
            if shares:
                rows[f"held 1 thread floor share, band {b}"] = float(np.median(shares))
                rows[f"held 1 thread rate, band {b}"] = float(np.median(rates))
        # Two worker processes of one thread each (variance_partitioning's
        # n_jobs=2), after a first call that starts them and ships the task.
        halves = np.array_split(ids, 2)
        with joblib.parallel_config(backend="loky", inner_max_num_threads=1):
            with joblib.Parallel(n_jobs=2) as parallel:
                walls = []
                for _ in range(args.held_repeats + 1):
                    start = time.perf_counter()
                    parallel(joblib.delayed(held)(half) for half in halves)
                    walls.append((time.perf_counter() - start) / ids.size)
        rows[f"held 2 processes, band {b}"] = float(np.median(walls[1:]))
        rows[f"held, band {b}"] = rows[f"held all threads, band {b}"]
    return rows


def held_flops(held, n_repeats, n_parts=1):
    """The GEMM floor's flops (docstring) per permutation of every target of
    the held null ``held``, in calls of ``n_repeats`` permutations, its
    targets in ``n_parts`` parts (each makes its own hat matrices)."""
    from skbatch._ridge.held_model import _by_hat

    problems = [held] if n_parts == 1 else held._parts(n_parts)
    n, p = held.shape[:2]
    flops = 0.0
    for part in problems:
        n_targets = part.shape[2]
        flops += 2.0 * n * p * n_targets
        for fold, (train, _) in enumerate(held.splits):
            flops += 2.0 * (n - len(train)) * p * n_targets
            for model in (part.full[fold], part.reduced[fold]):
                for c, runs in enumerate(model._damping):
                    r, kept = model.Vt[c].shape
                    n_test = model.test_basis[c].shape[0]
                    for a, b, _ in runs:
                        if model.from_moments:
                            flops += (b - a) * (4.0 * r * kept + 2.0 * r * r)
                        elif _by_hat(
                            (b - a) * n_repeats, *model._solve[c].shape, n_test
                        ):
                            # The hat matrix, made once per call.
                            flops += (b - a) * 2.0 * kept * n_test
                            flops += 2.0 * kept * r * n_test / n_repeats
                        else:
                            flops += (b - a) * (2.0 * r * kept + 2.0 * n_test * r)
    return flops


def partition_nulls(args):
    """The seconds of each null of variance_partitioning at one or two
    target counts, extrapolated (docstring)."""
    import warnings

    sizes = args.partition_nulls
    measured = []
    for n_targets in sizes:
        X, Y, labels, runs, _ = make_data(n_targets)
        from himalaya.ridge._random_search import generate_dirichlet_samples

        drawn = np.asarray(
            generate_dirichlet_samples(
                N_CANDIDATES, len(BANDS), [0.1, 1.0], random_state=0
            )
        )
        candidates = band_candidates(drawn, len(BANDS), None, None)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", UserWarning)
            measured.append(null_tasks(X, Y, labels, runs, candidates, args))
        print(
            f"{n_targets} targets: "
            + ", ".join(f"{k} {v:.3g}" for k, v in measured[-1].items()),
            flush=True,
        )
    n, p = X.shape
    rate = gemm_rate(n // N_RUNS * (N_RUNS - 1), p, 2000)
    target, P = args.n_targets, args.null_permutations
    print(
        f"\nn={n} ({N_RUNS} runs), bands={BANDS}, {N_CANDIDATES} candidates, "
        f"{ALPHAS.size} alphas, LeaveOneGroupOut outside and inside; GEMM rate "
        f"of one core {rate / 1e9:.1f} GFLOP/s; load average "
        f"{os.getloadavg()[0]:.2f}. Extrapolated to {target} targets x {P} "
        f"permutations per band (2 bands), wall seconds on every thread:\n"
    )

    def line(name):
        # One size: in proportion to the targets (an upper bound for a cost
        # with a part that does not grow with them).
        if len(sizes) == 1:
            return measured[0][name] * target / sizes[0]
        (t1, t2), (v1, v2) = sizes[-2:], [m[name] for m in measured[-2:]]
        slope = (v2 - v1) / (t2 - t1)
        return v2 + slope * (target - t2)

    total = {}
    nulls = ("held",) if args.skip_searches else ("band rows", "searched", "held")
    for null in nulls:
        seconds = sum(line(f"{null}, band {b}") for b in range(len(BANDS))) * P
        if null == "held":
            # The decompositions: the full model's once, the reduced
            # model's once per band; neither per permutation.
            seconds += measured[-1]["held setup, full model"] + sum(
                measured[-1][f"held setup, band {b}"] for b in range(len(BANDS))
            )
        total[null] = seconds
        print(f"| {null} | {seconds:,.0f} s ({seconds / 3600:.2f} h) |")
    if not args.skip_searches:
        print(
            f"\nband rows / held {total['band rows'] / total['held']:.0f}x, "
            f"searched / held {total['searched'] / total['held']:.1f}x"
        )
    threads = max(n_threads for _, n_threads in _blas_threads())
    for b in range(len(BANDS)):
        per = [m[f"held flops, band {b}"] / t for m, t in zip(measured, sizes)]
        floor = measured[-1][f"held flops, band {b}"] / rate
        # The parts side by side make their hat matrices each.
        parts_floor = measured[-1][f"held flops in parts, band {b}"] / rate
        halves_floor = measured[-1][f"held flops in halves, band {b}"] / rate
        one = measured[-1][f"held 1 thread CPU, band {b}"]
        wall = measured[-1][f"held all threads, band {b}"]
        two = measured[-1][f"held 2 processes, band {b}"]
        paired = measured[-1][f"held 1 thread floor share, band {b}"]
        paired_rate = measured[-1][f"held 1 thread rate, band {b}"]
        print(
            f"held, band {b} at {sizes[-1]} targets, per permutation: one "
            f"thread {one:.3g} CPU s against a GEMM floor of {floor:.3g} "
            f"({floor / one:.0%}; {paired:.0%} with the rate timed after each "
            f"call, median, {paired_rate / 1e9:.1f} GFLOP/s); {threads} threads "
            f"side by side {wall:.3g} s wall "
            f"against {parts_floor / threads:.3g} "
            f"({parts_floor / threads / wall:.0%}); 2 "
            f"processes of one thread {two:.3g} s wall against "
            f"{halves_floor / 2:.3g} ({halves_floor / 2 / two:.0%}); "
            f"{per[-1] / N_RUNS / 1e6:.2f} MFLOP per "
            f"permutation, target and fold"
        )


def _blas_threads():
    return {(i["internal_api"], i["num_threads"]) for i in threadpool_info()}


if __name__ == "__main__":
    main()
