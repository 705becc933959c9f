"""Targets larger than memory: BatchedRidge reading y from disk, batch by batch.

Every fit on an out-of-core ``y`` (numpy.memmap, h5py, zarr, dask) is
compared with the same estimator fit on the same values in memory.
"""

import json
import os
import pickle
import shutil
import subprocess
import sys
import textwrap
import warnings

import numpy as np
import pytest
from sklearn.exceptions import NotFittedError
from sklearn.metrics import r2_score
from sklearn.utils.validation import check_is_fitted

import skbatch._estimators.predict
import skbatch._ridge.batched
from skbatch import BatchedRidge
from skbatch._engine.targets import ColumnWriter, TargetColumns, chunk_aligned

da = pytest.importorskip("dask.array")
h5py = pytest.importorskip("h5py")
zarr = pytest.importorskip("zarr")

ALPHAS = [0.1, 1.0, 10.0, 100.0, 1e3, 1e4, 1e5]
# Columns per chunk of the chunked arrays below.
WIDTH = 40


def make_data(n=60, p=5, t=300, seed=0):
    rng = np.random.default_rng(seed)
    X = rng.standard_normal((n, p))
    Y = X @ rng.standard_normal((p, t)) + rng.standard_normal((n, t)) * np.linspace(
        0.1, 10.0, t
    )
    return X, Y.astype(np.float32)


