"""How many classes integer labels make: one model output for each of 0..largest label."""

from __future__ import annotations

import torch

from ..errors import UserError

#: The most classes a model is built for. A label is an index into the model's outputs, so
#: a stray 1e12 in the data asked for a last layer of 512 TB; a million outputs (ImageNet-21k
#: has 21,841 classes) is past any data set mptrain trains and still allocates.
MAX_CLASSES = 1_000_000


def class_count(labels: torch.Tensor) -> int:
    """``largest label + 1``; a label past ``MAX_CLASSES`` is one line naming it, the
    classes it would make and how many distinct labels there are to number instead."""
    largest = int(labels.max())
    if largest >= MAX_CLASSES:
        distinct = len(torch.unique(labels))
        raise UserError(f"class label {largest:,} makes {largest + 1:,} classes (one model "
                        f"output each for 0..{largest:,}); mptrain takes at most "
                        f"{MAX_CLASSES:,}: number the {distinct:,} distinct labels "
                        f"0..{distinct - 1:,}")
    return largest + 1
