"""Temporal response functions (EEG): BatchedRidge against mTRF, MNE and a loop.

Workload, as an EEG researcher fits a forward model: 8 trials of
``--seconds`` s at 128 Hz, 17 stimulus features (AR(1) series,
restarting at each trial) delayed by 0-64 samples (65 lags, 1,105 columns),
64 channels driven by a smooth random TRF plus noise, 9 alphas, leave one
trial out, each channel choosing its alpha by the mean over folds of its
held-out Pearson correlation (mTRF's criterion). float64 numpy. Timed in the
same run, each tool in a fresh process:

- ``BatchedRidge(cv=LeaveOneGroupOut(), scoring="correlation")`` on the
  delayed design (built by ``Delayer`` before the clock starts), and
  ``Pipeline(Delayer, BatchedRidge)`` on the undelayed stimulus; with
  ``--tools svd``, also ``BatchedRidge(solver="svd")`` (the decomposition
  of every fit before the covariance path);
- a hand-written numpy loop on the delayed design: per-trial X'X, X'Y and
  sums, each fold's statistics as the total less its trial, one ``eigh`` per
  fold, every alpha's coefficients and held-out correlation, the refit;
- mTRFpy (``mtrf.model.TRF.train``, ``k=-1``, ``reg_per_y_channel=True``) on
  the list of undelayed trials; its lambda is ``alpha / (fs * 7)``: it
  solves ``(mean of 7 training trials' X'X + lambda fs I) w = mean X'y``;
- MNE (``ReceptiveField`` with a float ``estimator``: ``TimeDelayingRidge``,
  which forms the delayed covariance from the stimulus' correlations) fit
  per alpha and fold on the trials as epochs, scored by ``corrcoef``.

Printed per trial length: seconds (median of ``--repeats`` for BatchedRidge
and the loop, alternating; ``--peer-repeats`` for mTRF and MNE), the rise of
the peak resident memory over the process's memory just before the fit
(sampled every 5 ms, and the OS's peak), ratios against BatchedRidge, and
the share of channels whose alpha equals BatchedRidge's.

Run: ``python benchmarks/bench_trf.py [--seconds 10 30 60] [--repeats 3]
[--tools batched pipeline loop mtrf mne svd]``
"""

import argparse
import gc
import json
import resource
import subprocess
import sys
import threading
import time
from pathlib import Path

import numpy as np
import psutil

# The package of this checkout (and of the workers started from this file),
# not whichever one the environment installed.
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

N_TRIALS = 8
SFREQ = 128
N_FEATURES = 17
N_LAGS = 65
N_CHANNELS = 64
ALPHAS = np.logspace(2, 10, 9)
# AR(1) coefficient of the stimulus features within a trial.
AR_COEF = 0.9
# Noise standard deviation against a signal of unit variance.
NOISE = 3.0
# Seconds between samples of the resident memory.
SAMPLE_SECONDS = 0.005
TOOLS = ("batched", "pipeline", "loop", "mtrf", "mne", "svd")
NAMES = {
    "batched": "BatchedRidge (delayed X)",
    "pipeline": "Delayer + BatchedRidge",
    "loop": "hand-written loop",
    "mtrf": "mTRFpy TRF.train",
    "mne": "MNE ReceptiveField",
    "svd": "BatchedRidge solver='svd'",
}


def make_data(seconds, seed=0):
    """Stimulus (n, 17), responses (n, 64) and trial labels (n,)."""
    rng = np.random.default_rng(seed)
    length = int(seconds * SFREQ)
    trials = []
    for _ in range(N_TRIALS):
        noise = rng.standard_normal((length, N_FEATURES))
        out = np.empty_like(noise)
        out[0] = noise[0]
        for i in range(1, length):
            out[i] = AR_COEF * out[i - 1] + np.sqrt(1 - AR_COEF**2) * noise[i]
        trials.append(out)
    stimulus = np.concatenate(trials)
    groups = np.repeat(np.arange(N_TRIALS), length)
    # A smooth TRF: Gaussian bumps over the lags, random per feature/channel.
    lags = np.arange(N_LAGS)
    shape = np.exp(-0.5 * ((lags - 20) / 8.0) ** 2) - 0.5 * np.exp(
        -0.5 * ((lags - 40) / 10.0) ** 2
    )
    trf = shape[:, None, None] * rng.standard_normal((1, N_FEATURES, N_CHANNELS))
    signal = np.zeros((stimulus.shape[0], N_CHANNELS))
    for trial in range(N_TRIALS):
        rows = slice(trial * length, (trial + 1) * length)
        for lag in lags:
            signal[rows][lag:] += stimulus[rows][: length - lag] @ trf[lag]
    signal /= signal.std(axis=0)
    response = signal + NOISE * rng.standard_normal(signal.shape)
    return stimulus, response, groups, length


