"""A memmap whose file shrinks during a fit is refused, never read as zeros.

A mapping reads the part of its last page beyond the end of a shrunk file as
zeros (and a whole page beyond it as SIGBUS): the reader compares the file's
size with the array's end before and after every block.
"""

import mmap
import os
import subprocess
import sys
import textwrap

import numpy as np
import pytest
from sklearn.exceptions import NotFittedError
from sklearn.utils.validation import check_is_fitted

import skbatch._engine.targets
from skbatch import BatchedRidge

ALPHAS = [0.1, 1.0, 10.0, 100.0]
# Small enough that 300 targets take several batches.
BUDGET_GB = 5e-4


def _cut_within_last_page(path):
    """Bytes to cut so that the file still ends inside its last page: the
    mapping reads the cut bytes as zeros, where a whole page cut faults."""
    cut = os.path.getsize(path) % mmap.PAGESIZE // 2
    assert cut > 0
    return cut


def _data(n=60, p=5, t=300, seed=0):
    rng = np.random.default_rng(seed)
    X = rng.standard_normal((n, p))
    Y = X @ rng.standard_normal((p, t)) + rng.standard_normal((n, t))
    return X, Y


def _on_disk(kind, Y, tmp_path):
    """``Y`` as a numpy.memmap of a raw file, or np.load of a .npy file."""
    if kind == "memmap":
        path = tmp_path / "y.dat"
        Y.tofile(path)
        return path, np.memmap(path, dtype=Y.dtype, mode="r", shape=Y.shape)
    path = tmp_path / "y.npy"
    np.save(path, Y)
    return path, np.load(path, mmap_mode="r")


def _truncate_after_first_read(monkeypatch, path, cut):
    """Patch the mapped reader so that the file loses ``cut`` bytes once the
    first block is read; returns the list of blocks read."""
    read = skbatch._engine.targets._read_mapped
    blocks = []

    def reading_then_truncating(Y, start, stop, *args):
        block = read(Y, start, stop, *args)
        blocks.append((start, stop))
        if len(blocks) == 1:
            os.truncate(path, os.path.getsize(path) - cut)
        return block

    monkeypatch.setattr(
        skbatch._engine.targets, "_read_mapped", reading_then_truncating
    )
    return blocks


@pytest.mark.parametrize("kind", ["memmap", "npy"])
def test_a_file_truncated_between_batches_is_refused(kind, tmp_path, monkeypatch):
    X, Y = _data()
    path, on_disk = _on_disk(kind, Y, tmp_path)
    size, cut = os.path.getsize(path), _cut_within_last_page(path)
    blocks = _truncate_after_first_read(monkeypatch, path, cut)
    model = BatchedRidge(alphas=ALPHAS, max_memory_gb=BUDGET_GB)
    with pytest.raises(OSError, match="shrank") as info:
        model.fit(X, on_disk)
    message = str(info.value)
    assert str(path) in message
    assert f"{size - cut} bytes" in message and f"{size} bytes" in message
    assert len(blocks) >= 1
    with pytest.raises(NotFittedError):
        check_is_fitted(model)


# A child process that imports the library: over 10 s.
@pytest.mark.slow
def test_a_file_truncated_by_pages_is_refused_before_any_page_is_read(tmp_path):
    # Pages wholly beyond the end of the file fault (SIGBUS) when touched, so
    # the size is checked before a block is copied; in a child process, which
    # such a fault would kill.
    path = tmp_path / "y.dat"
    np.arange(200 * 300, dtype=np.float64).tofile(path)
    script = textwrap.dedent(
        f"""
        import os
        import numpy as np
        from skbatch._engine.targets import TargetColumns
        Y = np.memmap({str(path)!r}, dtype=np.float64, mode="r", shape=(200, 300))
        columns = TargetColumns(Y)
        assert columns.read(0, 10)[5, 3] == 5 * 300 + 3
        os.truncate({str(path)!r}, os.path.getsize({str(path)!r}) // 2)
        try:
            columns.read(290, 300)
        except OSError as error:
            print("refused:", error)
        """
    )
    done = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stderr
    assert "refused:" in done.stdout and "shrank" in done.stdout


def test_a_whole_file_fits_as_in_memory(tmp_path):
    X, Y = _data()
    _, on_disk = _on_disk("npy", Y, tmp_path)
    model = BatchedRidge(alphas=ALPHAS, max_memory_gb=BUDGET_GB).fit(X, on_disk)
    reference = BatchedRidge(alphas=ALPHAS).fit(X, Y)
    np.testing.assert_allclose(model.coef_, reference.coef_, rtol=1e-8, atol=1e-12)


