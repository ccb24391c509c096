"""Reading MNIST-style IDX files without torchvision.

Users bring their own copy of MNIST (offline clusters, pre-downloaded mirrors), so every way a
file can be wrong is reported as a :class:`UserError` that names the file and says what to do,
instead of a numpy reshape error deep inside a worker.
"""

import math
import os
import zlib
from pathlib import Path

import numpy as np

from mptrain.background import start_daemon
from mptrain.errors import UserError

# IDX type code -> element dtype; multi-byte types are big-endian on disk.
_DTYPES = {
    0x08: np.dtype("u1"),
    0x09: np.dtype("i1"),
    0x0B: np.dtype(">i2"),
    0x0C: np.dtype(">i4"),
    0x0D: np.dtype(">f4"),
    0x0E: np.dtype(">f8"),
}
_IMAGES_MAGIC = 0x00000803  # uint8, 3 dims
_LABELS_MAGIC = 0x00000801  # uint8, 1 dim

# key -> (file prefix, IDX dims); both "-idx" and ".idx" spellings circulate on mirrors.
_MNIST_FILES = {
    "train_images": ("train-images", 3),
    "train_labels": ("train-labels", 1),
    "test_images": ("t10k-images", 3),
    "test_labels": ("t10k-labels", 1),
}
_SUBDIRS = (".", "MNIST/raw", "mnist")  # plain, torchvision's layout, a common hand-made one
#: The most an IDX header may declare: beyond any data set held in memory whole, and far
#: below sizes that overflow int64 in numpy.
MAX_DIMS = 8
MAX_DATA_BYTES = 1 << 40
_CHUNK = 1 << 20


class _ReadAhead:
    """The four MNIST files read and decoded in a thread while the caller does something else.

    ``mptrain run`` spends its first second importing torch: Python byte code on one core.
    Reading MNIST is mostly zlib and numpy copies, which release the GIL, so started before
    that import it runs on the other core meanwhile (0.3 s alone; it saves 0.1-0.4 s, as
    the import slows down beside it). The results are handed over by path; a file read
    ahead is read only once. Whoever starts it calls :func:`finish_read_ahead` before
    anything forks: a thread must not be running at fork.
    """

    def __init__(self, data_dir):
        self._results: dict[Path, tuple] = {}
        # Quiet (``background``): what goes wrong is seen again when the caller reads a file.
        self._thread = start_daemon(self._read_all, "mptrain-read-mnist", data_dir)

    def _read_all(self, data_dir) -> None:
        try:
            paths = find_mnist_files(data_dir)
        except UserError:
            return  # said again, in the caller's thread, when the data set is loaded
        for path in paths.values():
            try:
                self._results[path] = ("ok", _read(path))
            except UserError as err:
                self._results[path] = ("error", err)
            except Exception:
                return  # anything unexpected: the caller reads the file itself and sees it

    def take(self, path: Path):
        """``(magic, array)`` read ahead for ``path``, or None; a read's UserError is raised."""
        self._thread.join()
        outcome = self._results.pop(path, None)
        if outcome is None:
            return None
        kind, value = outcome
        if kind == "error":
            raise value
        return value

    def finish(self) -> None:
        self._thread.join()
        self._results.clear()


_read_ahead: _ReadAhead | None = None


def read_ahead(data_dir) -> None:
    """Start reading the MNIST files in ``data_dir`` in the background; :func:`load_mnist`
    takes what was read. Call :func:`finish_read_ahead` once the data set is loaded."""
    global _read_ahead
    finish_read_ahead()
    _read_ahead = _ReadAhead(data_dir)


def finish_read_ahead() -> None:
    """Wait for the background read, if any, and drop what nobody took."""
    global _read_ahead
    if _read_ahead is not None:
        _read_ahead.finish()
        _read_ahead = None


def read_idx(path):
    """Load an IDX file (raw or gzip) into a native-endian array with the file's dims."""
    return _read(Path(path))[1]


