"""``--augment crop:PAD,hflip,shift:PX``: image augmentation drawn afresh for every batch, as
a few batched tensor operations on the batch's device (no torchvision, no Python loop over
samples).

- ``hflip``: each image mirrored left-right with probability 1/2;
- ``crop:PAD``: torchvision's ``RandomCrop(size, padding=PAD)``: the image padded by PAD on
  every side and cut back to its size at a random place -- the same as a random shift of up
  to PAD pixels each way;
- ``shift:PX``: a random translation of up to PX pixels each way, the uncovered border
  filled; the same operation as ``crop:PX``, under the name Keras users know.

Padding fills with the batch's smallest value: black for images (0 for uint8 pixels, the
normalised value of 0 for normalised ones), so that an image stored as uint8 and the same
image stored normalised come out of the augmentation as the same picture. Images are
``[C, H, W]`` or ``[H, W]`` samples; anything else is refused before training.

Pure functions of (ops, batch, generator): nothing here knows of processes or seeds.
Parsing imports no torch (settings are checked before torch is imported).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import torch


from ..errors import UserError, setting_name

AUGMENT_HELP = "crop:PAD, hflip, shift:PX, comma-separated (e.g. crop:4,hflip)"


@dataclass(frozen=True)
class AugmentOp:
    """One step of ``--augment``: ``hflip``, or a shift of up to ``pixels`` (crop, shift)."""

    name: str
    pixels: int = 0

    def __str__(self) -> str:
        return self.name if self.name == "hflip" else f"{self.name}:{self.pixels}"


def parse_augment(spec) -> tuple[AugmentOp, ...]:
    """The ops of ``--augment`` in order; a malformed one refused in one line."""
    said = setting_name("augment")
    if not isinstance(spec, str) or not spec.strip():
        raise UserError(f"{said} must be a string such as 'crop:4,hflip', got {spec!r}")
    ops = []
    for part in spec.split(","):
        name, _, arg = part.strip().partition(":")
        if name == "hflip" and not arg:
            ops.append(AugmentOp("hflip"))
        elif name in ("crop", "shift") and arg:
            try:
                pixels = int(arg)
            except ValueError:
                pixels = -1
            if pixels < 1:
                raise UserError(f"{said} {spec!r}: {name}:N takes a whole number of pixels "
                                f">= 1, got {arg!r}")
            ops.append(AugmentOp(name, pixels))
        else:
            raise UserError(f"{said} {spec!r}: unknown or malformed {part.strip()!r}; "
                            f"use {AUGMENT_HELP}")
    return tuple(ops)


def check_images(input_shape: tuple, spec: str) -> None:
    """Refuse ``--augment`` on samples that are not images (``[C, H, W]`` or ``[H, W]``)."""
    if len(input_shape) not in (2, 3) or min(input_shape[-2:]) < 2:
        raise UserError(f"{setting_name('augment')} {spec} takes images ([C, H, W] or [H, W] "
                        f"samples); this data's samples are {list(input_shape)}: leave "
                        f"{setting_name('augment')} out, or give a transform of your own "
                        f"({setting_name('transform')})")


def augment(ops: tuple[AugmentOp, ...], images: torch.Tensor,
            generator: torch.Generator) -> torch.Tensor:
    """``images`` (a batch, ``[B, C, H, W]`` or ``[B, H, W]``) through ``ops``, each sample
    drawing its own flips and shifts from ``generator``."""
    for op in ops:
        if op.name == "hflip":
            images = random_hflip(images, generator)
        else:
            images = random_shift(images, op.pixels, generator)
    return images


def random_hflip(images: torch.Tensor, generator: torch.Generator) -> torch.Tensor:
    import torch

    flip = torch.rand(len(images), generator=generator, device=images.device) < 0.5
    return torch.where(flip.view(-1, *([1] * (images.dim() - 1))), images.flip(-1), images)


def random_shift(images: torch.Tensor, pixels: int,
                 generator: torch.Generator) -> torch.Tensor:
    """Each image moved by its own (dy, dx) in [-pixels, pixels]: the batch padded once, then
    every image's window read through one gather of row and column indices."""
    import torch

    count, height, width = len(images), images.shape[-2], images.shape[-1]
    device = images.device
    offsets = torch.randint(0, 2 * pixels + 1, (2, count), generator=generator, device=device)
    shape = (*images.shape[:-2], height + 2 * pixels, width + 2 * pixels)
    # The fill stays a tensor on the device: no wait for a GPU to say what it is.
    padded = images.amin().expand(shape).contiguous()
    padded[..., pixels:pixels + height, pixels:pixels + width] = images
    rows = offsets[0].view(count, 1, 1) + torch.arange(height, device=device) \
        .view(1, height, 1)                                    # [B, H, 1]
    cols = offsets[1].view(count, 1, 1) + torch.arange(width, device=device).view(1, 1, width)
    batch = torch.arange(count, device=device).view(count, 1, 1)
    if images.dim() == 3:                                      # [B, H, W]
        return padded[batch, rows, cols]
    # [B, C, H+2p, W+2p] -> index as [B, H+2p, W+2p, C] so the channels stay together
    return padded.movedim(1, -1)[batch, rows, cols].movedim(-1, 1).contiguous()
