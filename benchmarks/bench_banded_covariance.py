"""Banded TRF (EEG): BandedRidge on the covariance against its SVD path.

Workload, as an EEG researcher fits a forward model of several feature
spaces: 8 trials of ``--seconds`` s at 128 Hz, three feature spaces (an
envelope, 1 feature; a spectrogram, 8 bands; onsets, 4 features; AR(1)
series restarting at each trial) delayed by 0-32 samples (33 lags, 429
columns), 64 channels driven by a smooth random TRF of the envelope and the
spectrogram plus noise, ``--candidates`` band weightings (himalaya's
Dirichlet draws), 9 alphas, leave one trial out, R^2. float64 numpy.
Timed in the same run, alternating:

- ``BandedRidge(solver="covariance")``: X's moments once, one ``eigh`` of
  each candidate's rescaled covariance per fold;
- ``BandedRidge(solver="svd")``: today's path, one QR of X's rows per fold
  shared by the candidates, a p x p SVD per candidate and fold;
- ``BandedRidge(solver="auto")``, with the decomposition the rule chose.

Printed: seconds (median of ``--repeats``, each fit in a fresh process,
the delayed design built before the clock starts), the rise of the peak
resident memory over the process's memory just before the fit (sampled
every 5 ms, and the OS's peak), the ratio of each to the covariance's, and
the share of channels whose chosen candidate and alpha equal the SVD's, with
the largest relative difference of the coefficients.

``--crossover N [N ...]``: instead, where "auto"'s threshold of training
rows per column comes from: ``bench_banded.py``'s design (iid columns, bands
of 40 and 200, intercept, cv=5, 20 candidates, alphas ``logspace(0, 6, 9)``)
with N rows and ``--targets`` targets, ``solver="svd"`` and
``"covariance"`` alternating in this process, medians of ``--repeats``.

Run: ``python benchmarks/bench_banded_covariance.py [--seconds 30]
[--repeats 3] [--candidates 20]``, or ``--crossover 2400 4800 --targets 64
2000 --repeats 2``
"""

import argparse
import json
import resource
import subprocess
import sys
import threading
import time

import numpy as np
import psutil

N_TRIALS = 8
SFREQ = 128
# Feature spaces: envelope, spectrogram, onsets.
SPACES = {"envelope": 1, "spectrogram": 8, "onsets": 4}
N_LAGS = 33
N_CHANNELS = 64
ALPHAS = np.logspace(2, 10, 9)
AR_COEF = 0.9
NOISE = 3.0
SAMPLE_SECONDS = 0.005
SOLVERS = ("covariance", "svd", "auto")


def make_data(seconds, seed=0):
    """Delayed design (n, 429), its band labels, responses (n, 64), trials."""
    from skbatch import Delayer

    rng = np.random.default_rng(seed)
    length = int(seconds * SFREQ)
    n_features = sum(SPACES.values())
    trials = []
    for _ in range(N_TRIALS):
        noise = rng.standard_normal((length, n_features))
        out = np.empty_like(noise)
        out[0] = noise[0]
        for i in range(1, length):
            out[i] = AR_COEF * out[i - 1] + np.sqrt(1 - AR_COEF**2) * noise[i]
        trials.append(out)
    stimulus = np.concatenate(trials)
    groups = np.repeat(np.arange(N_TRIALS), length)
    lags = np.arange(N_LAGS)
    shape = np.exp(-0.5 * ((lags - 8) / 4.0) ** 2) - 0.5 * np.exp(
        -0.5 * ((lags - 20) / 5.0) ** 2
    )
    trf = shape[:, None, None] * rng.standard_normal((1, n_features, N_CHANNELS))
    # The onsets drive nothing: a band the search should weigh down.
    trf[:, -SPACES["onsets"] :] = 0
    signal = np.zeros((stimulus.shape[0], N_CHANNELS))
    for trial in range(N_TRIALS):
        rows = slice(trial * length, (trial + 1) * length)
        for lag in lags:
            signal[rows][lag:] += stimulus[rows][: length - lag] @ trf[lag]
    signal /= signal.std(axis=0)
    response = signal + NOISE * rng.standard_normal(signal.shape)
    X = Delayer(delays=lags).fit_transform(stimulus, groups=groups)
    # Delayer orders the columns lag by lag, the features within each lag.
    labels = np.tile(np.repeat(list(SPACES), list(SPACES.values())), N_LAGS)
    return X, labels, response, groups


def candidates_of(count, n_bands):
    """himalaya's Dirichlet draws of ``random_state=0``, as BandedRidge reads them."""
    from himalaya.ridge._random_search import generate_dirichlet_samples

    from skbatch._ridge.banded import band_candidates

    drawn = np.asarray(
        generate_dirichlet_samples(count, n_bands, [0.1, 1.0], random_state=0)
    )
    return band_candidates(drawn, n_bands, None, None)


def candidates(count):
    return candidates_of(count, len(SPACES))