def _read(path):
    """Return ``(magic, array)``; the magic lets callers say which kind of file they got.

    The header is read first and the data after it only up to the size the header declares
    plus one byte (enough to see that there is more): a small gzip file that would inflate
    to gigabytes is refused having inflated at most what a file of its declared shape holds.
    """
    try:
        handle = open(path, "rb")
    except FileNotFoundError:
        raise UserError(f"{path}: file not found; check --data-dir") from None
    except OSError as e:
        raise UserError(f"{path}: cannot read ({e.strerror}); check the file's permissions") from None
    with handle:
        # Detect gzip by content, not name: mirrors often gunzip files but keep the ".gz" suffix.
        compressed = handle.read(2) == b"\x1f\x8b"
        handle.seek(0)
        try:
            if compressed:
                return _parse(path, _Gunzip(handle.read()), size_on_disk=None)
            return _parse(path, handle, size_on_disk=os.fstat(handle.fileno()).st_size)
        except (OSError, EOFError, zlib.error) as e:
            if compressed:
                raise UserError(f"{path}: corrupt gzip data ({e}); delete the file and download it again") from None
            raise UserError(f"{path}: cannot read ({e}); check the file and the disk") from None


def _parse(path, stream, size_on_disk):
    head = _read_up_to(stream, 4)
    if len(head) < 4:
        raise UserError(f"{path}: file too short for an IDX header ({len(head)} bytes, need at least 4); "
                        "is this an IDX file?")
    magic = int.from_bytes(head, "big")
    if head[:2] != b"\0\0" or head[2] not in _DTYPES:
        raise UserError(f"{path}: bad magic number 0x{magic:08X} (expected two zero bytes, a type code "
                        f"08/09/0B/0C/0D/0E and the dim count, e.g. 0x{_IMAGES_MAGIC:08X} for MNIST images); "
                        "is this an IDX file?")
    dtype, ndim = _DTYPES[head[2]], head[3]
    header_len = 4 + 4 * ndim
    dims = _read_up_to(stream, 4 * ndim)
    if len(dims) < 4 * ndim:
        raise UserError(f"{path}: truncated IDX header ({4 + len(dims)} bytes, expected {header_len} for {ndim} dims); "
                        "delete the file and download it again")
    shape = tuple(int.from_bytes(dims[4 * i:4 * i + 4], "big") for i in range(ndim))
    expected = math.prod(shape) * dtype.itemsize   # Python ints: no overflow
    if ndim > MAX_DIMS or expected > MAX_DATA_BYTES:
        raise UserError(f"{path}: the header declares shape {shape} ({expected} bytes of data), beyond the "
                        f"{MAX_DIMS} dims and {MAX_DATA_BYTES} bytes an IDX file may hold; "
                        "the file is corrupt or not an IDX file")
    data = _read_up_to(stream, expected + 1)
    found = len(data)
    if found < expected:
        raise UserError(f"{path}: truncated data: shape {shape} needs {expected} bytes but found {found}; "
                        "delete the file and download it again")
    if found > expected:
        extra = f"{size_on_disk - header_len - expected} " if size_on_disk is not None else ""
        raise UserError(f"{path}: {extra}trailing bytes after the data (expected {expected} bytes "
                        f"for shape {shape}); the file is corrupt or not an IDX file")
    array = np.frombuffer(data, dtype=dtype, count=expected // dtype.itemsize)
    # astype copies, giving a writable array in native byte order that torch.from_numpy accepts.
    return magic, array.astype(dtype.newbyteorder("="), copy=True).reshape(shape)


class _Gunzip:
    """A gzip file's data, inflated only as far as it is read.

    Each ``read`` is one or a few calls into zlib, which releases the GIL while it inflates:
    MNIST is read in a thread while the main thread imports torch (``_ReadAhead``), and
    ``gzip.GzipFile`` inflates in 8 KiB steps of Python code that hold the GIL between them
    (measured: start to first step 0.4-0.5 s later with it). The gzip trailer's CRC and size
    are checked by zlib; several members are read one after another, as gunzip does.
    """

    def __init__(self, compressed: bytes):
        self._input = compressed
        self._inflater = zlib.decompressobj(wbits=31)   # 16 + 15: a gzip wrapper

    def read(self, size: int) -> bytes:
        out = bytearray()
        while len(out) < size:
            out += self._inflater.decompress(self._input, size - len(out))
            self._input = self._inflater.unconsumed_tail
            if self._inflater.eof:
                self._input = self._inflater.unused_data
                if not self._input:
                    break
                self._inflater = zlib.decompressobj(wbits=31)
            elif not self._input:
                raise EOFError("compressed file ended before the end-of-stream marker "
                               "was reached")
        return bytes(out)


def _read_up_to(stream, size: int) -> bytearray:
    """At most ``size`` bytes of ``stream``, fewer at its end; memory grows with what the
    stream really holds, not with ``size`` (a header may declare anything)."""
    data = bytearray()
    while len(data) < size:
        chunk = stream.read(min(size - len(data), _CHUNK))
        if not chunk:
            break
        data += chunk
    return data


def find_mnist_files(data_dir):
    """Map "train_images", "train_labels", "test_images", "test_labels" to existing file paths."""
    data_dir = Path(data_dir)
    if not data_dir.is_dir():
        raise UserError(f"--data-dir {data_dir} does not exist (or is not a directory); "
                        "pass the folder that holds the MNIST IDX files")
    found, missing = {}, []
    for key, (prefix, ndim) in _MNIST_FILES.items():
        names = _accepted_names(prefix, ndim)
        paths = (data_dir / sub / name for sub in _SUBDIRS for name in names)
        path = next((p for p in paths if p.is_file()), None)
        if path is None:
            missing.append(f"{key} ({' or '.join(names)})")
        else:
            found[key] = path
    if missing:
        where = ", ".join(str(data_dir / sub) for sub in _SUBDIRS)
        raise UserError(f"MNIST files missing: {'; '.join(missing)}; looked in {where}; "
                        "download MNIST into --data-dir or point --data-dir at the folder that holds it")
    return found


def _accepted_names(prefix, ndim):
    stems = (f"{prefix}-idx{ndim}-ubyte", f"{prefix}.idx{ndim}-ubyte")
    return [stem + ext for stem in stems for ext in ("", ".gz")]


def load_mnist(data_dir):
    """Return ``(train_images, train_labels, test_images, test_labels)`` after checking that they fit.

    Images are uint8 ``[N, H, W]`` (28x28 for MNIST) and labels int64 ``[N]`` in 0..9, the form
    that ``cross_entropy`` expects; mismatched files are caught here rather than mid-training.
    """
    paths = find_mnist_files(data_dir)
    splits = []
    for split in ("train", "test"):
        images_path, labels_path = paths[f"{split}_images"], paths[f"{split}_labels"]
        images = _read_checked(images_path, _IMAGES_MAGIC, "image")
        labels = _read_checked(labels_path, _LABELS_MAGIC, "label")
        if len(images) != len(labels):
            raise UserError(f"count mismatch: {len(images)} images in {images_path} but {len(labels)} labels in "
                            f"{labels_path}; the two files come from different downloads")
        if labels.size and labels.max() > 9:
            raise UserError(f"{labels_path}: label {int(labels.max())} out of range (expected 0..9); "
                            "is this an MNIST label file?")
        splits += [images, labels.astype(np.int64)]
    return tuple(splits)


def _read_checked(path, expected_magic, kind):
    ahead = _read_ahead.take(path) if _read_ahead is not None else None
    magic, array = ahead if ahead is not None else _read(path)
    if magic != expected_magic:
        raise UserError(f"{path}: magic number 0x{magic:08X} (expected 0x{expected_magic:08X} for an IDX {kind} "
                        f"file: uint8 with {expected_magic & 0xFF} dims); is this the MNIST {kind} file?")
    return array
