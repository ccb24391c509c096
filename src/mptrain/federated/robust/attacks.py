"""Attacking clients: which clients are malicious (seeded, fixed for the run), and what each
``--attack`` makes them send instead of their honest update.

- ``sign-flip[:SCALE]``: train, then send ``-SCALE`` times the update (default 1);
- ``gaussian[:STD]``: do not train; send an update drawn from ``N(0, STD^2 I)`` (default 1);
- ``scaling:LAMBDA``: train, then send ``LAMBDA`` times the update (the boosted update of
  model replacement, Bagdasaryan et al. 2020, that Sun et al. 2019's norm bounding answers);
- ``label-flip``: train on the client's data with every label ``y`` replaced by
  ``classes - 1 - y``, and send that update as it is;
- ``alie[:Z]`` (Baruch et al. 2019, "A Little Is Enough"): do not train; the attackers,
  colluding, send ``mu + Z sigma``, the coordinate-wise mean and standard deviation of the
  round's honest updates, with ``Z`` by default the paper's ``z_max``: ``s = floor(n/2 + 1)
  - f`` and ``z_max = Phi^-1((n - s) / n)`` for ``n`` clients of which ``f`` attack -- the
  largest shift that still leaves the attackers looking like the majority.

Everything random is a function of ``(seed, ...)``, never of the worker: the same attackers
and the same noise whatever ``--workers``.
"""

from __future__ import annotations

import statistics
from typing import Sequence

import torch

from ...errors import UserError
from ...errors import setting_name as named   # as the caller spelled the setting
from .spec import AttackSpec
from ..sampling import mix_seed

_MALICIOUS, _GAUSSIAN = 0x5EED_A771, 0x5EED_A772


def malicious_clients(clients: int, fraction: float, seed: int) -> list[int]:
    """The malicious clients of a run: ``fraction * clients`` of them (halves rounded
    up), a seeded choice fixed for the whole run, in increasing order."""
    count = int(fraction * clients + 0.5 + 1e-9)   # a half that rounding left below .5
    if fraction > 0 and clients < 2:
        raise UserError(f"{named('malicious_fraction')}: an attack needs at least 2 clients "
                        f"(one honest, one attacking), got {named('clients')} {clients}")
    if fraction > 0 and count == 0:
        raise UserError(f"{named('malicious_fraction')} {fraction:g} of {clients} clients "
                        f"is no client; give at least {1 / clients:.3g}")
    if count >= clients:
        raise UserError(f"{named('malicious_fraction')} {fraction:g} of {clients} clients is "
                        f"every client: no honest client is left; give less than "
                        f"{(clients - 0.5) / clients:.3g}")
    generator = torch.Generator().manual_seed(mix_seed(seed, _MALICIOUS))
    return sorted(torch.randperm(clients, generator=generator)[:count].tolist())


def flip_labels(targets: torch.Tensor, classes: int) -> torch.Tensor:
    """Label flipping: class ``y`` becomes ``classes - 1 - y``."""
    return (classes - 1) - targets


def attack_row_(attack: AttackSpec, row: torch.Tensor, global_flat: torch.Tensor, seed: int,
                round_index: int, client: int) -> torch.Tensor:
    """Turn a malicious client's reported model ``row`` (its honest result, or anything
    when the attack does not train) into the model its attack sends; ``global_flat`` is the
    global model the round started from. In place; returns ``row``."""
    if attack.name in ("sign-flip", "scaling"):
        factor = -(attack.value or 1.0) if attack.name == "sign-flip" else attack.value
        # row <- global_flat + factor * (row - global_flat)
        row.sub_(global_flat).mul_(factor).add_(global_flat)
    elif attack.name == "gaussian":
        generator = torch.Generator().manual_seed(
            mix_seed(seed, round_index, client, _GAUSSIAN))
        noise = torch.randn(row.shape, generator=generator, dtype=row.dtype)
        row.copy_(global_flat).add_(noise, alpha=attack.value or 1.0)
    elif attack.name == "label-flip":
        pass   # the attack was in the training data
    else:
        raise ValueError(f"{attack.name} is written at the server (alie_rows_)")
    return row


def alie_z(n: int, f: int) -> float:
    """Baruch et al. 2019's ``z_max`` for ``n`` clients of which ``f`` attack:
    ``s = floor(n/2 + 1) - f`` supporters needed, ``z = Phi^-1((n - s) / n)`` (``s`` kept
    within 1..n-1, where the formula is finite)."""
    if n < 2:
        return 0.0
    s = min(max(n // 2 + 1 - f, 1), n - 1)
    return statistics.NormalDist().inv_cdf((n - s) / n)


def alie_rows_(rows: torch.Tensor, honest: Sequence[int], malicious: Sequence[int],
               z: float) -> None:
    """Write ALIE's update into the ``malicious`` rows of ``rows`` (a block of columns):
    ``mean + z * std`` of the ``honest`` rows, coordinate-wise (the sample standard
    deviation; 0 with one honest row). With no honest row the attackers have nothing to
    imitate and leave their rows as they are (the worker wrote the global model there: a
    zero update)."""
    if not malicious or not honest:
        return
    values = rows[list(honest)].double()
    mean = values.mean(dim=0)
    std = values.std(dim=0) if len(honest) > 1 else torch.zeros_like(mean)
    forged = (mean + z * std).to(rows.dtype)
    for i in malicious:
        rows[i] = forged
