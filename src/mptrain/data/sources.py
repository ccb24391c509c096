"""Where training data comes from: built-in sets (``digits``, ``linreg``, ``mnist``) or a
user factory named by an import string.

Each source returns a :class:`DataBundle`: the two data sets plus what mptrain needs to know
to train on them sensibly without flags (task, default model, recommended hyper-parameters).
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import TYPE_CHECKING

import torch

from ..errors import UserError, did_you_mean, setting_name
from ..imports import NATURAL_DATA_PREFIXES, call_factory, colon_hint, is_import_string
from .classes import class_count
from .defaults import TrainingDefaults
from .recipes import DIGITS_DEFAULTS, GENERIC_DEFAULTS, LINREG_DEFAULTS, MNIST_DEFAULTS
from .embedded import load_uci_digits
from .seeding import seeded
from .shared import PixelDecode, RowSource, SharedTensorDataset, materialize

if TYPE_CHECKING:
    from .natural.clients import NaturalClients

BUILTIN_SOURCES = ("digits", "digits-60k", "linreg", "mnist")

CLASSIFICATION = "classification"
REGRESSION = "regression"

# Fixed, so that the embedded train/test split does not move with --seed.
SPLIT_SEED = 20240601
MNIST_MEAN, MNIST_STD = 0.1307, 0.3081


@dataclass
class DataBundle:
    """Training and test data in one place, with what they imply for the run."""

    name: str
    train: SharedTensorDataset
    test: SharedTensorDataset | None
    task: str
    output_size: int
    default_model: str
    defaults: TrainingDefaults
    #: Which rows each natural client owns (LEAF's users, a Hub data set's client column,
    #: FedProx's devices); None for pooled data, which ``--partition`` cuts.
    clients: "NaturalClients | None" = None
    #: Why the data is streamed rather than stacked when ``--loader auto`` chose so.
    loader_reason: str | None = None

    @property
    def input_shape(self) -> tuple:
        return self.train.input_shape

    def materialize_(self) -> "DataBundle":
        """Build inputs given as row sources in private memory (runs without workers)."""
        self.train.materialize_()
        if self.test is not None:
            self.test.materialize_()
        return self

    def share_memory_(self) -> "DataBundle":
        self.train.share_memory_()
        if self.test is not None:
            self.test.share_memory_()
        return self

    def place_in_(self, allocate, write: bool) -> "DataBundle":
        """Move both data sets into buffers from ``allocate`` (see
        :meth:`SharedTensorDataset.place_in_`)."""
        self.train.place_in_(allocate, write)
        if self.test is not None:
            self.test.place_in_(allocate, write)
        return self

    @property
    def nbytes(self) -> int:
        return self.train.nbytes + (self.test.nbytes if self.test is not None else 0)


def load_data(name: str, data_dir: str | None = None, seed: int = 0, *,
              clients: int | None = None, client_column: str | None = None,
              features: str | None = None, label: str | None = None,
              loader: str = "stacked") -> DataBundle:
    """Build the data set ``name``: a built-in, natural data (``leaf:DIR``, ``hf:NAME``,
    ``synthetic:ALPHA,BETA``, ``synthetic-iid``) or ``module:factory`` (called, and its data
    sets stacked, under ``seed``: see ``data.seeding``). The built-ins draw from their own
    fixed generators. The bundle of natural data knows each sample's client
    (``DataBundle.clients``); ``fit()`` takes it as its training data.

    ``clients``: the devices ``synthetic`` makes (None: the paper's 30); ``seed`` draws
    them; ``client_column``, ``features``, ``label``: ``hf``'s columns (None: known for
    flwrlabs' sets, else guessed from the usual names)."""
    columns = {"client_column": client_column, "features": features, "label": label}
    if any(columns.values()) and not name.startswith("hf:"):
        raise UserError("--client-column, --features and --label name the columns of "
                        f"--data hf:NAME; --data {name} has none")
    natural = _natural(name, clients, seed, columns)
    if natural is not None:
        if data_dir is not None:
            raise UserError(f"--data-dir is only used with --data mnist (got --data {name})")
        return natural
    if name != "mnist" and data_dir is not None:
        raise UserError(f"--data-dir is only used with --data mnist (got --data {name})")
    if name == "digits":
        return digits()
    if name == "digits-60k":
        return digits_60k()
    if name == "linreg":
        return linreg()
    if name == "mnist":
        if data_dir is None:
            raise UserError("--data mnist needs --data-dir DIR, the folder holding the MNIST "
                            "IDX files (train-images-idx3-ubyte[.gz], ...)")
        return mnist(data_dir)
    if is_import_string(name):
        return from_factory(name, seed, loader)
    hint = colon_hint(name) or did_you_mean(name, BUILTIN_SOURCES)
    raise UserError(f"unknown data set {name!r}{hint}; choose one of: "
                    f"{', '.join(BUILTIN_SOURCES)}, leaf:DIR, hf:NAME, synthetic:ALPHA,BETA, "
                    "synthetic-iid, or give an import string 'package.module:make_data'")


#: Prefixes of the natural data sets (``data.natural``): clients are in the data.
NATURAL_PREFIXES = NATURAL_DATA_PREFIXES


def is_natural(name: str | None) -> bool:
    """Whether ``name`` names natural data (each sample's client known)."""
    return bool(name) and (name.startswith(NATURAL_PREFIXES) or name == "synthetic-iid")


def _natural(name: str, clients, seed: int, columns: dict) -> DataBundle | None:
    if not is_natural(name):
        return None
    if name.startswith("leaf:"):
        from .natural.leaf import load_leaf

        loaded = load_leaf(name.partition(":")[2])
    elif name.startswith("hf:"):
        from .natural.hf import load_hf

        loaded = load_hf(name.partition(":")[2], **columns)
    else:
        from .natural.synthetic import load_synthetic

        loaded = load_synthetic(name, clients, seed)
    return DataBundle(task=CLASSIFICATION, **vars(loaded))


def digits() -> DataBundle:
    """The 1,797 8x8 handwritten digits (UCI) that ship with scikit-learn: no download."""
    pixels, targets = load_uci_digits()
    images = torch.from_numpy(pixels / 16.0).unsqueeze(1)
    images = (images - 0.5) / 0.5
    labels = torch.from_numpy(targets)
    train_idx, test_idx = _split(len(labels), test_fraction=0.2)
    return DataBundle(
        name="digits",
        train=SharedTensorDataset(images[train_idx], labels[train_idx]),
        test=SharedTensorDataset(images[test_idx], labels[test_idx]),
        task=CLASSIFICATION, output_size=10, default_model="digits-cnn",
        defaults=DIGITS_DEFAULTS,
    )


def digits_60k(train_size: int = 60_000, test_size: int = 10_000) -> DataBundle:
    """MNIST-sized work without a download: 28x28 images made from the embedded UCI digits.

    Each image is a digit upscaled to 20x20 inside a 28x28 frame (MNIST's layout) under a
    random seeded rotation (+-15 deg), scale (0.85-1.15) and shift (+-2 px). Training images
    come from the training digits only, test images from the held-out ones, so the test
    accuracy is honest. Sized for benchmarks: the classic MNIST CNN runs as on MNIST.
    """
    import torch.nn.functional as F

    pixels, targets = load_uci_digits()
    base = torch.from_numpy(pixels / 16.0).unsqueeze(1)
    base = F.pad(F.interpolate(base, size=(20, 20), mode="bilinear", align_corners=False),
                 (4, 4, 4, 4))
    labels = torch.from_numpy(targets)
    train_idx, test_idx = _split(len(labels), test_fraction=0.2)
    generator = torch.Generator().manual_seed(SPLIT_SEED)

    def augmented(source_idx, count):
        picks = source_idx[torch.randint(len(source_idx), (count,), generator=generator)]
        angle = (torch.rand(count, generator=generator) - 0.5) * (torch.pi / 6)
        scale = 0.85 + 0.3 * torch.rand(count, generator=generator)
        shift = (torch.rand(count, 2, generator=generator) - 0.5) * (4 / 14)
        cos, sin = torch.cos(angle) / scale, torch.sin(angle) / scale
        theta = torch.stack([torch.stack([cos, -sin, shift[:, 0]], 1),
                             torch.stack([sin, cos, shift[:, 1]], 1)], 1)
        def fill(out, start):
            end = start + len(out)
            grid = F.affine_grid(theta[start:end], [end - start, 1, 28, 28],
                                 align_corners=False)
            out.copy_(F.grid_sample(base[picks[start:end]], grid, align_corners=False))
            out.sub_(MNIST_MEAN).div_(MNIST_STD)

        return RowSource((count, 1, 28, 28), torch.float32, fill), labels[picks]

    train_x, train_y = augmented(train_idx, train_size)
    test_x, test_y = augmented(test_idx, test_size)
    return DataBundle(
        name="digits-60k",
        train=SharedTensorDataset(train_x, train_y), test=SharedTensorDataset(test_x, test_y),
        task=CLASSIFICATION, output_size=10, default_model="mnist-cnn",
        defaults=MNIST_DEFAULTS,
    )


def linreg(num_points: int = 100) -> DataBundle:
    """y = 2x + 3 + N(0, 1) on x evenly spaced in [-10, 10]: the classic first regression.

    A well-trained ``Linear(1, 1)`` gets weight ~2, bias ~3 and test MSE ~1 (the noise
    variance), which makes it a check of the whole pipeline with a known answer.
    """
    generator = torch.Generator().manual_seed(SPLIT_SEED)
    x = torch.linspace(-10, 10, num_points).unsqueeze(1)
    y = 2 * x + 3 + torch.randn(num_points, 1, generator=generator)
    train_idx, test_idx = _split(num_points, test_fraction=0.2)
    return DataBundle(
        name="linreg",
        train=SharedTensorDataset(x[train_idx], y[train_idx]),
        test=SharedTensorDataset(x[test_idx], y[test_idx]),
        task=REGRESSION, output_size=1, default_model="linear",
        defaults=LINREG_DEFAULTS,
    )


#: MNIST's pixels as PyTorch's examples normalise them: ``(x / 255 - mean) / std``.
MNIST_DECODE = PixelDecode(scale=1 / (255 * MNIST_STD), shift=MNIST_MEAN / MNIST_STD)


def mnist(data_dir: str) -> DataBundle:
    """The standard MNIST IDX files, read with numpy: the pixels kept as uint8 (a quarter of
    float32's memory) and normalised as in PyTorch's examples as each batch is read
    (``--data-dtype``: :func:`with_data_dtype`)."""
    from .idx import load_mnist

    train_images, train_labels, test_images, test_labels = load_mnist(data_dir)

    def images(array) -> torch.Tensor:
        return torch.from_numpy(array).unsqueeze(1)

    return DataBundle(
        name="mnist",
        train=SharedTensorDataset(images(train_images), torch.from_numpy(train_labels),
                                  decode=MNIST_DECODE),
        test=SharedTensorDataset(images(test_images), torch.from_numpy(test_labels),
                                 decode=MNIST_DECODE),
        task=CLASSIFICATION, output_size=10, default_model="mnist-cnn",
        defaults=MNIST_DEFAULTS,
    )


def with_collate(bundle: DataBundle, collate: str | None) -> DataBundle:
    """``bundle`` collated by ``--collate``: samples of different lengths need it (refused
    without, in one line); 1-D samples of one length are held as sequences for it; other
    samples cannot take it."""
    from .ragged import RaggedDataset
    from .stream import StreamDataset

    if isinstance(bundle.train, StreamDataset):
        return _stream_collated(bundle, collate)
    ragged = isinstance(bundle.train, RaggedDataset)
    if collate is None:
        if ragged:
            raise UserError(f"the training data's samples are 1-D sequences of different "
                            f"lengths: give {setting_name('collate')} pad (padded to the "
                            f"longest of each batch, with a mask) or a function of yours")
        return bundle
    if not ragged and len(bundle.input_shape) != 1:
        raise UserError(f"{setting_name('collate')} {collate} takes 1-D samples (token "
                        f"sequences); this data's samples are {list(bundle.input_shape)}")

    def collated(data):
        if data is None:
            return None
        if not isinstance(data, RaggedDataset):
            length = data.input_shape[0]
            data = RaggedDataset(data.inputs.reshape(-1),
                                 torch.arange(len(data) + 1, dtype=torch.int64) * length,
                                 data.targets)
        data.collate = collate
        return data

    return replace(bundle, train=collated(bundle.train), test=collated(bundle.test))


def _stream_collated(bundle: DataBundle, collate: str | None) -> DataBundle:
    """A streamed bundle told ``--collate`` (each batch collated by the loader threads), or
    refused as a stacked one is: sequences of different lengths without it, samples that
    are not 1-D with it."""
    if collate is None:
        if bundle.train.varied_lengths:
            raise UserError(f"the training data's samples have different shapes: for 1-D "
                            f"sequences give {setting_name('collate')} pad (padded to the "
                            f"longest of each batch, with a mask) or a function of yours")
        return bundle
    if len(bundle.input_shape) != 1:
        raise UserError(f"{setting_name('collate')} {collate} takes 1-D samples (token "
                        f"sequences); this data's samples are {list(bundle.input_shape)}")
    for data in (bundle.train, bundle.test):
        if data is not None:
            data.collate = collate
    return bundle


#: ``--data-dtype``: how images are held in shared memory.
DATA_DTYPES = ("auto", "uint8", "float32")


def with_data_dtype(bundle: DataBundle, data_dtype: str) -> DataBundle:
    """``bundle`` with its images held as ``--data-dtype`` says: ``auto`` and ``uint8`` keep
    pixels that a source gives as uint8 (``mnist``) as they are, decoded per batch in the
    workers; ``float32`` converts them up front (four times the shared memory, no decoding
    per batch). ``uint8`` on a set without uint8 pixels is refused: there is nothing to
    keep."""
    sets = [data for data in (bundle.train, bundle.test) if data is not None]
    pixels = all(getattr(data, "decode", None) is not None for data in sets)
    if data_dtype == "uint8" and not pixels:
        raise UserError(f"{setting_name('data_dtype')} uint8 keeps images that their source "
                        f"gives as uint8 pixels (--data mnist) in shared memory; "
                        f"{bundle.name}'s inputs are not such pixels: leave "
                        f"{setting_name('data_dtype')} out")
    if data_dtype != "float32" or not pixels:
        return bundle

    def as_floats(data):
        return None if data is None else \
            SharedTensorDataset(data.decode.rows(data.inputs), data.targets)

    return replace(bundle, train=as_floats(bundle.train), test=as_floats(bundle.test))


def from_factory(spec: str, seed: int = 0, loader: str = "stacked") -> DataBundle:
    """Call a user factory that returns ``(train_dataset, test_dataset_or_None)``, seeded:
    the same ``seed`` gives the same data, which a resume must have. ``loader``:
    ``--loader`` (``data.stream``)."""
    with seeded(seed):
        produced = call_factory(spec, "--data")
        if not (isinstance(produced, (tuple, list)) and len(produced) == 2):
            raise UserError(f"--data {spec!r} returned {type(produced).__name__}; the factory "
                            "must return a pair (train_dataset, test_dataset), test may be None")
        return user_datasets(spec, produced[0], produced[1], "mlp", GENERIC_DEFAULTS, loader)


def user_datasets(name: str, train, test, default_model: str, defaults: TrainingDefaults,
                  loader: str) -> DataBundle:
    """The user's data sets stacked, or read where they lie (``--loader``; auto: stacked
    where that fits in shared memory, ``data.stream.choose_loader``)."""
    from .stream import STREAM, choose_loader, streamed

    kind, why = choose_loader(loader, train, test)
    prepare = streamed if kind == STREAM else materialize
    bundle = user_bundle(name, prepare(train, "training data"),
                         prepare(test, "test data") if test is not None else None,
                         default_model=default_model, defaults=defaults)
    bundle.loader_reason = why
    return bundle


def with_loader(bundle: DataBundle, config) -> DataBundle:
    """``bundle`` as ``--loader`` reads it: data stacked by its source (the built-ins,
    natural data) wrapped to be streamed when ``stream`` is said; a streamed set told the
    run's loader threads and patience (``--loader-workers``, ``--worker-timeout``)."""
    from .stream import STREAM, StreamDataset, streamed

    if config.loader == STREAM and not isinstance(bundle.train, StreamDataset):
        bundle = replace(bundle, train=streamed(bundle.train, "training data"),
                         test=None if bundle.test is None else
                         streamed(bundle.test, "test data"))
    for data in (bundle.train, bundle.test):
        if isinstance(data, StreamDataset):
            data.loader_workers, data.patience_s = config.loader_workers, config.worker_timeout
    return bundle


def user_bundle(name: str, train: SharedTensorDataset, test: SharedTensorDataset | None,
                default_model: str, defaults: TrainingDefaults) -> DataBundle:
    """The user's two data sets as a bundle: the task from the training targets, and a
    test set that the model trained on them can be scored on -- checked here, since a
    mismatch would otherwise surface as a traceback from the first evaluation, after a
    whole epoch of training. The classes are those of both sets (a class only the test set
    has is still one the model must output)."""
    task, output_size = infer_task(train.targets)
    if test is not None:
        _check_test_matches_train(train, test, task, output_size)
        if task == CLASSIFICATION:
            output_size = max(output_size, class_count(test.targets))
    return DataBundle(name=name, train=train, test=test, task=task, output_size=output_size,
                      default_model=default_model, defaults=defaults)


def _check_test_matches_train(train: SharedTensorDataset, test: SharedTensorDataset,
                              task: str, output_size: int) -> None:
    # Inputs are the model's to judge (a global pool takes any size): see
    # launch.preflight.check_model_fits_data.
    kinds = {CLASSIFICATION: "integer (classes)", REGRESSION: "float (regression)"}
    test_task = REGRESSION if test.targets.dtype.is_floating_point else CLASSIFICATION
    if test_task != task:
        raise UserError(f"the test data's targets are {kinds[test_task]} but the training "
                        f"data's {kinds[task]}; give both sets targets of the same kind")
    if task == CLASSIFICATION:
        try:
            infer_task(test.targets)
        except UserError as err:
            raise UserError(f"the test data's targets: {err}") from None
    elif test.targets[0].numel() != output_size:
        raise UserError(f"the test data's targets have {test.targets[0].numel()} value(s) "
                        f"per sample but the training data's {output_size}; give both sets "
                        "targets of the same shape")


def infer_task(targets: torch.Tensor) -> tuple[str, int]:
    """Integer targets mean classification (classes 0..max), floating targets regression."""
    if targets.dtype.is_floating_point:
        return REGRESSION, int(targets[0].numel()) if targets.dim() > 1 else 1
    if targets.dim() != 1:
        raise UserError(f"integer targets must be class indices of shape [N], got "
                        f"{tuple(targets.shape)}; use float targets for regression")
    if targets.min() < 0:
        raise UserError("class targets must be >= 0")
    return CLASSIFICATION, class_count(targets)


def _split(num_samples: int, test_fraction: float):
    order = torch.randperm(num_samples, generator=torch.Generator().manual_seed(SPLIT_SEED))
    num_test = int(round(num_samples * test_fraction))
    return order[num_test:].sort().values, order[:num_test].sort().values
