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
import weakref

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
# Bytes of a memmap's file that one copy through its mapping spans before the
# pages it mapped are released: every page touched through a mapping stays in
# the resident set until the mapping goes, with the pages the kernel maps
# around it, so that a block of a few columns of a C-order file would map
# nearly every page of its rows (150 MB to read 868 columns of 2,000 rows of
# float32). With 2 MiB spans reading such blocks peaks at 20 MB, as fast as
# positioned reads of the file (tests/test_out_of_core.py bounds it).
RELEASE_SPAN_BYTES = 2 * 2**20
# Bytes the kernel maps around a page fault of a file mapping (Linux's default
# fault_around_bytes): released with the span that caused them.
FAULT_AROUND_BYTES = 2**16
# zarr 2's stores of a local directory, pickled by its path.
_ZARR_DIRECTORY_STORES = ("DirectoryStore", "NestedDirectoryStore")


def out_of_core_kind(array, name="y"):
    """``"memmap"``, ``"h5py"``, ``"zarr"`` or ``"dask"``; None for other data.

    Raises
    ------
    ValueError
        For a closed ``h5py.Dataset``, naming it ``name``.
    """
    if isinstance(array, np.memmap):
        return "memmap"
    for module, class_name, kind in _LAZY_ARRAYS:
        library = sys.modules.get(module)
        if library is not None and isinstance(array, getattr(library, class_name)):
            if kind == "h5py" and not array.id.valid:
                raise ValueError(
                    f"{name} is a closed h5py.Dataset: its file was closed, and "
                    f"nothing can be read from or written to it. Open the file "
                    f"again (h5py.File) and pass the dataset it holds, keeping "
                    f"the file open while skbatch uses it."
                )
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
        self._file = None

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
        if self.kind == "memmap":
            _check_mapped_size(self.Y, "y")
            if self._file is None:
                self._file = _MappedFile.of(self.Y)
            block = _read_mapped(self.Y, start, stop, self._file)
            # A file cut inside its last page is read as zeros there.
            _check_mapped_size(self.Y, "y")
            return block
        if self.kind == "dask":
            return np.asarray(self.Y[:, start:stop].compute())
        return np.asarray(self.Y[:, start:stop])

    def __getstate__(self):
        # A problem holding the targets may be sent to another process: a
        # file is sent by name, never by its contents, with the identity of
        # the file read here, which the other process checks.
        state = dict(self.__dict__)
        # A descriptor is this process's own: the other opens the file again.
        state["_file"] = None
        if self.kind == "memmap":
            by_name = _memmap_by_name(self.Y)
            if by_name is not None:
                state["Y"] = by_name
        elif self.kind == "h5py":
            state["Y"] = _DatasetByName(self.Y)
        elif self.kind == "zarr":
            # zarr pickles an array of a local store by the store's path.
            state["sent_file"] = _zarr_sent_file(self.Y)
        return state

    def __setstate__(self, state):
        state = dict(state)
        sent_file = state.pop("sent_file", None)
        self.__dict__.update(state)
        if self.kind == "memmap" and isinstance(self.Y, _MemmapByName):
            self.Y = self.Y.mapped_again(self.shape, self.dtype)
        elif self.kind == "h5py":
            self.Y = self.Y.opened_again()
        elif sent_file is not None:
            try:
                status = os.stat(sent_file.filename)
            except OSError as error:
                raise sent_file.unreachable("open", error) from None
            sent_file.check(_stat_identity(status))


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
        kind = out_of_core_kind(out, "out")
        self.out_of_core = kind is not None
        self.chunk_width = _chunk_width(out, kind) if len(out.shape) == 2 else None
        self.host_bytes_per_column = (
            out.shape[0] * np.dtype(out.dtype).itemsize if self.out_of_core else 0
        )
        self._mapped = kind == "memmap" and out.ndim == 2

    def write(self, start, block):
        """Write ``block`` (n_rows, m) into columns ``start:start + m``."""
        if len(self.out.shape) == 1:
            self.out[:] = block[:, 0]
        elif self._mapped:
            _check_mapped_size(self.out, "out")
            _write_mapped(self.out, start, block)
            # What was written beyond the end of a cut file is lost.
            _check_mapped_size(self.out, "out")
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


def _memmap_root(Y):
    """The memmap over the whole mapping ``Y`` is a view of, or None."""
    root = Y
    while isinstance(root.base, np.ndarray):
        root = root.base
    return root if isinstance(root.base, mmap.mmap) else None


