"""The three estimators on a real CUDA device, against numpy.

Run with ``pytest -m cuda`` on a GPU host (``benchmarks/gpu_check.py`` does);
skipped where torch sees no CUDA device. Float64 runs must match numpy to
rounding; float32 runs (the GPU default) to float32 accuracy.
"""

import pickle

import numpy as np
import pytest
from numpy.testing import assert_allclose, assert_array_equal
from sklearn.linear_model import Ridge

from skbatch import (
    Backend,
    BatchedRidge,
    BootstrapEstimator,
    PermutationScorer,
    memory_budget,
)
from skbatch._engine import run_batched
from skbatch.memory import GB
from skbatch.testing import simulate_oom

torch = pytest.importorskip("torch")

pytestmark = [
    pytest.mark.cuda,
    pytest.mark.skipif(
        not torch.cuda.is_available(), reason="needs a CUDA device (torch)"
    ),
]

ALPHAS = np.logspace(-2, 3, 6)


def make_data(n_samples=300, n_features=20, n_targets=50, seed=0):
    rng = np.random.default_rng(seed)
    X = rng.standard_normal((n_samples, n_features))
    coef = rng.standard_normal((n_features, n_targets))
    Y = X @ coef + 2.0 * rng.standard_normal((n_samples, n_targets))
    return X, Y


def last_card():
    return f"cuda:{torch.cuda.device_count() - 1}"


def test_batched_ridge_float64_matches_numpy():
    X, Y = make_data()
    reference = BatchedRidge(alphas=ALPHAS, device="cpu").fit(X, Y)
    model = BatchedRidge(alphas=ALPHAS, dtype="float64", device="cuda").fit(X, Y)
    assert model.backend_ == Backend("torch", "cuda:0")
    assert_array_equal(model.alpha_, reference.alpha_)
    for name in ("coef_", "intercept_", "best_score_"):
        assert_allclose(getattr(model, name), getattr(reference, name), rtol=1e-8)
    # numpy in, numpy out; a CUDA tensor in, a CUDA tensor on that card out.
    assert_allclose(model.predict(X), reference.predict(X), rtol=1e-8)
    out = model.predict(torch.asarray(X, device="cuda:0"))
    assert isinstance(out, torch.Tensor) and out.device == torch.device("cuda:0")
    assert_allclose(out.cpu().numpy(), reference.predict(X), rtol=1e-8)


def test_batched_ridge_float32_default_matches_numpy_to_float32_accuracy():
    X, Y = make_data(seed=1)
    reference = BatchedRidge(alphas=ALPHAS, device="cpu").fit(X, Y)
    model = BatchedRidge(alphas=ALPHAS, device="cuda").fit(X, Y)
    assert model.dtype_ == np.float32
    assert_allclose(
        model.score_per_target(X, Y), reference.score_per_target(X, Y), atol=1e-4
    )
    same_alpha = model.alpha_ == reference.alpha_
    assert same_alpha.mean() > 0.9  # near-ties may flip in float32
    assert_allclose(
        model.coef_[same_alpha], reference.coef_[same_alpha], rtol=1e-3, atol=1e-3
    )


def test_bootstrap_fast_path_matches_numpy():
    X, Y = make_data(n_targets=8, seed=2)
    params = dict(n_bootstrap=64, random_state=0, return_samples=True)
    reference = BootstrapEstimator(Ridge(alpha=3.0), device="cpu", **params).fit(X, Y)
    boot = BootstrapEstimator(Ridge(alpha=3.0), device="cuda", **params).fit(X, Y)
    assert boot.backend_ == Backend("torch", "cuda:0")
    for name, result in boot.results_.items():
        expected = reference.results_[name]
        for field in ("standard_error", "ci_lower", "ci_upper", "samples"):
            assert_allclose(
                getattr(result, field), getattr(expected, field), rtol=1e-8, atol=1e-10
            )