def delayed(stimulus, groups):
    from skbatch import Delayer

    return Delayer(delays=np.arange(N_LAGS)).fit_transform(stimulus, groups=groups)


def hand_loop(X, Y, groups, alphas):
    """Per-trial statistics, one eigh per fold, every alpha: (alphas, coef)."""
    bounds = np.flatnonzero(np.diff(groups)) + 1
    trials = [slice(a, b) for a, b in zip([0, *bounds], [*bounds, len(groups)])]
    stats = [
        (r.stop - r.start, X[r].sum(0), Y[r].sum(0), X[r].T @ X[r], X[r].T @ Y[r])
        for r in trials
    ]
    total = [sum(s[i] for s in stats) for i in range(5)]

    def solve(n, sx, sy, xx, xy):
        mx, my = sx / n, sy / n
        s, V = np.linalg.eigh(xx - n * np.outer(mx, mx))
        return mx, my, s, V, V.T @ (xy - n * np.outer(mx, my))

    scores = np.zeros((len(alphas), Y.shape[1]))
    for k, rows in enumerate(trials):
        mx, my, s, V, VD = solve(*[t - p for t, p in zip(total, stats[k])])
        Xt, Yt = X[rows] - mx, Y[rows] - my
        Yt = (Yt - Yt.mean(0)) / Yt.std(0)
        for a, alpha in enumerate(alphas):
            P = Xt @ (V @ (VD / (s[:, None] + alpha)))
            P = (P - P.mean(0)) / P.std(0)
            scores[a] += (P * Yt).mean(0)
    best = np.argmax(scores, axis=0)
    mx, my, s, V, VD = solve(*total)
    coef = V @ (VD / (s[:, None] + alphas[best]))
    return alphas[best], coef.T, my - mx @ coef


def run_tool(tool, seconds):
    """Fit one tool in this process; (seconds, rise in bytes, alphas chosen)."""
    stimulus, response, groups, length = make_data(seconds)
    X = delayed(stimulus, groups) if tool in ("batched", "loop", "svd") else None
    if tool == "mtrf":
        from mtrf.model import TRF

        stim = [stimulus[groups == g] for g in range(N_TRIALS)]
        resp = [response[groups == g] for g in range(N_TRIALS)]
        lambdas = ALPHAS / (SFREQ * (N_TRIALS - 1))
    if tool == "mne":
        import mne

        mne.set_log_level("ERROR")
        from mne.decoding import ReceptiveField

        epochs_x = stimulus.reshape(N_TRIALS, length, N_FEATURES).transpose(1, 0, 2)
        epochs_y = response.reshape(N_TRIALS, length, N_CHANNELS).transpose(1, 0, 2)
    from sklearn.model_selection import LeaveOneGroupOut
    from sklearn.pipeline import make_pipeline

    from skbatch import BatchedRidge, Delayer

    def fit():
        if tool in ("batched", "pipeline", "svd"):
            ridge = BatchedRidge(
                ALPHAS,
                cv=LeaveOneGroupOut(),
                scoring="correlation",
                solver="svd" if tool == "svd" else "auto",
            )
            if tool != "pipeline":
                return ridge.fit(X, response, groups=groups).alpha_
            model = make_pipeline(Delayer(delays=np.arange(N_LAGS)), ridge)
            model.fit(
                stimulus,
                response,
                delayer__groups=groups,
                batchedridge__groups=groups,
            )
            return model[-1].alpha_
        if tool == "loop":
            return hand_loop(X, response, groups, ALPHAS)[0]
        if tool == "mtrf":
            trf = TRF(direction=1)
            trf.train(
                stim,
                resp,
                SFREQ,
                0.0,
                (N_LAGS - 1) / SFREQ,
                list(lambdas),
                k=-1,
                verbose=False,
                reg_per_y_channel=True,
            )
            chosen = np.asarray(trf.regularization) * SFREQ * (N_TRIALS - 1)
            return np.broadcast_to(chosen, (N_CHANNELS,))
        scores = np.zeros((len(ALPHAS), N_CHANNELS))
        for a, alpha in enumerate(ALPHAS):
            for test in range(N_TRIALS):
                train = np.arange(N_TRIALS) != test
                rf = ReceptiveField(
                    0.0,
                    (N_LAGS - 1) / SFREQ,
                    SFREQ,
                    estimator=float(alpha),
                    scoring="corrcoef",
                    fit_intercept=True,
                )
                rf.fit(epochs_x[:, train], epochs_y[:, train])
                scores[a] += rf.score(epochs_x[:, [test]], epochs_y[:, [test]])
        best = np.argmax(scores, axis=0)
        # The refit on every trial, once per alpha some channel chose.
        for alpha in np.unique(ALPHAS[best]):
            ReceptiveField(
                0.0,
                (N_LAGS - 1) / SFREQ,
                SFREQ,
                estimator=float(alpha),
                scoring="corrcoef",
                fit_intercept=True,
            ).fit(epochs_x, epochs_y)
        return ALPHAS[best]

    gc.collect()
    process = psutil.Process()
    before = process.memory_info().rss
    peak_before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
    peak = [before]
    done = threading.Event()

    def sample():
        while not done.is_set():
            peak[0] = max(peak[0], process.memory_info().rss)
            time.sleep(SAMPLE_SECONDS)

    sampler = threading.Thread(target=sample, daemon=True)
    sampler.start()
    start = time.perf_counter()
    chosen = fit()
    elapsed = time.perf_counter() - start
    done.set()
    sampler.join()
    peak_after = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
    top = peak[0]
    if peak_after > peak_before:
        top = max(top, peak_after)
    return elapsed, top - before, np.asarray(chosen, dtype=float).tolist()