def store(kind, Y, path, width=WIDTH):
    """``Y`` written to disk as ``kind``, chunked by ``width`` columns."""
    if kind == "memmap":
        out = np.memmap(path / "y.dat", dtype=Y.dtype, mode="w+", shape=Y.shape)
        out[:] = Y
        out.flush()
        return np.memmap(path / "y.dat", dtype=Y.dtype, mode="r", shape=Y.shape)
    if kind == "zarr":
        out = zarr.create_array(
            store=str(path / "y.zarr"),
            shape=Y.shape,
            chunks=(Y.shape[0], width),
            dtype=Y.dtype,
        )
        out[:] = Y
        return out
    if kind == "h5py":
        return h5py.File(path / "y.h5", "w").create_dataset(
            "y", data=Y, chunks=(Y.shape[0], width)
        )
    return da.from_array(Y, chunks=(Y.shape[0] // 2, width))


KINDS = ["memmap", "zarr", "h5py", "dask"]


def assert_same_fit(model, reference, rtol=1e-6):
    np.testing.assert_array_equal(model.alpha_, reference.alpha_)
    np.testing.assert_allclose(model.coef_, reference.coef_, rtol=rtol, atol=1e-9)
    np.testing.assert_allclose(model.intercept_, reference.intercept_, rtol=rtol)
    np.testing.assert_allclose(model.best_score_, reference.best_score_, rtol=rtol)


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("cv", [None, "gcv", 3])
def test_fit_on_disk_equals_fit_in_memory(kind, cv, tmp_path):
    X, Y = make_data()
    reference = BatchedRidge(alphas=ALPHAS, cv=cv).fit(X, Y)
    model = BatchedRidge(alphas=ALPHAS, cv=cv).fit(X, store(kind, Y, tmp_path))
    assert_same_fit(model, reference)


def memmap_layout(layout, values, path):
    """A memmap holding ``values``, laid out in its file as ``layout`` says."""
    n, t = values.shape
    file = path / f"{layout}.dat"
    if layout in ("C", "F"):
        Y = np.memmap(file, dtype=values.dtype, mode="w+", shape=(n, t), order=layout)
        Y[:] = values
        return Y
    if layout == "offset":
        Y = np.memmap(file, dtype=values.dtype, mode="w+", shape=(n, t), offset=12)
        Y[:] = values
        return np.memmap(file, dtype=values.dtype, mode="r+", shape=(n, t), offset=12)
    if layout == "copy-on-write":
        np.memmap(file, dtype=values.dtype, mode="w+", shape=(n, t))[:] = -1.0
        Y = np.memmap(file, dtype=values.dtype, mode="c", shape=(n, t))
        Y[:] = values  # private to this mapping: the file keeps -1
        return Y
    # A slice of a bigger array on disk: the file holds other columns/rows.
    wide = layout == "columns of a wider file"
    shape = (n, t + 7) if wide else (n + 5, t)
    order = "C" if wide else "F"
    big = np.memmap(file, dtype=values.dtype, mode="w+", shape=shape, order=order)
    big[:] = -1.0
    view = big[:, 3 : 3 + t] if wide else big[2 : 2 + n]
    view[:] = values
    return view


MEMMAP_LAYOUTS = [
    "C",
    "F",
    "offset",
    "copy-on-write",
    "columns of a wider file",
    "rows of a longer file",
]


@pytest.mark.parametrize("layout", MEMMAP_LAYOUTS)
def test_memmaps_are_read_as_laid_out_in_their_file(layout, tmp_path):
    X, Y = make_data()
    on_disk = memmap_layout(layout, Y, tmp_path)
    columns = TargetColumns(on_disk)
    for start, stop in ((0, 300), (7, 91), (299, 300)):
        np.testing.assert_array_equal(columns.read(start, stop), Y[:, start:stop])
    reference = BatchedRidge(alphas=ALPHAS).fit(X, Y)
    model = BatchedRidge(alphas=ALPHAS, max_memory_gb=5e-4).fit(X, on_disk)
    assert_same_fit(model, reference)


def peak_rss_since_reset(reset=False):
    if reset:
        with open("/proc/self/clear_refs", "w") as f:
            f.write("5")
    with open("/proc/self/status") as f:
        return next(int(line.split()[1]) * 1024 for line in f if "VmHWM" in line)


@pytest.mark.skipif(
    not sys.platform.startswith("linux"), reason="reads the peak RSS from /proc"
)
def test_reading_a_memmap_holds_only_the_block(tmp_path):
    # Read through a mapping, each row of a block of a C-order file would
    # also map the pages around it: 150 MB for these blocks of 7 MB.
    n, t, width = 2000, 30_000, 868
    Y = np.memmap(tmp_path / "y.dat", dtype=np.float32, mode="w+", shape=(n, t))
    Y[:] = 1.0
    Y.flush()
    del Y
    columns = TargetColumns(
        np.memmap(tmp_path / "y.dat", dtype=np.float32, mode="r", shape=(n, t))
    )
    start = peak_rss_since_reset(reset=True)
    for first in range(0, t - width, width):
        block = columns.read(first, first + width)
    assert block.shape == (n, width)
    assert peak_rss_since_reset() - start < 3 * block.nbytes + 10e6


@pytest.mark.parametrize("layout", MEMMAP_LAYOUTS)
def test_predict_into_memmaps_as_laid_out_in_their_file(layout, tmp_path):
    X, Y = make_data()
    model = BatchedRidge(alphas=ALPHAS, max_memory_gb=5e-4).fit(X, Y)
    out = memmap_layout(layout, np.zeros(Y.shape), tmp_path)
    model.predict(X, out=out)
    np.testing.assert_allclose(out, model.predict(X), rtol=1e-12)


@pytest.mark.parametrize("kind", ["memmap", "zarr"])
def test_weighted_fit_on_disk_equals_fit_in_memory(kind, tmp_path):
    X, Y = make_data()
    weights = np.random.default_rng(2).uniform(0.0, 3.0, X.shape[0])
    reference = BatchedRidge(alphas=ALPHAS).fit(X, Y, sample_weight=weights)
    model = BatchedRidge(alphas=ALPHAS, max_memory_gb=5e-4).fit(
        X, store(kind, Y, tmp_path), sample_weight=weights
    )
    assert_same_fit(model, reference)


@pytest.mark.parametrize("kind", KINDS)
def test_one_alpha_for_all_targets_and_stored_scores(kind, tmp_path):
    X, Y = make_data()
    params = dict(alphas=ALPHAS, alpha_per_target=False, store_cv_results=True)
    reference = BatchedRidge(**params).fit(X, Y)
    model = BatchedRidge(**params).fit(X, store(kind, Y, tmp_path))
    assert_same_fit(model, reference)
    np.testing.assert_allclose(
        model.cv_results_["scores"], reference.cv_results_["scores"], rtol=1e-6
    )


@pytest.mark.parametrize("kind", ["zarr", "h5py", "dask"])
def test_batches_are_whole_chunks(kind, tmp_path):
    X, Y = make_data(t=1000)
    model = BatchedRidge(alphas=ALPHAS).fit(X, store(kind, Y, tmp_path))
    (stage,) = model.fit_report_.stages
    assert stage.batch_size % WIDTH == 0
    assert stage.n_batches == -(-Y.shape[1] // stage.batch_size)


@pytest.mark.parametrize("kind", ["zarr", "h5py", "dask"])
def test_a_chunk_wider_than_the_budget_is_read_in_equal_parts(kind, tmp_path):
    # About 20 targets fit this budget: chunks of 40 columns are read in
    # halves or smaller, never in a part that straddles two chunks.
    X, Y = make_data(t=400)
    model = BatchedRidge(alphas=ALPHAS, max_memory_gb=2.4e-4).fit(
        X, store(kind, Y, tmp_path)
    )
    (stage,) = model.fit_report_.stages
    assert stage.batch_size < WIDTH
    assert WIDTH % stage.batch_size == 0
    reference = BatchedRidge(alphas=ALPHAS).fit(X, Y)
    assert_same_fit(model, reference)


def test_in_memory_targets_keep_the_engine_plan(tmp_path):
    # A budget that plans batches of no multiple of the chunk width: numpy
    # targets keep that plan, chunked targets round it to whole chunks.
    X, Y = make_data(t=400)
    params = dict(alphas=ALPHAS, max_memory_gb=6e-4)
    (in_memory,) = BatchedRidge(**params).fit(X, Y).fit_report_.stages
    (on_disk,) = (
        BatchedRidge(**params).fit(X, store("zarr", Y, tmp_path)).fit_report_.stages
    )
    assert in_memory.batch_size % WIDTH != 0
    assert on_disk.batch_size % WIDTH == 0
    assert on_disk.batch_size <= in_memory.batch_size


@pytest.mark.parametrize(
    ("size", "room", "width"),
    [(s, r, w) for w in (1, 7, 40, 97) for s in (1, 5, 40, 100) for r in (s, 3 * s)],
)
def test_chunk_aligned_batch_sizes(size, room, width):
    aligned = chunk_aligned(size, room, width)
    if size >= width:
        # The most whole chunks the planned batch holds.
        assert aligned == max(k * width for k in range(1, size // width + 1))
    elif room >= width:
        assert aligned == width
    else:
        # The largest equal part of a chunk that the budget holds.
        assert aligned == max(d for d in range(1, room + 1) if width % d == 0)
    assert chunk_aligned(size, room, None) == size


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize(
    ("value", "match"), [(np.nan, "NaN"), (np.inf, "infinity"), (-np.inf, "infinity")]
)
def test_a_bad_value_names_its_target_and_leaves_the_model_unfitted(
    kind, value, match, tmp_path
):
    X, Y = make_data(t=300)
    Y[17, 213] = value
    Y[3, 250] = value
    model = BatchedRidge(alphas=ALPHAS, max_memory_gb=5e-4)
    with pytest.raises(ValueError, match=rf"contains {match}: target 213 \("):
        model.fit(X, store(kind, Y, tmp_path))
    with pytest.raises(NotFittedError):
        check_is_fitted(model)
    assert not hasattr(model, "fit_report_")


def test_a_failed_refit_keeps_the_previous_model(tmp_path):
    X, Y = make_data()
    model = BatchedRidge(alphas=ALPHAS).fit(X, Y)
    coef = model.coef_.copy()
    Y[0, 299] = np.nan
    with pytest.raises(ValueError, match="target 299"):
        model.fit(X, store("zarr", Y, tmp_path))
    np.testing.assert_array_equal(model.coef_, coef)


def test_magnitudes_are_checked_per_batch_naming_the_target(tmp_path):
    X, Y = make_data()
    Y = Y.astype(np.float64)
    Y[5, 123] = 1e160
    on_disk = store("memmap", Y, tmp_path)
    with pytest.raises(ValueError, match=r"up to 1e\+160.*target 123 is the first"):
        BatchedRidge(alphas=ALPHAS, max_memory_gb=5e-4).fit(X, on_disk)
    # The in-memory check names it too.
    with pytest.raises(ValueError, match="target 123 is the first"):
        BatchedRidge(alphas=ALPHAS).fit(X, Y)


@pytest.mark.parametrize(
    ("make_y", "error", "match"),
    [
        (lambda n: np.zeros((n + 1, 3)), ValueError, "inconsistent numbers of samples"),
        (lambda n: np.zeros((n, 0)), ValueError, "at least one target"),
        (lambda n: np.zeros((n, 2, 2)), ValueError, r"must be 2-D.*\(60, 2, 2\)"),
        (lambda n: np.zeros((n, 3), dtype=np.complex64), ValueError, "complex64"),
    ],
)
def test_targets_on_disk_are_validated_from_their_metadata(
    make_y, error, match, tmp_path, monkeypatch
):
    X, _ = make_data()
    values = make_y(X.shape[0])
    Y = np.memmap(tmp_path / "y.dat", dtype=values.dtype, mode="w+", shape=values.shape)

    def no_read(self, start, stop):
        raise AssertionError("targets were read before they were validated")

    monkeypatch.setattr(TargetColumns, "read", no_read)
    with pytest.raises(error, match=match):
        BatchedRidge(alphas=ALPHAS).fit(X, Y)


def test_dask_targets_of_unknown_shape_are_refused():
    X, Y = make_data()
    lazy = da.from_array(Y, chunks=(60, WIDTH))
    lazy = lazy[lazy[:, 0] > -np.inf]
    with pytest.raises(ValueError, match="compute_chunk_sizes"):
        BatchedRidge(alphas=ALPHAS).fit(X, lazy)


@pytest.mark.parametrize("kind", KINDS)
def test_grid_edge_warnings_match_in_memory(kind, tmp_path):
    # Noise targets sit at the largest alpha without warning; signal targets
    # wanting a smaller alpha than the grid has warn. The no-model score that
    # tells them apart is read batch by batch.
    X, Y = make_data(t=300)
    alphas = [10.0, 100.0, 1000.0]

    def messages(y):
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            BatchedRidge(alphas=alphas, max_memory_gb=5e-4).fit(X, y)
        return [str(w.message) for w in caught]

    expected = messages(Y)
    assert expected
    assert messages(store(kind, Y, tmp_path)) == expected


@pytest.mark.parametrize("kind", KINDS)
def test_score_per_target_reads_targets_batch_by_batch(kind, tmp_path):
    X, Y = make_data()
    model = BatchedRidge(alphas=ALPHAS, max_memory_gb=5e-4).fit(X, Y)
    weights = np.random.default_rng(1).uniform(0.5, 2.0, X.shape[0])
    on_disk = store(kind, Y, tmp_path)
    for scoring in ("r2", "correlation", "neg_mean_squared_error"):
        np.testing.assert_allclose(
            model.score_per_target(X, on_disk, weights, scoring=scoring),
            model.score_per_target(X, Y, weights, scoring=scoring),
            rtol=1e-10,
        )
    assert model.score(X, on_disk) == pytest.approx(model.score(X, Y), rel=1e-10)
    fewer = tmp_path / "fewer"
    fewer.mkdir()
    with pytest.raises(ValueError, match=r"one column per target.*\(60, 299\)"):
        model.score_per_target(X, store(kind, Y[:, :-1], fewer))


def new_out(kind, shape, path, dtype=np.float64, width=WIDTH):
    if kind == "numpy":
        return np.zeros(shape, dtype=dtype)
    if kind == "memmap":
        return np.memmap(path / "out.dat", dtype=dtype, mode="w+", shape=shape)
    if kind == "zarr":
        return zarr.create_array(
            store=str(path / "out.zarr"),
            shape=shape,
            chunks=(shape[0], width)[: len(shape)],
            dtype=dtype,
        )
    return h5py.File(path / "out.h5", "w").create_dataset(
        "out", shape=shape, dtype=dtype, chunks=(shape[0], width)
    )


@pytest.mark.parametrize("kind", ["numpy", "memmap", "zarr", "h5py"])
def test_predict_into_out_equals_predict(kind, tmp_path):
    X, Y = make_data()
    model = BatchedRidge(alphas=ALPHAS, max_memory_gb=5e-4).fit(X, Y)
    out = new_out(kind, Y.shape, tmp_path)
    assert model.predict(X, out=out) is out
    np.testing.assert_allclose(np.asarray(out[:]), model.predict(X), rtol=1e-12)


def test_predict_casts_into_a_narrower_out_as_numpy_does(tmp_path):
    X, Y = make_data()
    model = BatchedRidge(alphas=ALPHAS).fit(X, Y.astype(np.float64))
    out = new_out("zarr", Y.shape, tmp_path, dtype=np.float32)
    model.predict(X, out=out)
    np.testing.assert_allclose(out[:], model.predict(X).astype(np.float32), rtol=1e-6)


def test_predict_one_target_into_out(tmp_path):
    X, Y = make_data()
    model = BatchedRidge(alphas=ALPHAS).fit(X, Y[:, 0])
    out = new_out("zarr", (X.shape[0],), tmp_path)
    model.predict(X, out=out)
    np.testing.assert_allclose(out[:], model.predict(X), rtol=1e-12)


@pytest.mark.parametrize("kind", ["zarr", "h5py"])
def test_predict_writes_whole_chunks_of_out(kind, tmp_path, monkeypatch):
    X, Y = make_data(t=1000)
    model = BatchedRidge(alphas=ALPHAS).fit(X, Y)
    written = []
    real = ColumnWriter.write

    def write(self, start, block):
        written.append((start, block.shape[1]))
        real(self, start, block)

    monkeypatch.setattr(ColumnWriter, "write", write)
    out = new_out(kind, Y.shape, tmp_path)
    model.predict(X, out=out)
    starts, widths = np.array(written).T
    assert np.all(starts % WIDTH == 0)
    assert np.all(widths[:-1] % WIDTH == 0)
    np.testing.assert_allclose(out[:], model.predict(X), rtol=1e-12)


def read_only_memmap(shape, path):
    np.memmap(path / "ro.dat", dtype=np.float64, mode="w+", shape=shape).flush()
    return np.memmap(path / "ro.dat", dtype=np.float64, mode="r", shape=shape)


@pytest.mark.parametrize(
    ("make_out", "error", "match"),
    [
        (lambda s, p: np.zeros((s[0], s[1] + 1)), ValueError, r"out must have shape"),
        (lambda s, p: np.zeros(s, dtype=np.int64), ValueError, "floating dtype"),
        (lambda s, p: np.zeros(s, dtype=np.complex128), ValueError, "floating dtype"),
        (lambda s, p: np.zeros(s).tolist(), TypeError, "got list"),
        (lambda s, p: da.zeros(s), TypeError, "got Array"),
        (read_only_memmap, ValueError, "writable"),
    ],
)
def test_out_is_checked_before_any_prediction(
    make_out, error, match, tmp_path, monkeypatch
):
    X, Y = make_data()
    model = BatchedRidge(alphas=ALPHAS).fit(X, Y.astype(np.float64))

    def no_run(*args, **kwargs):
        raise AssertionError("predictions were computed before out was checked")

    monkeypatch.setattr(skbatch._estimators.predict, "run_problem", no_run)
    with pytest.raises(error, match=match):
        model.predict(X, out=make_out(Y.shape, tmp_path))


def test_memmap_targets_pickle_by_file_name(tmp_path):
    _, Y = make_data(t=3000)
    columns = TargetColumns(store("memmap", Y, tmp_path))
    payload = pickle.dumps(columns)
    assert len(payload) < 1000 < Y.nbytes
    np.testing.assert_array_equal(pickle.loads(payload).read(100, 140), Y[:, 100:140])
    columns = TargetColumns(store("h5py", Y, tmp_path))
    payload = pickle.dumps(columns)
    assert len(payload) < 1000
    np.testing.assert_array_equal(pickle.loads(payload).read(100, 140), Y[:, 100:140])


@pytest.mark.parametrize("kind", KINDS)
def test_a_task_block_is_read_and_checked_where_it_is_computed(
    kind, tmp_path, monkeypatch
):
    # Files are read here; a dask array's block is a graph, read and checked
    # where it is computed (on a dask worker, for a task there).
    _, Y = make_data()
    Y[4, 130] = np.nan
    checked = []
    columns = TargetColumns(
        store(kind, Y, tmp_path), lambda block, start: checked.append(start)
    )
    with pytest.raises(ValueError, match=r"target 130 \(") as read_here:
        columns.read(120, 160)
    checked.clear()

    def task_block(start, stop):
        n_checked = len(checked)
        block = columns.task_block(start, stop)
        if kind != "dask":
            return block
        assert len(checked) == n_checked
        with monkeypatch.context() as patch:
            patch.setattr(TargetColumns, "_read", None)
            return block.compute()

    np.testing.assert_array_equal(task_block(80, 120), Y[:, 80:120])
    assert checked == [80]
    with pytest.raises(ValueError) as computed:
        task_block(120, 160)
    assert str(computed.value) == str(read_here.value)


@pytest.mark.slow
def test_importing_skbatch_imports_no_array_library():
    code = (
        "import sys, skbatch; "
        "print([m for m in ('zarr', 'h5py', 'dask') if m in sys.modules])"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True
    )
    assert out.stdout.strip() == "[]"


# The large fit runs in its own process, whose peak resident memory above
# its start is the fit's alone (as benchmarks/bench_ridge.py measures it).
LARGE_FIT = textwrap.dedent(
    """
    import json, sys
    import numpy as np
    from skbatch import BatchedRidge

    path, n, p, t, columns = sys.argv[1], *map(int, sys.argv[2:5]), sys.argv[5]
    X = np.random.default_rng(0).standard_normal((n, p)).astype(np.float32)
    Y = np.memmap(path, dtype=np.float32, mode="r", shape=(n, t))
    BatchedRidge(alphas=[1.0, 10.0]).fit(X[:, :2], Y[:, :10])  # imports, warm-up
    with open("/proc/self/clear_refs", "w") as f:
        f.write("5")
    def status(field):
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith(field + ":"):
                    return int(line.split()[1]) * 1024
    start = status("VmRSS")
    model = BatchedRidge(alphas=[10.0, 100.0, 1000.0], max_memory_gb=0.5).fit(X, Y)
    keep = np.load(columns)
    np.savez(
        columns + ".out.npz",
        coef=model.coef_[keep],
        alpha=model.alpha_[keep],
        score=model.best_score_[keep],
    )
    print(json.dumps({"work_bytes": status("VmHWM") - start}))
    """
)


@pytest.mark.slow
@pytest.mark.skipif(
    not sys.platform.startswith("linux"), reason="reads the peak RSS from /proc"
)
def test_targets_four_times_the_budget_fit_within_it(tmp_path):
    n, p, t = 2000, 50, 200_000
    rng = np.random.default_rng(0)
    X = rng.standard_normal((n, p)).astype(np.float32)
    path = tmp_path / "y.dat"
    Y = np.memmap(path, dtype=np.float32, mode="w+", shape=(n, t))
    block = 10_000
    for start in range(0, t, block):
        W = rng.standard_normal((p, block)).astype(np.float32)
        noise = rng.standard_normal((n, block), dtype=np.float32)
        Y[:, start : start + block] = X @ W + 10 * noise
    Y.flush()
    del Y
    keep = np.r_[0:300, 99_900:100_100, t - 300 : t]
    np.save(tmp_path / "keep.npy", keep)
    run = subprocess.run(
        [sys.executable, "-c", LARGE_FIT, str(path), str(n), str(p), str(t)]
        + [str(tmp_path / "keep.npy")],
        capture_output=True,
        text=True,
        check=True,
    )
    work = json.loads(run.stdout.strip().splitlines()[-1])["work_bytes"]
    assert work < 0.8e9, f"the fit took {work / 1e9:.2f} GB above its start"

    result = np.load(tmp_path / "keep.npy.out.npz")
    Y = np.memmap(path, dtype=np.float32, mode="r", shape=(n, t))
    reference = BatchedRidge(alphas=[10.0, 100.0, 1000.0]).fit(X, np.array(Y[:, keep]))
    np.testing.assert_array_equal(result["alpha"], reference.alpha_)
    np.testing.assert_allclose(result["coef"], reference.coef_, rtol=1e-4, atol=1e-6)
    np.testing.assert_allclose(result["score"], reference.best_score_, rtol=1e-4)


# --- out sharing memory with X, memmaps whose file changed, closed datasets ----


def _overlapping(kind, tmp_path):
    """``(X, out)`` of 40 rows, 6 features and 6 targets, ``out`` over ``X``."""
    values = np.random.default_rng(1).standard_normal((40, 8))
    if kind == "same array":
        X = values[:, :6].copy()
        return X, X
    if kind == "overlapping columns":
        return values[:, :6], values[:, 2:]
    if kind == "torch":
        torch = pytest.importorskip("torch")
        out = values[:, :6].copy()
        # A CPU tensor and the array share their memory.
        return torch.from_numpy(out), out
    file = tmp_path / "shared.dat"
    X = np.memmap(file, dtype=np.float64, mode="w+", shape=(40, 6))
    X[:] = values[:, :6]
    if kind == "same memmap":
        return X, X
    # Another mapping of the same file: no memory is shared, the file is.
    return X, np.memmap(file, dtype=np.float64, mode="r+", shape=(40, 6))


@pytest.mark.parametrize(
    "kind",
    ["same array", "overlapping columns", "torch", "same memmap", "same file"],
)
def test_predict_into_an_out_over_X_predicts_from_X_as_given(kind, tmp_path):
    rng = np.random.default_rng(0)
    model = BatchedRidge(alphas=1.0, n_targets_batch=1, device="cpu").fit(
        rng.standard_normal((40, 6)), rng.standard_normal((40, 6))
    )
    X, out = _overlapping(kind, tmp_path)
    expected = model.predict(np.array(out if kind == "torch" else X))
    assert model.predict(X, out=out) is out
    np.testing.assert_allclose(np.asarray(out), expected, rtol=1e-12, atol=1e-12)


def _replaced(path, values):
    """Write ``values`` to a new file and move it over ``path`` (atomic rewrite)."""
    new = path.with_suffix(".new")
    np.asarray(values).tofile(new)
    new.replace(path)


@pytest.mark.parametrize("change", ["replaced", "unlinked"])
@pytest.mark.parametrize("layout", ["C", "F"])
def test_memmaps_are_read_and_written_through_their_own_mapping(
    change, layout, tmp_path
):
    # The file at the memmap's path is no longer the one mapped: the values
    # are the array's, as numpy reads them through its mapping.
    X, Y = make_data(t=100)
    Y = Y.astype(np.float64)
    path = tmp_path / "y.dat"
    on_disk = np.memmap(path, dtype=np.float64, mode="w+", shape=Y.shape, order=layout)
    on_disk[:] = Y
    out_path = tmp_path / "out.dat"
    out = np.memmap(out_path, dtype=np.float64, mode="w+", shape=Y.shape, order=layout)
    for file in (path, out_path):
        if change == "replaced":
            _replaced(file, np.full(Y.shape, 7.0))
        else:
            file.unlink()
    reference = BatchedRidge(alphas=ALPHAS).fit(X, Y)
    model = BatchedRidge(alphas=ALPHAS, max_memory_gb=5e-4).fit(X, on_disk)
    assert_same_fit(model, reference)
    weights = np.linspace(0.5, 2.0, X.shape[0])
    np.testing.assert_allclose(
        model.score_per_target(X, on_disk, sample_weight=weights),
        reference.score_per_target(X, Y, sample_weight=weights),
        rtol=1e-10,
    )
    assert model.score(X, on_disk) == pytest.approx(reference.score(X, Y), rel=1e-10)
    assert model.predict(X, out=out) is out
    np.testing.assert_allclose(np.asarray(out), reference.predict(X), rtol=1e-10)
    if change == "replaced":
        np.testing.assert_array_equal(np.fromfile(out_path), 7.0)


def test_predictions_written_through_a_mapping_reach_its_file(tmp_path):
    # Pages released after each span (madvise) keep what was written to them.
    X, Y = make_data(t=100)
    model = BatchedRidge(alphas=ALPHAS, max_memory_gb=5e-4).fit(X, Y)
    path = tmp_path / "out.dat"
    out = np.memmap(path, dtype=np.float32, mode="w+", shape=Y.shape)
    model.predict(X, out=out)
    del out
    on_file = np.fromfile(path, dtype=np.float32).reshape(Y.shape)
    np.testing.assert_allclose(on_file, model.predict(X), rtol=1e-6)


def test_a_memmap_sent_by_name_is_refused_once_its_file_is_another(tmp_path):
    _, Y = make_data()
    on_disk = store("memmap", Y, tmp_path)
    payload = pickle.dumps(TargetColumns(on_disk[:, 10:]))
    np.testing.assert_array_equal(pickle.loads(payload).read(0, 5), Y[:, 10:15])
    _replaced(tmp_path / "y.dat", np.zeros_like(Y))
    with pytest.raises(ValueError, match=r"^y is a numpy.memmap of .* not the one"):
        pickle.loads(payload)
    (tmp_path / "y.dat").unlink()
    with pytest.raises(ValueError, match=r"^y is a numpy.memmap .* cannot map"):
        pickle.loads(payload)


def _replaced_store(kind, path, values):
    """A new ``kind`` file of ``values`` moved over ``path`` (the file of
    ``store(kind, ...)``), as an atomic rewrite does."""
    new = path.parent / "new"
    new.mkdir()
    store(kind, values, new)
    if kind == "zarr":
        shutil.rmtree(path)
    os.replace(new / path.name, path)


@pytest.mark.parametrize("kind", ["h5py", "zarr"])
def test_a_file_sent_by_name_is_refused_once_it_is_another(kind, tmp_path):
    # Reopened by name in the receiving process, as a memmap is mapped again:
    # the file now at that name must be the one read here (device, inode).
    _, Y = make_data()
    on_disk = store(kind, Y, tmp_path)
    path = tmp_path / ("y.h5" if kind == "h5py" else "y.zarr")
    payload = pickle.dumps(TargetColumns(on_disk))
    np.testing.assert_array_equal(pickle.loads(payload).read(10, 15), Y[:, 10:15])
    _replaced_store(kind, path, np.zeros_like(Y))
    what = {"h5py": "an h5py.Dataset", "zarr": "a zarr array"}[kind]
    with pytest.raises(ValueError, match=rf"^y is {what} of .* not the one"):
        pickle.loads(payload)
    if kind == "zarr":
        shutil.rmtree(path)
    else:
        path.unlink()
    with pytest.raises(ValueError, match=rf"^y is {what} of .* cannot open"):
        pickle.loads(payload)


def _closed_dataset(path):
    dataset = h5py.File(path / "closed.h5", "w").create_dataset(
        "y", shape=(60, 300), dtype=np.float64
    )
    dataset.file.close()
    return dataset


@pytest.mark.parametrize("method", ["fit", "score", "score_per_target", "predict"])
def test_a_closed_h5py_dataset_is_refused_naming_the_argument(
    method, tmp_path, monkeypatch
):
    X, Y = make_data()
    model = BatchedRidge(alphas=ALPHAS).fit(X, Y)
    closed = _closed_dataset(tmp_path)
    name = "out" if method == "predict" else "y"

    def no_run(*args, **kwargs):
        raise AssertionError("work began before the dataset was checked")

    monkeypatch.setattr(skbatch._estimators.predict, "run_problem", no_run)
    monkeypatch.setattr(skbatch._ridge.batched, "fit_targets", no_run)
    call = {
        "fit": lambda: BatchedRidge(alphas=ALPHAS).fit(X, closed),
        "score": lambda: model.score(X, closed),
        "score_per_target": lambda: model.score_per_target(X, closed),
        "predict": lambda: model.predict(X, out=closed),
    }[method]
    with pytest.raises(ValueError, match=rf"^{name} is a closed h5py.Dataset"):
        call()


# Chunk widths of the dask targets below: the scores must not depend on them.
DASK_WIDTHS = [1, 2, 5]


@pytest.mark.parametrize("kind", ["numpy", *KINDS])
def test_weighted_r2_of_constant_targets_is_exact_on_every_path(kind, tmp_path):
    # Target 2 is constant in training and test (predicted exactly: 1.0),
    # target 3 only in test (0.0): as r2_score defines them, where r2_score
    # itself gives minus the inverse of the weighted mean's rounding (-3e31).
    rng = np.random.default_rng(0)
    X, Y = rng.standard_normal((40, 4)), rng.standard_normal((40, 5))
    Y[:, 2] = 1 / 3
    Xt, Yt = rng.standard_normal((30, 4)), rng.standard_normal((30, 5))
    Yt[:, 2], Yt[:, 3] = 1 / 3, 0.7
    weights = rng.uniform(0.1, 3.0, 30)
    model = BatchedRidge(alphas=1.0).fit(X, Y)
    expected = r2_score(
        Yt, model.predict(Xt), sample_weight=weights, multioutput="raw_values"
    )
    expected[2], expected[3] = 1.0, 0.0
    if kind == "dask":
        stored = [da.from_array(Yt, chunks=(30, width)) for width in DASK_WIDTHS]
    elif kind == "numpy":
        stored = [Yt]
    else:
        stored = [store(kind, Yt, tmp_path, width=2)]
    for y in stored:
        scores = model.score_per_target(Xt, y, sample_weight=weights)
        np.testing.assert_allclose(scores, expected, rtol=1e-12)
        assert model.score(Xt, y, sample_weight=weights) == pytest.approx(
            np.mean(expected), rel=1e-12
        )
