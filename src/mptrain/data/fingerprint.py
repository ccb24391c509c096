"""What a checkpoint records of the data it was trained on, and what a resume checks.

A resume that trains on other data than its checkpoint's goes on without a word and is no
continuation of the run (a data factory that drew other random numbers, a file changed
under ``--data-dir``). So a checkpoint holds, for each of the four tensors (training and
test inputs and targets), its shape, dtype and a SHA-256 of its bytes -- sound where a
sum or a sample of rows would let a change through -- and a resume compares them before
any process starts.

Cheap: one pass over bytes in memory, in place (no copy); MNIST's 188 MB as float32
hash in 0.13 s (SHA-NI, on the 2-core reference machine under load). The data is built
where it stays before it is hashed (``Launcher.place_data``); inputs still given as rows
to compute (``shared.RowSource``: a torchrun rank's built-ins) are hashed chunk by chunk
as they are computed, the same bytes as once built -- which costs computing them twice
(digits-60k's augmentation: 3.7 s), so only where nothing else can be done.
"""

from __future__ import annotations

import hashlib

import torch

from .shared import RowSource, SharedTensorDataset

#: The inputs' dtype a streamed set records (``data.stream``): its rows are not hashed.
STREAMED = "stream"
#: Rows hashed at a time from a RowSource (its own chunking's order of magnitude).
_ROWS = 10_000
_PARTS = (("train", "training"), ("test", "test"))


def fingerprint(bundle) -> dict:
    """``{"train": {"inputs": {...}, "targets": {...}}, "test": ... or None}``, each tensor as
    ``{"shape": [...], "dtype": "float32", "sha256": "..."}``: plain values a weights-only
    checkpoint load reads back."""
    return {"train": _of_set(bundle.train),
            "test": _of_set(bundle.test) if bundle.test is not None else None}


def well_formed(recorded) -> bool:
    """Whether ``recorded`` (read from a checkpoint file) is shaped as :func:`fingerprint`
    makes it, so that comparing it cannot fail."""
    def tensor_ok(entry) -> bool:
        return isinstance(entry, dict) and isinstance(entry.get("shape"), list) \
            and isinstance(entry.get("dtype"), str) and isinstance(entry.get("sha256"), str)

    return isinstance(recorded, dict) and all(
        recorded.get(key) is None or (isinstance(recorded[key], dict) and all(
            tensor_ok(recorded[key].get(part)) for part in ("inputs", "targets")))
        for key, _ in _PARTS)


def difference(recorded: dict, now: dict) -> str | None:
    """How ``now`` differs from ``recorded`` (both from :func:`fingerprint`), in words:
    the first difference found, or None when the data is the same."""
    for key, words in _PARTS:
        theirs, ours = recorded.get(key), now.get(key)
        if (theirs is None) != (ours is None):
            return (f"the checkpoint's run had {'no ' if theirs is None else ''}{words} "
                    f"data, this one has {'none' if ours is None else 'some'}")
        if theirs is None:
            continue
        for part in ("inputs", "targets"):
            said = _tensor_difference(theirs.get(part) or {}, ours[part])
            if said is not None:
                return f"the {words} {part} {said}"
    return None


def loader_difference(recorded: dict, now: dict) -> str | None:
    """What to give when the checkpoint's run held the training data otherwise than this one
    (stacked, or streamed: ``--loader``), or None: the same data has fingerprints that cannot
    be compared then (a streamed set hashes its ends only, ``StreamDataset.fingerprint``),
    and ``auto`` chooses anew on a resume, from /dev/shm's free space at that moment."""
    from ..errors import setting_name

    if recorded.get("train") is None:   # read from the file: ``difference`` names it
        return None
    theirs = recorded["train"]["inputs"]["dtype"] == STREAMED
    ours = now["train"]["inputs"]["dtype"] == STREAMED
    if theirs == ours:
        return None
    return (f"the checkpoint's run held the training data {'streamed' if theirs else 'stacked'}, "
            f"this one {'streams' if ours else 'stacks'} it: resume with "
            f"{setting_name('loader')} {'stream' if theirs else 'stacked'}")


def _tensor_difference(theirs: dict, ours: dict) -> str | None:
    if theirs.get("shape") != ours["shape"]:
        return (f"have shape {tuple(ours['shape'])}, the checkpoint's "
                f"{tuple(theirs.get('shape') or ())}")
    if theirs.get("dtype") != ours["dtype"]:
        return f"are {ours['dtype']}, the checkpoint's {theirs.get('dtype')}"
    if theirs.get("sha256") != ours["sha256"]:
        return "hold other values (same shape and dtype)"
    return None


def _of_set(data: SharedTensorDataset) -> dict:
    if hasattr(data, "fingerprint"):   # devices drawn on demand: their generator's digest
        return data.fingerprint()
    if hasattr(data, "offsets"):   # sequences of different lengths (``data.ragged``)
        return {"inputs": _of_sequences(data), "targets": _of_tensor(data.targets)}
    return {"inputs": _of_tensor(data.held_inputs), "targets": _of_tensor(data.targets)}


def _of_sequences(data) -> dict:
    """The values and the offsets hashed together: the same values cut otherwise are other
    data."""
    digest = hashlib.sha256()
    for tensor in (data.values, data.offsets):
        _hash_into(digest, tensor)
    return {"shape": [len(data), -1], "dtype": str(data.values.dtype).removeprefix("torch."),
            "sha256": digest.hexdigest()}


def _of_tensor(tensor) -> dict:
    digest = hashlib.sha256()
    if isinstance(tensor, RowSource):
        for start in range(0, len(tensor), _ROWS):
            _hash_into(digest, tensor.rows(start, min(start + _ROWS, len(tensor))))
    else:
        _hash_into(digest, tensor)
    return {"shape": list(tensor.shape), "dtype": str(tensor.dtype).removeprefix("torch."),
            "sha256": digest.hexdigest()}


def _hash_into(digest, tensor: torch.Tensor) -> None:
    """The bytes of ``tensor`` in row order, as bytes whatever the dtype (bfloat16 and bool
    have no numpy view of their own)."""
    flat = tensor.contiguous().reshape(-1)
    if flat.numel():
        digest.update(flat.view(torch.uint8).numpy())