def test_predictions_into_a_truncated_out_are_refused(tmp_path, monkeypatch):
    # Writes past the end of a shrunk file would be lost with the page.
    X, Y = _data()
    model = BatchedRidge(alphas=ALPHAS, max_memory_gb=BUDGET_GB).fit(X, Y)
    path = tmp_path / "out.dat"
    out = np.memmap(path, dtype=np.float64, mode="w+", shape=Y.shape)
    write = skbatch._engine.targets._write_mapped
    calls = []

    def writing_then_truncating(out, start, block):
        write(out, start, block)
        calls.append(start)
        if len(calls) == 1:
            os.truncate(path, os.path.getsize(path) - _cut_within_last_page(path))

    monkeypatch.setattr(
        skbatch._engine.targets, "_write_mapped", writing_then_truncating
    )
    with pytest.raises(OSError, match=f"shrank.*{path}|{path}.*shrank"):
        model.predict(X, out=out)


# What cuts the file: the first positioned read of the file, or the first
# span copied through the mapping, whichever the reader does; the next part
# of the same block then lies past the file's end.
_CUT_DURING_A_BLOCK = """
import os
import sys
import numpy as np
import skbatch._engine.targets as targets
from sklearn.exceptions import NotFittedError
from sklearn.utils.validation import check_is_fitted
from skbatch import BatchedRidge

path, how = sys.argv[1], sys.argv[2]
n, t = 4000, 300
rng = np.random.default_rng(0)
X = rng.standard_normal((n, 2))
(X @ rng.standard_normal((2, t)) + rng.standard_normal((n, t))).tofile(path)
Y = np.memmap(path, dtype=np.float64, mode="r", shape=(n, t))
if how == "fortran":
    Y = np.memmap(path, dtype=np.float64, mode="r", shape=(n, t), order="F")
cut = []


def cutting(function):
    def cut_once(*args):
        result = function(*args)
        if not cut:
            cut.append(True)
            os.truncate(path, os.path.getsize(path) // 3)
        return result

    return cut_once


targets._release = cutting(targets._release)
os.preadv = cutting(os.preadv)
model = BatchedRidge(alphas=[1.0, 10.0])
try:
    model.fit(X, Y)
except OSError as error:
    print("refused:", error)
try:
    check_is_fitted(model)
except NotFittedError:
    print("not fitted")
"""


# A child process: about 4 s each; Fortran order with the slow tests.
@pytest.mark.parametrize(
    "order", ["c", pytest.param("fortran", marks=pytest.mark.slow)]
)
def test_a_file_cut_while_a_block_is_copied_is_refused_without_a_fault(order, tmp_path):
    # Few features, so that reading the targets is most of the fit; in a
    # child process, which a fault (SIGBUS) would kill.
    path = tmp_path / "y.dat"
    done = subprocess.run(
        [sys.executable, "-c", _CUT_DURING_A_BLOCK, str(path), order],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, (done.returncode, done.stderr[-2000:])
    assert "refused:" in done.stdout and "shrank" in done.stdout, done.stdout
    assert str(path) in done.stdout
    assert "not fitted" in done.stdout


def test_a_block_read_through_the_file_equals_the_values_written(tmp_path):
    # Positioned reads of the file (and the copy through the mapping, for a
    # strided slice) give the values written, for every layout: C and
    # Fortran order, an offset, a slice of columns, reversed rows, one row,
    # one column.
    path = tmp_path / "y.dat"
    values = np.random.default_rng(1).standard_normal(57 * 41)
    header = 24
    with open(path, "wb") as file:
        file.write(b"x" * header)
        values.tofile(file)
    slices = [
        np.s_[:, :],
        np.s_[:, 5:30],
        np.s_[::-1, :],
        np.s_[3:50:2, ::3],
        np.s_[:, 7:8],
        np.s_[9:10, :],
    ]
    for order in ("C", "F"):
        Y = np.memmap(path, np.float64, "r", offset=header, shape=(57, 41), order=order)
        written = values.reshape((57, 41), order=order)
        for where in slices:
            view, expected = Y[where], written[where]
            file = skbatch._engine.targets._MappedFile.of(view)
            if sys.platform.startswith("linux"):
                assert file is not None
            width = view.shape[1]
            for start, stop in ((0, width), (1, 4), (width - 1, width)):
                block = skbatch._engine.targets._read_mapped(view, start, stop, file)
                np.testing.assert_array_equal(block, expected[:, start:stop])
            columns = skbatch._engine.targets.TargetColumns(view)
            np.testing.assert_array_equal(columns.read(0, width), expected)
