"""Do the stages of ``fit_report_`` add up to the fit's wall time?

Fits whose decompositions dominate (many samples and features, few
targets), each timed from outside ``fit`` as the median of repeats, against
the sum of their report's stage seconds; the ratio should be within 5% of
100%. A check of the report, not of speed: run it on the code of two
commits (``PYTHONPATH`` pointing to each) to compare.

Run ``python benchmarks/bench_report_wall.py`` (a few minutes on two cores)
or with ``--samples 5000 --features 300`` (seconds).
"""

import argparse
import time
import warnings

import numpy as np

from skbatch import BatchedRidge, PermutationScorer


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--samples", type=int, default=20_000)
    parser.add_argument("--features", type=int, default=1_000)
    parser.add_argument("--targets", type=int, default=20)
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    rng = np.random.default_rng(0)
    X = rng.standard_normal((args.samples, args.features))
    Y = rng.standard_normal((args.samples, args.targets))
    print(f"X {X.shape}, {args.targets} targets, median of {args.repeats}")
    fits = {
        "BatchedRidge(cv=5)": lambda: BatchedRidge(cv=5),
        "PermutationScorer(BatchedRidge(), cv=5, 20 permutations)": lambda: (
            PermutationScorer(BatchedRidge(), n_permutations=20, cv=5)
        ),
    }
    for name, make in fits.items():
        runs = []
        for _ in range(args.repeats):
            model = make()
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                start = time.perf_counter()
                model.fit(X, Y)
                wall = time.perf_counter() - start
            stages = sum(stage.seconds for stage in model.fit_report_.stages)
            runs.append((wall, stages))
        wall, stages = sorted(runs)[len(runs) // 2]
        print(
            f"{name}: wall {wall:.2f} s, stages {stages:.2f} s "
            f"({100 * stages / wall:.1f}% of the wall time)"
        )


if __name__ == "__main__":
    main()