def measure(tool, seconds):
    """Run one tool in a fresh process; its JSON result."""
    out = subprocess.run(
        [sys.executable, __file__, "--worker", tool, "--seconds", str(seconds)],
        check=True,
        capture_output=True,
        text=True,
    )
    return json.loads(out.stdout.strip().splitlines()[-1])


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, nargs="+", default=[10, 30])
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--peer-repeats", type=int, default=1)
    parser.add_argument("--tools", nargs="+", default=list(TOOLS[:-1]), choices=TOOLS)
    parser.add_argument("--worker", choices=TOOLS, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        elapsed, rise, chosen = run_tool(args.worker, args.seconds[0])
        print(json.dumps({"seconds": elapsed, "rise": rise, "alphas": chosen}))
        return
    for seconds in args.seconds:
        rows = int(seconds * SFREQ) * N_TRIALS
        print(
            f"\n{N_TRIALS} trials of {seconds:g} s: {rows:,} rows, "
            f"{N_FEATURES * N_LAGS:,} columns, {N_CHANNELS} channels, "
            f"{len(ALPHAS)} alphas, leave one trial out",
            flush=True,
        )
        results = {tool: [] for tool in args.tools}
        for repeat in range(max(args.repeats, args.peer_repeats)):
            for tool in args.tools:
                peer = tool in ("mtrf", "mne")
                if repeat < (args.peer_repeats if peer else args.repeats):
                    results[tool].append(measure(tool, seconds))
        reference = results.get("batched") or next(iter(results.values()))
        ref_seconds = np.median([r["seconds"] for r in reference])
        ref_rise = np.median([r["rise"] for r in reference])
        ref_alphas = np.asarray(reference[0]["alphas"])
        for tool, runs in results.items():
            time_ = np.median([r["seconds"] for r in runs])
            rise = np.median([r["rise"] for r in runs])
            same = np.mean(np.isclose(runs[0]["alphas"], ref_alphas, rtol=1e-6))
            each = ", ".join(f"{r['seconds']:.2f}" for r in runs)
            print(
                f"{NAMES[tool]:26s} {time_:7.2f} s "
                f"({each}), "
                f"{time_ / ref_seconds:5.2f}x BatchedRidge's time; "
                f"memory rise {rise / 1e6:7.0f} MB, {rise / ref_rise:5.2f}x; "
                f"alphas equal to BatchedRidge's on {same:.0%} of channels",
                flush=True,
            )


if __name__ == "__main__":
    main()
