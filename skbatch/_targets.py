"""Targets larger than memory, read on the host one batch of columns at a time.

``BatchedRidge`` takes as ``y`` a ``numpy.memmap``, an ``h5py.Dataset``, a
``zarr`` array or a ``dask.array.Array`` of shape (n_samples, n_targets)
without converting it: :class:`TargetColumns` states its shape, dtype and
column chunks from metadata alone, and reads, checks and hands over one
block of columns when a batch of targets asks for it. On a dask cluster, a
dask array's blocks are computed and checked on the workers, next to its
chunks (:meth:`TargetColumns.task_block`). The libraries are never imported
here: an array is recognised through ``sys.modules``, which holds a library
once the caller has made an array of it.
"""

import mmap
import os
import sys

import numpy as np

__all__ = [
    "ColumnWriter",
    "TargetColumns",
    "chunk_aligned",
    "out_of_core_kind",
    "shares_data",
]

# Element kinds a target array may hold: booleans, integers and floats, the
# numbers scikit-learn's ``y_numeric`` keeps as they are.
NUMERIC_KINDS = "biuf"
# (module, class, kind) of the out-of-core arrays besides numpy.memmap.
_LAZY_ARRAYS = (
    ("h5py", "Dataset", "h5py"),
    ("zarr", "Array", "zarr"),
    ("dask.array", "Array", "dask"),
)


def out_of_core_kind(array):
    """``"memmap"``, ``"h5py"``, ``"zarr"`` or ``"dask"``; None for other data."""
    if isinstance(array, np.memmap):
        return "memmap"
    for module, name, kind in _LAZY_ARRAYS:
        library = sys.modules.get(module)
        if library is not None and isinstance(array, getattr(library, name)):
            return kind
    return None


def shares_data(X, out):
    """Whether writing to ``out`` may change the numpy array ``X``.

    True where their memory overlaps, or where both are mapped from the same
    file (two memmaps of one file share no memory, but each sees what the
    other writes).
    """
    if isinstance(out, np.ndarray) and np.may_share_memory(X, out):
        return True
    mapped, written = _mapped_file(X), _mapped_file(out)
    if mapped is None or written is None:
        return False
    try:
        return os.path.samefile(mapped, written)
    except OSError:
        # A file no longer at its name: the same name is the same file.
        return os.path.realpath(mapped) == os.path.realpath(written)


def _mapped_file(array):
    """The name of the file ``array`` is mapped from (memmap or h5py), or None."""
    if out_of_core_kind(array) == "h5py":
        return array.file.filename
    while isinstance(array, np.ndarray):
        if isinstance(array, np.memmap) and array.filename:
            return array.filename
        array = array.base
    return None


def chunk_aligned(size, room, width):
    """A batch size of ``size`` planned targets that follows chunks of ``width``.

    ``room`` is the largest batch the memory budget allows. A batch of whole
    chunks, as many as ``size`` holds, or one chunk where ``size`` is smaller
    but the budget allows it; a chunk wider than the budget is read in equal
    parts, so that no read straddles two chunks.
    """
    if width is None:
        return size
    if size >= width:
        return size - size % width
    if room >= width:
        return width
    return next(d for d in range(min(room, width), 0, -1) if width % d == 0)


