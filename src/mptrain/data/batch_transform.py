"""Per-batch transforms in the workers (``--augment``, ``--transform pkg.mod:fn``,
``fit(transform=fn)``): each training batch, once on the worker's device, goes through the
built-in augmentation and then the user's function, with a generator seeded by where the
batch stands in the run -- (seed, epoch, step, rank) for the epoch strategies, (seed, round,
client, step) for a fedavg client -- so that a run is reproducible and no two workers, and
no two epochs, draw the same augmentation. Evaluation batches are never transformed.

A user function is called ``fn(inputs, targets, generator)`` and returns ``(inputs,
targets)`` with the batch's size; it draws its random numbers from ``generator`` (a
``torch.Generator`` on the batch's device). It is named in the run's settings by its import
string; one given from Python goes by ``module:qualified_name`` and is found in this
process's table (a forked worker inherits it; a spawned one imports the name, so there the
function must be a module-level one).
"""

from __future__ import annotations

import hashlib
import struct
from dataclasses import dataclass
from typing import TYPE_CHECKING, Callable


from ..errors import UserError, raised_by_users_code, setting_name
from ..imports import import_name
if TYPE_CHECKING:
    import torch

from .augment import AugmentOp, augment, check_images, parse_augment

#: Mixed into every batch's seed: the transforms' stream is apart from the batch order's,
#: the model's initialisation's and dropout's.
_TRANSFORM_TAG = 0x7A5F0A11

#: Transforms given from Python (``fit(transform=fn)``), by the name standing for them in
#: the run's settings (as ``data.partitions`` keeps given partition functions).
_GIVEN: dict[str, Callable] = {}


def given_transform(function: Callable) -> str:
    """The name ``function`` goes by in the run's settings (``module:qualified_name``)."""
    name = import_name(function)
    _GIVEN[name] = function
    return name


def check_transform_name(value) -> None:
    """``--transform``'s value on its own: an import string (or a function given from
    Python), refused in one line otherwise."""
    from ..imports import can_name_code, colon_hint

    said = setting_name("transform")
    if not isinstance(value, str):
        raise UserError(f"{said} must be an import string such as 'my_pkg.aug:flip' or a "
                        f"function, got {value!r}")
    if value not in _GIVEN and not can_name_code(value):
        raise UserError(f"{said} {value!r} is not an import string{colon_hint(value)}; write "
                        "it as 'package.module:function' or 'path/to/file.py:function'")


def resolve_transform(name: str) -> Callable:
    from ..imports import load_object

    return _GIVEN.get(name) or load_object(name, setting_name("transform"))


@dataclass
class BatchTransform:
    """What a worker does to each training batch: ``ops`` (``--augment``), then
    ``function`` (``--transform``)."""

    ops: tuple[AugmentOp, ...] = ()
    function: Callable | None = None
    name: str | None = None    # the function's, for messages

    def apply(self, inputs: torch.Tensor, targets: torch.Tensor,
              key: tuple[int, ...]) -> tuple[torch.Tensor, torch.Tensor]:
        """The batch transformed with a generator seeded from ``key`` (the batch's place
        in the run: see the module doc)."""
        import torch

        generator = torch.Generator(device=_tensors(inputs)[0].device)   # collated: a tuple
        generator.manual_seed(batch_seed(*key))
        if self.ops:
            inputs = augment(self.ops, inputs, generator)
        if self.function is not None:
            # What it raises here goes up as a worker's failure: traceback and rank.
            inputs, targets = self.function(inputs, targets, generator)
        return inputs, targets


def batch_seed(*key: int) -> int:
    """A 63-bit seed from the batch's place in the run (a hash: neighbouring steps, ranks
    and clients get unrelated streams)."""
    digest = hashlib.blake2b(struct.pack(f"<{len(key) + 1}q", _TRANSFORM_TAG,
                                         *(k & 0x7FFFFFFFFFFFFFFF for k in key)),
                             digest_size=8).digest()
    return int.from_bytes(digest, "little") & 0x7FFFFFFFFFFFFFFF


def batch_transform_for(config) -> BatchTransform | None:
    """The run's transform (None: batches train as they are gathered)."""
    if config.augment is None and config.transform is None:
        return None
    return BatchTransform(ops=parse_augment(config.augment) if config.augment else (),
                          function=resolve_transform(config.transform)
                          if config.transform else None,
                          name=config.transform)


def check_batch_transform(config, bundle) -> None:
    """Refuse, before any process starts, ``--augment`` on data that is not images and a
    transform that, called on the first training batch, does not return ``(inputs,
    targets)`` tensors of the batch's size."""
    import torch

    transform = batch_transform_for(config)
    if transform is None:
        return
    if transform.ops:
        check_images(bundle.input_shape, config.augment)
    count = min(len(bundle.train), config.batch_size)
    inputs = bundle.train.head(count)
    targets = bundle.train.targets[:count]
    produced = _call_once(transform, inputs, targets)
    said = f"{setting_name('transform')} {transform.name}"
    if not (isinstance(produced, tuple) and len(produced) == 2
            and all(isinstance(t, torch.Tensor) for t in _tensors(produced))):
        raise UserError(f"{said} returned {_described(produced)} on the first batch; it must "
                        "return a pair (inputs, targets) of tensors")
    for part, before, after in zip(("inputs", "targets"), (inputs, targets), produced):
        before, after = _tensors(before)[0], _tensors(after)[0]   # collated: (tokens, mask)
        size = len(after) if after.dim() else "no batch dimension"
        if size != len(before):
            raise UserError(f"{said} changed the batch size of the {part} from {len(before)} "
                            f"to {size} on the first batch; a transform must keep every "
                            "sample (one output per input)")


def _call_once(transform: BatchTransform, inputs, targets):
    """The transform on one batch, as a worker calls it, returning what it gave."""
    import torch

    produced = (inputs, targets)
    generator = torch.Generator().manual_seed(batch_seed(0))
    if transform.ops:
        produced = (augment(transform.ops, inputs, generator), targets)
    if transform.function is not None:
        with raised_by_users_code(f"{setting_name('transform')} {transform.name}"):
            produced = transform.function(*produced, generator)
    if isinstance(produced, list):
        produced = tuple(produced)
    return produced


def _tensors(value) -> list:
    """``value``'s tensors: itself, or a collated tuple's parts (``data.ragged``)."""
    if isinstance(value, (tuple, list)):
        return [t for part in value for t in _tensors(part)] or [value]
    return [value]


def _described(value) -> str:
    if isinstance(value, tuple):
        return f"a tuple of {len(value)} ({', '.join(type(v).__name__ for v in value)})"
    return f"a {type(value).__name__}"
