"""Where the covariance decomposition loses accuracy against the SVD.

Designs of 2,000 rows and 60 columns with singular values spread over
``10^-k`` (k = 2, 4, 6, 8) times the largest, targets driven by the leading
directions plus noise, 5-fold CV at one alpha (1e-2, 1e-6, 1e-10). Printed:
``eps * cond(X'X + alpha I)`` (the covariance's error bound, which
``solver="auto"`` compares with ``COVARIANCE_MAX_ERROR``), the largest
coefficient error relative to the largest coefficient of the float64 SVD
fit for the float64 covariance fit, its ratio to the bound, and the float32
SVD and covariance fits (float32 X and y).

Run: ``python benchmarks/accuracy_covariance.py``
"""

import warnings

import numpy as np

from skbatch import BatchedRidge
from skbatch._ridge.covariance import COVARIANCE_MAX_ERROR

N_SAMPLES, N_FEATURES, N_TARGETS = 2000, 60, 4


def relative_error(model, reference):
    return np.abs(model.coef_ - reference.coef_).max() / np.abs(reference.coef_).max()


def main():
    rng = np.random.default_rng(1)
    eps = np.finfo(np.float64).eps
    print(
        f"limit of solver='auto': eps * cond <= {COVARIANCE_MAX_ERROR:g}\n"
        "spread  alpha   eps*cond  cov f64 error  error/bound  "
        "svd f32 error  cov f32 error"
    )
    for spread in (2, 4, 6, 8):
        U, _ = np.linalg.qr(rng.standard_normal((N_SAMPLES, N_FEATURES)))
        V, _ = np.linalg.qr(rng.standard_normal((N_FEATURES, N_FEATURES)))
        singular = np.logspace(0, -spread, N_FEATURES) * np.sqrt(N_SAMPLES)
        X = (U * singular) @ V.T + 1.0
        Y = U[:, :10] @ rng.standard_normal((10, N_TARGETS)) * 10
        Y += rng.standard_normal((N_SAMPLES, N_TARGETS))
        centred = X - X.mean(axis=0)
        eigenvalues = np.linalg.eigvalsh(centred.T @ centred)
        for alpha in (1e-2, 1e-6, 1e-10):
            bound = eps * (eigenvalues[-1] + alpha) / (max(eigenvalues[0], 0) + alpha)
            errors = []
            reference = BatchedRidge([alpha], cv=5, solver="svd").fit(X, Y)
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                for dtype in ("float64", "float32"):
                    data = (X.astype(dtype), Y.astype(dtype))
                    for solver in ("svd", "covariance"):
                        if (dtype, solver) == ("float64", "svd"):
                            continue
                        model = BatchedRidge([alpha], cv=5, solver=solver, dtype=dtype)
                        errors.append(relative_error(model.fit(*data), reference))
            print(
                f"1e-{spread}   {alpha:7.0e} {bound:9.1e}  {errors[0]:13.1e}  "
                f"{errors[0] / bound:11.2f}  {errors[1]:13.1e}  {errors[2]:13.1e}"
            )


if __name__ == "__main__":
    main()