class TargetColumns:
    """The columns of 2-D targets, read on the host one block at a time.

    Parameters
    ----------
    Y : ndarray, numpy.memmap, h5py.Dataset, zarr array or dask array
        Of shape (n_samples, n_targets). An in-memory ndarray has been
        validated already and is handed out as views; any other is checked
        as its blocks are read.
    check : callable or None, default=None
        ``check(block, start)``, run on every block read from an
        out-of-core array once its values are known to be finite; raises
        for a block the computation cannot take.

    Attributes
    ----------
    kind : str or None
        See :func:`out_of_core_kind`; None for an in-memory ndarray.
    shape, dtype :
        Those of ``Y``.
    chunk_width : int or None
        Columns per chunk of ``Y`` (the widest, for a dask array of uneven
        chunks); None for an array without chunks.
    host_bytes_per_column : int
        Host memory of one column while its block is read and checked: 0
        for an in-memory array, whose blocks are views.
    """

    def __init__(self, Y, check=None):
        self.Y, self.check = Y, check
        self.kind = out_of_core_kind(Y)
        self.shape, self.dtype = tuple(Y.shape), np.dtype(Y.dtype)
        self.chunk_width = _chunk_width(Y, self.kind)
        # The block, and the boolean mask of its finite values.
        self.host_bytes_per_column = (
            0 if self.kind is None else self.shape[0] * (self.dtype.itemsize + 1)
        )
        self._file = _memmap_file(Y) if self.kind == "memmap" else None

    @property
    def out_of_core(self):
        return self.kind is not None

    def read(self, start, stop):
        """Columns ``start:stop``, host numpy, checked for out-of-core data."""
        if self.kind is None:
            return self.Y[:, start:stop]
        return checked(self._read(start, stop), start, self.check)

    def task_block(self, start, stop):
        """Columns ``start:stop`` for a task that runs elsewhere (a dask worker).

        Read and checked here, as by :meth:`read`, except from a dask array:
        then a ``dask.delayed`` of the checked block, which the cluster
        computes next to the array's chunks, so that they never come to this
        process, and computes again from the array's graph if the worker
        holding it dies. A bad value raises there the error :meth:`read`
        raises here.
        """
        if self.kind != "dask":
            return np.ascontiguousarray(self.read(start, stop))
        import dask

        return dask.delayed(checked)(self.Y[:, start:stop], start, self.check)

    def blocks(self, columns, width):
        """``Y[:, columns]`` for sorted ``columns``, in blocks of ``width`` columns.

        Each block reads the span of ``width`` columns, from a multiple of
        ``width``, that holds its first column, and keeps the requested ones.
        """
        columns = np.asarray(columns)
        at = 0
        while at < columns.size:
            start = int(columns[at]) // width * width
            stop = start + width
            end = int(np.searchsorted(columns, stop))
            yield self.read(start, min(stop, self.shape[1]))[:, columns[at:end] - start]
            at = end

    def _read(self, start, stop):
        if self._file is not None:
            return _read_columns(self._file, start, stop)
        if self.kind == "dask":
            return np.asarray(self.Y[:, start:stop].compute())
        return np.asarray(self.Y[:, start:stop])

    def __getstate__(self):
        # A problem holding the targets may be sent to another process: a
        # file is sent by name, never by its contents.
        state = dict(self.__dict__)
        if self._file is not None:
            # Read from the file alone (_read_columns).
            state["Y"] = None
        elif self.kind == "h5py":
            state["Y"] = (self.Y.file.filename, self.Y.name)
        return state

    def __setstate__(self, state):
        self.__dict__.update(state)
        if self.kind == "h5py":
            import h5py

            filename, name = self.Y
            self.Y = h5py.File(filename, "r")[name]


class ColumnWriter:
    """Blocks of columns written into a caller's 2-D array (``predict(out=...)``).

    Parameters
    ----------
    out : ndarray, numpy.memmap, h5py.Dataset or zarr array
        Of shape (n_rows, n_columns), or (n_rows,) for one column.

    Attributes
    ----------
    out_of_core : bool
        Whether ``out`` lives on disk.
    chunk_width : int or None
        Columns per chunk of ``out``; None without chunks.
    host_bytes_per_column : int
        Host memory of one column on its way to disk: a copy in ``out``'s
        dtype and layout; 0 for an in-memory ``out``.
    """

    def __init__(self, out):
        self.out = out
        kind = out_of_core_kind(out)
        self.out_of_core = kind is not None
        self.chunk_width = _chunk_width(out, kind) if len(out.shape) == 2 else None
        self.host_bytes_per_column = (
            out.shape[0] * np.dtype(out.dtype).itemsize if self.out_of_core else 0
        )
        self._file = _memmap_file(out) if kind == "memmap" and out.ndim == 2 else None

    def write(self, start, block):
        """Write ``block`` (n_rows, m) into columns ``start:start + m``."""
        if len(self.out.shape) == 1:
            self.out[:] = block[:, 0]
        elif self._file is not None:
            _write_columns(self._file, start, block)
        else:
            self.out[:, start : start + block.shape[1]] = block


def checked(block, start, check=None):
    """``block``, columns ``start`` on of the targets, as host numpy, checked.

    Its values must be finite (:func:`check_finite`) and pass ``check(block,
    start)`` when given.
    """
    block = np.asarray(block)
    check_finite(block, start)
    if check is not None:
        check(block, start)
    return block