def _shared_mapping(Y):
    """The ``mmap.mmap`` under memmap ``Y`` whose pages a copy may release.

    None where they stay: a mapping whose changes are private to it (mode
    "c", whose pages hold them), or without ``madvise`` (Windows).
    """
    root = _memmap_root(Y)
    if root is None or root.mode == "c" or not hasattr(mmap, "MADV_DONTNEED"):
        return None
    return root.base


def _file_order(view):
    """The memory order of a block of ``view`` laid out as in its file."""
    row_stride, column_stride = (abs(stride) for stride in view.strides)
    return "C" if column_stride <= row_stride else "F"


def _pieces(view, mapping):
    """Index pairs cutting ``view`` into spans of at most ``RELEASE_SPAN_BYTES``.

    Along its axis of the larger stride, the other whole; one piece, all of
    ``view``, where no pages are released (``mapping`` None).
    """
    axis = 0 if _file_order(view) == "C" else 1
    stride = max(abs(view.strides[axis]), 1)
    size = view.shape[axis]
    step = size if mapping is None else max(1, RELEASE_SPAN_BYTES // stride)
    for low in range(0, size, max(step, 1)):
        piece = [slice(None), slice(None)]
        piece[axis] = slice(low, low + step)
        yield tuple(piece)


def _release(mapping, piece):
    """Drop the pages of ``piece`` (a view into ``mapping``) from the resident set.

    The mapping is shared with its file (:func:`_shared_mapping`): what was
    written stays in the file's cache, and the next read maps it again.
    """
    if mapping is None or piece.size == 0:
        return
    base = np.frombuffer(mapping, dtype=np.uint8, count=1).ctypes.data
    low = high = piece.__array_interface__["data"][0] - base
    for size, stride in zip(piece.shape, piece.strides):
        low += min(0, (size - 1) * stride)
        high += max(0, (size - 1) * stride)
    start = max(0, low - FAULT_AROUND_BYTES) // mmap.PAGESIZE * mmap.PAGESIZE
    stop = min(len(mapping), high + piece.itemsize + FAULT_AROUND_BYTES)
    mapping.madvise(mmap.MADV_DONTNEED, start, stop - start)


def _check_mapped_size(array, name):
    """Refuse memmap ``array`` once its file no longer holds the whole array.

    A mapping reads the part of its last page past the end of a shrunk file
    as zeros, and faults (SIGBUS) on a page wholly past it: checked before
    each block touches the mapping, and after, for a file cut meanwhile. The
    size is that of the file mapped, through the mapping's own descriptor,
    even once another file took its name. Raises ``OSError`` naming the file
    and both sizes.
    """
    root = _memmap_root(array)
    if root is None:
        return
    try:
        size = root.base.size()
    except (OSError, ValueError):
        # A mapping without a file descriptor to ask: nothing to compare.
        return
    needed = root.offset + root.nbytes
    if size < needed:
        raise OSError(
            f"{root.filename or 'The file mapped under ' + name} shrank to {size} "
            f"bytes while {name} was read from or written to it, but the "
            f"numpy.memmap {name} needs {needed} bytes of it (the part past the "
            f"end reads as zeros or faults). Keep the file whole until skbatch "
            f"is done with {name}."
        )


def _read_mapped(Y, start, stop, file=None):
    """Columns ``start:stop`` of memmap ``Y``, read from the file it maps.

    Through ``file`` (a :class:`_MappedFile` of ``Y``) where there is one:
    positioned reads of the file, which return short, never fault, where the
    file was cut meanwhile (an ``OSError`` naming it). Else through ``Y``'s
    own mapping, in spans of the file (:func:`_pieces`) each preceded by a
    check of the file's size and whose pages are released after each
    (:func:`_release`), so that the resident set holds the block and one
    span, not every page the copy touched; a file cut while a span is copied
    there still faults (SIGBUS). Either way the values are those of the file
    mapped, never of another file that took its name since.
    """
    view = Y[:, start:stop]
    block = np.empty(view.shape, view.dtype, order=_file_order(view))
    if file is not None and file.read_into(view, block):
        return block
    mapping = _shared_mapping(Y)
    for piece in _pieces(view, mapping):
        _check_mapped_size(Y, "y")
        block[piece] = view[piece]
        _release(mapping, view[piece])
    return block


class _MappedFile:
    """A descriptor of the file mapped under a memmap, for positioned reads.

    Opened by the memmap's file name and kept only where it is the very file
    mapped (its identity in ``/proc/self/maps`` compared with a mapping of
    the descriptor's), so that a file replaced since is never read; then
    held, so that the name may change meanwhile. Closed with this object.
    """

    def __init__(self, root, descriptor):
        self.root, self.descriptor = root, descriptor
        self._finalizer = weakref.finalize(self, os.close, descriptor)

    @classmethod
    def of(cls, Y):
        """The :class:`_MappedFile` of memmap ``Y``; None where the pages
        must be read through the mapping: a mapping whose changes are
        private to it (mode "c"), no mapping table or positioned reads (not
        Linux), or a file no longer at its name."""
        root = _memmap_root(Y)
        if (
            root is None
            or root.mode == "c"
            or not root.filename
            or not hasattr(os, "preadv")
        ):
            return None
        mapped = _mapped_identity(root)
        if mapped is None:
            return None
        try:
            descriptor = os.open(root.filename, os.O_RDONLY)
        except OSError:
            return None
        try:
            found = _descriptor_identity(descriptor)
        except (OSError, ValueError):
            found = None
        if found != mapped:
            os.close(descriptor)
            return None
        return cls(root, descriptor)

    def read_into(self, view, block):
        """Copy ``view`` (a view of the memmap) into ``block`` of its shape,
        laid out as in the file; False, with nothing read, for a layout
        other than rows (or columns) of consecutive elements."""
        axis = 0 if _file_order(view) == "C" else 1
        inner = 1 - axis
        itemsize = view.itemsize
        if view.shape[inner] > 1 and view.strides[inner] != itemsize:
            return False
        if view.size == 0:
            return True
        at = self._offset(view)
        # One line (row, or column in Fortran order) of the block after the
        # other, as bytes.
        lines = (block if axis == 0 else block.T).view(np.uint8)
        step = view.strides[axis]
        if view.shape[axis] == 1 or step == lines.shape[1]:
            self._read(lines.reshape(-1), at)
            return True
        descriptor, size = self.descriptor, lines.shape[1]
        for line in lines:
            if os.preadv(descriptor, [line], at) != size:
                self._read(line, at)
            at += step
        return True

    def _offset(self, view):
        """Where ``view``'s first element lies in the file."""
        root = self.root
        data = root.__array_interface__["data"][0]
        return root.offset + view.__array_interface__["data"][0] - data

    def _read(self, into, offset):
        """Fill the bytes ``into`` from the file at ``offset``."""
        done = 0
        while done < into.size:
            count = os.preadv(self.descriptor, [into[done:]], offset + done)
            if count == 0:
                _check_mapped_size(self.root, "y")
                raise OSError(
                    f"{self.root.filename} ended at byte {offset + done} while "
                    f"y was read from it; keep the file whole until skbatch is "
                    f"done with y."
                )
            done += count


def _descriptor_identity(descriptor):
    """The ``/proc/self/maps`` identity of the file open as ``descriptor``,
    as :func:`_mapped_identity` gives that of a memmap's file."""
    with mmap.mmap(descriptor, 0, access=mmap.ACCESS_READ) as probe:
        first = np.frombuffer(probe, dtype=np.uint8, count=1)
        try:
            return _mapped_identity(first)
        finally:
            del first


def _write_mapped(out, start, block):
    """Write ``block`` into columns ``start`` on of memmap ``out``, as
    :func:`_read_mapped` reads them."""
    view = out[:, start : start + block.shape[1]]
    mapping = _shared_mapping(out)
    for piece in _pieces(view, mapping):
        view[piece] = block[piece]
        _release(mapping, view[piece])


def _mapped_identity(Y):
    """``(device, inode)`` of the file mapped under ``Y`` in this process.

    Read from ``/proc/self/maps``, which names the file actually mapped, even
    one replaced or removed since; None where there is no such table (not
    Linux).
    """
    address = Y.__array_interface__["data"][0]
    try:
        with open("/proc/self/maps") as maps:
            for line in maps:
                fields = line.split()
                low, high = (int(end, 16) for end in fields[0].split("-"))
                if low <= address < high:
                    return fields[3], fields[4]
    except OSError:
        return None
    return None


def _stat_identity(status):
    """``("stat", device, inode)`` of a file, from its ``os.stat`` result."""
    return ("stat", status.st_dev, status.st_ino)


class _SentFile:
    """The file of out-of-core ``y``, sent to another process of this host by
    its name, with the identity of the file ``y`` was read from here.

    The receiving process opens the file at ``filename`` again and refuses,
    naming ``y``, one it cannot open (:meth:`unreachable`) or that is not
    the same file (:meth:`check`).

    Parameters
    ----------
    what : str
        ``y``'s kind, as the errors name it ("a numpy.memmap").
    filename : str
    identity : tuple
        ``(source, device, inode)``: :func:`_stat_identity`, or for a
        memmap the ``("maps", ...)`` of :func:`_mapped_identity`.
    """

    def __init__(self, what, filename, identity):
        self.what, self.filename, self.identity = what, filename, identity

    def _refused(self, problem):
        return ValueError(
            f"y is {self.what} of {self.filename}, {problem}; pass y in memory, "
            f"or {self.what} of the file as it is now, or keep the file in "
            f"place until the fit ends."
        )

    def unreachable(self, verb, error):
        """The ValueError of a file this process cannot ``verb`` (open, map)."""
        return self._refused(f"which this process cannot {verb} ({error})")

    def check(self, found):
        """Refuse the file found at the name, of identity ``found``, if it is
        another than the one ``y`` was read from."""
        if found != self.identity:
            raise self._refused(
                "but the file now at that name is not the one it was read from "
                "(it was replaced since)"
            )


class _MemmapByName(_SentFile):
    """A memmap sent to another process of this host by its file's name.

    ``identity`` is that of the file mapped here (:func:`_mapped_identity`,
    or the file at ``filename`` when this host has no mapping table); the
    receiving process maps the file at ``filename`` again and refuses one
    that is not the same file.
    """

    def __init__(self, filename, offset, strides, identity):
        super().__init__("a numpy.memmap", filename, identity)
        self.offset, self.strides = offset, strides

    def mapped_again(self, shape, dtype):
        try:
            with open(self.filename, "rb") as file:
                whole = np.memmap(file, dtype=np.uint8, mode="r")
                status = os.fstat(file.fileno())
        except (OSError, ValueError) as error:
            raise self.unreachable("map", error) from None
        if self.identity[0] == "maps":
            self.check(("maps", *(_mapped_identity(whole) or ())))
        else:
            self.check(_stat_identity(status))
        return np.ndarray(
            shape, dtype, buffer=whole, offset=self.offset, strides=self.strides
        )


class _DatasetByName(_SentFile):
    """An h5py.Dataset sent to another process of this host by its file's
    name and its name in the file, with the identity of the file it was
    opened from (:func:`_h5py_identity`)."""

    def __init__(self, dataset):
        file = dataset.file
        super().__init__("an h5py.Dataset", file.filename, _h5py_identity(file))
        self.name = dataset.name

    def opened_again(self):
        import h5py

        try:
            file = h5py.File(self.filename, "r")
        except OSError as error:
            raise self.unreachable("open", error) from None
        try:
            self.check(_h5py_identity(file))
        except ValueError:
            file.close()
            raise
        return file[self.name]


def _h5py_identity(file):
    """:func:`_stat_identity` of the file an open ``h5py.File`` reads: of its
    descriptor, even once another file took its name, where h5py's default
    driver holds one, else of the file at its name."""
    if file.driver == "sec2":
        return _stat_identity(os.fstat(file.id.get_vfd_handle()))
    return _stat_identity(os.stat(file.filename))


def _zarr_sent_file(Y):
    """The :class:`_SentFile` of the directory of zarr array ``Y`` in a local
    store, which zarr pickles by its path; None for other stores (memory,
    remote), which have no file here."""
    store = Y.store
    kind = type(store).__name__
    if kind == "LocalStore":
        root = store.root
    elif kind in _ZARR_DIRECTORY_STORES:
        root = store.path
    else:
        return None
    directory = os.path.join(os.fspath(root), Y.path.lstrip("/"))
    return _SentFile("a zarr array", directory, _stat_identity(os.stat(directory)))


def _memmap_by_name(Y):
    """:class:`_MemmapByName` of memmap ``Y``; None for a mapping whose
    changes are private to it (mode "c": the file does not hold them)."""
    root = _memmap_root(Y)
    if root is None or root.mode == "c" or not root.filename:
        return None
    at = Y.__array_interface__["data"][0] - root.__array_interface__["data"][0]
    mapped = _mapped_identity(root)
    if mapped is None:
        status = os.stat(root.filename)
        identity = ("stat", status.st_dev, status.st_ino)
    else:
        identity = ("maps", *mapped)
    return _MemmapByName(root.filename, root.offset + at, Y.strides, identity)