def test_bootstrap_fast_path_float32_matches_numpy():
    X, Y = make_data(n_targets=8, seed=3)
    X32, Y32 = X.astype(np.float32), Y.astype(np.float32)
    params = dict(n_bootstrap=32, random_state=0)
    reference = BootstrapEstimator(Ridge(alpha=3.0), device="cpu", **params).fit(X, Y)
    boot = BootstrapEstimator(Ridge(alpha=3.0), device="cuda", **params).fit(X32, Y32)
    expected = reference.results_["coef_"].standard_error
    assert_allclose(boot.results_["coef_"].standard_error, expected, rtol=1e-3)


def test_permutation_fast_path_matches_numpy():
    X, Y = make_data(n_targets=6, seed=4)
    params = dict(
        n_permutations=50,
        random_state=0,
        multioutput="raw_values",
        return_null=True,
    )
    reference = PermutationScorer(Ridge(alpha=1.0), device="cpu", **params).fit(X, Y)
    perm = PermutationScorer(Ridge(alpha=1.0), device="cuda", **params).fit(X, Y)
    assert perm.backend_ == Backend("torch", "cuda:0")
    assert_allclose(perm.score_, reference.score_, rtol=1e-8)
    assert_allclose(
        perm.permutation_scores_, reference.permutation_scores_, rtol=1e-8, atol=1e-10
    )
    assert_array_equal(perm.pvalue_, reference.pvalue_)
    assert_array_equal(perm.pvalue_fwer_, reference.pvalue_fwer_)


def test_device_index_places_the_work_on_that_card():
    card = last_card()
    index = torch.cuda.device_count() - 1
    X, Y = make_data(n_samples=2000, n_features=200, n_targets=500, seed=5)
    torch.cuda.reset_peak_memory_stats(index)
    model = BatchedRidge(alphas=ALPHAS, device=card).fit(X, Y)
    assert model.backend_.device == card
    # The design matrix alone is 1.6 MB in float32 on that card.
    assert torch.cuda.max_memory_allocated(index) > X.size * 4


def test_oom_recovery_on_cuda_gives_the_unsplit_result():
    X, Y = make_data(n_targets=40, seed=6)
    reference = BatchedRidge(alphas=ALPHAS, dtype="float64", device="cuda").fit(X, Y)
    with simulate_oom(max_items=7):
        recovered = BatchedRidge(alphas=ALPHAS, dtype="float64", device="cuda").fit(
            X, Y
        )
    for name in ("coef_", "intercept_", "alpha_"):
        assert_allclose(getattr(recovered, name), getattr(reference, name), rtol=1e-12)


def test_a_real_cuda_out_of_memory_error_is_recovered():
    backend = Backend("torch", "cuda:0")
    impossible = 2**50  # bytes: a petabyte, refused by the allocator at once

    def run(max_items):
        out = {}

        def kernel(ids):
            if max_items is not None and len(ids) > max_items:
                torch.empty(impossible, dtype=torch.uint8, device="cuda:0")
            return backend.asarray(ids, np.float64) ** 2

        def reduce(ids, block):
            out.update(zip(ids.tolist(), block.tolist()))

        plan = run_batched(
            kernel,
            reduce,
            n_items=50,
            backend=backend,
            device_bytes_per_item=8,
            batch_size=16,
        )
        return [out[i] for i in range(50)], plan

    expected, _ = run(None)
    result, plan = run(4)
    assert plan.n_oom_recoveries > 0
    assert result == expected


def test_memory_budget_is_measured_on_the_card():
    index = torch.cuda.device_count() - 1
    free, total = torch.cuda.mem_get_info(index)
    budget = memory_budget(Backend("torch", last_card()))
    assert 0 < budget <= total / GB
    assert budget == pytest.approx(0.8 * free / GB, rel=0.05)


def test_cuda_model_pickles_and_moves_to_cpu():
    X, Y = make_data(seed=7)
    model = BatchedRidge(alphas=ALPHAS, dtype="float64", device="cuda").fit(X, Y)
    loaded = pickle.loads(pickle.dumps(model))
    assert loaded.backend_ == model.backend_
    assert_allclose(loaded.predict(X), model.predict(X), rtol=1e-12)
    assert_allclose(loaded.to_device("cpu").predict(X), model.predict(X), rtol=1e-10)