def check_finite(block, start, name="y"):
    """Refuse NaN or infinity in a block, naming the first target holding one."""
    if block.dtype.kind != "f":
        return
    finite = np.isfinite(block).all(axis=0)
    if not finite.all():
        column = int(np.argmin(finite))
        what = "NaN" if np.isnan(block[:, column]).any() else "infinity"
        raise ValueError(
            f"Input {name} contains {what}: target {start + column} (column "
            f"{start + column} of {name}) is the first that does."
        )


def check_target_array(Y, n_samples, name="y"):
    """Shape and dtype of out-of-core targets, from their metadata alone."""
    shape = tuple(Y.shape)
    if any(not np.isfinite(size) for size in shape):
        raise ValueError(
            f"{name} must have known chunk sizes, got shape {shape}; call "
            f"{name}.compute_chunk_sizes() first"
        )
    if len(shape) != 2:
        raise ValueError(
            f"{name} read from disk must be 2-D (n_samples, n_targets), got "
            f"shape {shape}"
        )
    dtype = np.dtype(Y.dtype)
    if dtype.kind not in NUMERIC_KINDS:
        raise ValueError(
            f"{name} must hold real numbers (bool, integer or float dtype), got "
            f"dtype {dtype}"
        )
    if shape[0] != n_samples:
        raise ValueError(
            f"Found input variables with inconsistent numbers of samples: "
            f"X has {n_samples} and {name} has {shape[0]} (shape {shape})"
        )
    if shape[1] < 1:
        raise ValueError(
            f"{name} must have at least one target (column), got shape {shape}"
        )


def _chunk_width(Y, kind):
    if kind == "dask":
        return max(Y.chunks[1])
    chunks = getattr(Y, "chunks", None) if kind in ("h5py", "zarr") else None
    return None if chunks is None else int(chunks[1])


def _memmap_file(Y):
    """Where the columns of memmap ``Y`` lie in its file, for :func:`_read_columns`.

    ``(filename, offset, dtype, shape, strides)``: ``offset`` is the byte of
    ``Y[0, 0]`` in the file, which holds ``Y[i, j]`` at ``offset + i *
    strides[0] + j * strides[1]``. Blocks of columns are then read and
    written with positioned file I/O rather than through a mapping: every
    page touched through a mapping stays in this process's resident set,
    with the pages the kernel maps around it (150 MB to read 868 columns of
    2,000 rows of float32), until the mapping goes.

    None where that does not apply, and ``Y`` is read through its mapping:
    without ``os.preadv`` (Windows), for a mapping whose changes are private
    to it (mode "c": the file does not hold them), or for columns whose
    rows and columns are both strided.
    """
    root = Y
    while isinstance(root.base, np.memmap):
        root = root.base
    if (
        not hasattr(os, "preadv")
        or not isinstance(root.base, mmap.mmap)
        or root.mode == "c"
        or not root.filename
    ):
        return None
    itemsize = Y.dtype.itemsize
    if itemsize not in Y.strides or min(Y.strides) <= 0:
        return None
    start = Y.__array_interface__["data"][0] - root.__array_interface__["data"][0]
    return root.filename, root.offset + start, Y.dtype, Y.shape, Y.strides


def _runs(file, block, start):
    """``(run, offset)``: the contiguous runs (rows or columns) of ``block``,
    columns ``start`` on of the file's array, and their bytes in the file."""
    _, offset, dtype, _, (row_stride, column_stride) = file
    first = offset + start * column_stride
    if column_stride == dtype.itemsize:
        return [(block[i], first + i * row_stride) for i in range(block.shape[0])]
    return [(block[:, j], first + j * column_stride) for j in range(block.shape[1])]


def _file_order(file):
    """The memory order of a block whose runs are contiguous, as in the file."""
    _, _, dtype, _, (_, column_stride) = file
    return "C" if column_stride == dtype.itemsize else "F"


def _read_columns(file, start, stop):
    filename, _, dtype, shape, _ = file
    block = np.empty((shape[0], stop - start), dtype, order=_file_order(file))
    with open(filename, "rb", buffering=0) as f:
        for run, offset in _runs(file, block, start):
            if os.preadv(f.fileno(), [run], offset) != run.nbytes:
                raise OSError(f"{filename} ends before the array it should hold")
    return block


def _write_columns(file, start, block):
    filename, _, dtype, _, _ = file
    block = np.asarray(block, dtype=dtype, order=_file_order(file))
    with open(filename, "r+b", buffering=0) as f:
        for run, offset in _runs(file, block, start):
            if os.pwritev(f.fileno(), [run], offset) != run.nbytes:
                raise OSError(f"{filename} took less than the block written to it")