def run_solver(solver, seconds, count):
    """Fit in this process: seconds, memory rise, choices and coefficients."""
    from sklearn.model_selection import LeaveOneGroupOut

    from skbatch import BandedRidge

    X, labels, Y, groups = make_data(seconds)
    weights = candidates(count)
    process = psutil.Process()
    before = process.memory_info().rss
    peak_before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
    peak = [before]
    done = threading.Event()

    def sample():
        while not done.is_set():
            peak[0] = max(peak[0], process.memory_info().rss)
            time.sleep(SAMPLE_SECONDS)

    sampler = threading.Thread(target=sample)
    sampler.start()
    start = time.perf_counter()
    model = BandedRidge(
        labels,
        alphas=ALPHAS,
        band_weights=weights,
        cv=LeaveOneGroupOut(),
        solver=solver,
    ).fit(X, Y, groups=groups)
    elapsed = time.perf_counter() - start
    done.set()
    sampler.join()
    peak_after = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
    top = max(peak[0], peak_after) if peak_after > peak_before else peak[0]
    return {
        "seconds": elapsed,
        "rise": top - before,
        "solver_": model.solver_,
        "alpha": model.alpha_.tolist(),
        "weights": model.band_weights_.tolist(),
        "coef": model.coef_.tolist(),
        "shape": list(X.shape),
    }


def measure(solver, seconds, count):
    out = subprocess.run(
        [
            sys.executable,
            __file__,
            "--worker",
            solver,
            "--seconds",
            str(seconds),
            "--candidates",
            str(count),
        ],
        check=True,
        capture_output=True,
        text=True,
    )
    return json.loads(out.stdout.strip().splitlines()[-1])


def crossover(sizes, targets, repeats, count):
    """svd against covariance on bench_banded.py's design at several sizes."""
    from skbatch import BandedRidge

    bands = (40, 200)
    p = sum(bands)
    labels = np.repeat(np.arange(len(bands)), bands)
    weights = candidates_of(count, len(bands))
    for n in sizes:
        for t in targets:
            rng = np.random.default_rng(0)
            X = rng.standard_normal((n, p))
            Y = X @ rng.standard_normal((p, t)) / np.sqrt(p)
            Y += rng.uniform(0.5, 3, t) * rng.standard_normal((n, t))
            seconds = {"svd": [], "covariance": []}
            for _ in range(repeats):
                for solver in seconds:
                    start = time.perf_counter()
                    BandedRidge(
                        labels,
                        alphas=np.logspace(0, 6, 9),
                        band_weights=weights,
                        cv=5,
                        solver=solver,
                    ).fit(X, Y)
                    seconds[solver].append(time.perf_counter() - start)
            svd, cov = (np.median(seconds[s]) for s in ("svd", "covariance"))
            print(
                f"n={n} ({0.8 * n / p:.1f} training rows per column), {t} targets: "
                f"svd {svd:.2f} s, covariance {cov:.2f} s, svd / covariance "
                f"{svd / cov:.2f}; load average {psutil.getloadavg()[0]:.2f}",
                flush=True,
            )


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=30)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--candidates", type=int, default=20)
    parser.add_argument("--solvers", nargs="+", default=list(SOLVERS), choices=SOLVERS)
    parser.add_argument("--worker", choices=SOLVERS, help=argparse.SUPPRESS)
    parser.add_argument("--crossover", type=int, nargs="+", metavar="N")
    parser.add_argument("--targets", type=int, nargs="+", default=[64, 2000])
    args = parser.parse_args()
    if args.crossover:
        crossover(args.crossover, args.targets, args.repeats, args.candidates)
        return
    if args.worker:
        print(json.dumps(run_solver(args.worker, args.seconds, args.candidates)))
        return
    results = {solver: [] for solver in args.solvers}
    for _ in range(args.repeats):
        for solver in args.solvers:
            results[solver].append(measure(solver, args.seconds, args.candidates))
    first = next(iter(results.values()))[0]
    n, p = first["shape"]
    print(
        f"{N_TRIALS} trials of {args.seconds:g} s: {n:,} rows, {p} columns in "
        f"{len(SPACES)} bands, {N_CHANNELS} channels, {args.candidates} candidates, "
        f"{ALPHAS.size} alphas, leave one trial out; load average "
        f"{psutil.getloadavg()[0]:.2f}"
    )
    reference = results.get("covariance") or first
    ref_seconds = np.median([r["seconds"] for r in reference])
    ref_rise = np.median([r["rise"] for r in reference])
    svd = (results.get("svd") or [None])[0]
    for solver, runs in results.items():
        seconds = np.median([r["seconds"] for r in runs])
        rise = np.median([r["rise"] for r in runs])
        each = ", ".join(f"{r['seconds']:.2f}" for r in runs)
        line = (
            f"solver={solver!r:13s} ({runs[0]['solver_']:10s}) {seconds:7.2f} s "
            f"({each}), {seconds / ref_seconds:5.2f}x the covariance's; memory "
            f"rise {rise / 1e6:6.0f} MB, {rise / ref_rise:5.2f}x"
        )
        if svd is not None:
            same = np.mean(
                (np.asarray(runs[0]["alpha"]) == np.asarray(svd["alpha"]))
                & np.all(
                    np.asarray(runs[0]["weights"]) == np.asarray(svd["weights"]),
                    axis=1,
                )
            )
            ref = np.asarray(svd["coef"])
            gap = np.max(np.abs(np.asarray(runs[0]["coef"]) - ref)) / np.max(
                np.abs(ref)
            )
            line += (
                f"; pair equal to the SVD's on {same:.0%} of channels, coef {gap:.1e}"
            )
        print(line, flush=True)


if __name__ == "__main__":
    main()
