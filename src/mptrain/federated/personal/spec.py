"""``--personalize``: which personalization a fedavg run does, parsed from its one string.

``finetune:STEPS`` (evaluation only), ``fedper:LAYERS``, ``fedrep:LAYERS``, ``fedbn`` and
``ditto:LAMBDA``. ``LAYERS`` is a comma-separated list of module names (``fc2`` or
``net.4``: every parameter and buffer of that module), or ``last:N`` (the last N modules
that hold parameters of their own). Nothing here imports torch: the command line and the
config check these strings before torch is imported; which names a model has is checked
against the model (``layers``).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from ...errors import UserError
from ...errors import setting_name as named  # as the caller spelled the setting

#: Every method, in the order the docs give them.
METHODS = ("finetune", "fedper", "fedrep", "fedbn", "ditto")
#: Methods whose personal tensors are some of the model's layers.
LAYERED = ("fedper", "fedrep", "fedbn")
#: FedRep's head epochs per round when not said: Collins et al. 2021 train the head for 10
#: local epochs and then the body for one (our --local-epochs, default 1).
DEFAULT_HEAD_EPOCHS = 10
EXAMPLES = "finetune:5, fedper:fc2, fedper:last:1, fedrep:last:1, fedbn or ditto:0.1"


@dataclass(frozen=True)
class PersonalizeSpec:
    """One ``--personalize`` value."""

    method: str
    steps: int | None = None              # finetune: local steps before scoring
    layers: tuple[str, ...] = ()          # fedper/fedrep: module names
    last: int | None = None               # fedper/fedrep: the last N modules instead
    strength: float | None = None         # ditto: lambda, the pull to the global model

    @property
    def trains(self) -> bool:
        """Whether the method changes training (everything but fine-tuning, which only
        changes how clients are scored)."""
        return self.method != "finetune"

    @property
    def layered(self) -> bool:
        return self.method in LAYERED

    def describe(self) -> str:
        if self.method == "finetune":
            return f"fine-tuning {self.steps} local step(s) before each client is scored"
        if self.method == "ditto":
            return f"Ditto, lambda {self.strength:g}: a personal model per client"
        if self.method == "fedbn":
            return "FedBN: normalisation layers stay on each client"
        which = f"the last {self.last} layer(s)" if self.last is not None \
            else ", ".join(self.layers)
        return f"{'FedPer' if self.method == 'fedper' else 'FedRep'}: {which} stay on each client"


def parse_personalize(value) -> PersonalizeSpec:
    """``value`` as a :class:`PersonalizeSpec`; a malformed one refused in one line."""
    said = named("personalize")
    if not isinstance(value, str) or not value:
        raise UserError(f"{said} must be a string such as {EXAMPLES}, got {value!r}")
    method, _, argument = value.partition(":")
    method = method.strip().lower()
    if method not in METHODS:
        raise UserError(f"{said} {value!r}: unknown method {method!r}; choose one of "
                        f"{', '.join(METHODS)} (such as {EXAMPLES})")
    if method == "fedbn":
        if argument:
            raise UserError(f"{said} fedbn takes no argument: every normalisation layer stays "
                            f"local, got {value!r}")
        return PersonalizeSpec("fedbn")
    if not argument:
        what = {"finetune": "STEPS", "ditto": "LAMBDA"}.get(method, "LAYERS")
        raise UserError(f"{said} {method} needs {method}:{what} (such as {EXAMPLES})")
    if method == "finetune":
        steps = _whole(argument)
        if steps is None or steps < 1:
            raise UserError(f"{said} finetune:STEPS needs a positive whole number of steps, "
                            f"got {argument!r}")
        return PersonalizeSpec("finetune", steps=steps)
    if method == "ditto":
        try:
            strength = float(argument)
        except ValueError:
            strength = math.nan
        if not math.isfinite(strength) or strength < 0:
            raise UserError(f"{said} ditto:LAMBDA needs a finite number >= 0, got "
                            f"{argument!r}")
        return PersonalizeSpec("ditto", strength=strength)
    return _layers_spec(method, argument, said)


def refuse_other_personal_state(saved: str | None, now: str | None,
                                where: str | None = None) -> None:
    """Refuse a resume whose ``--personalize`` (``now``) keeps other personal state than
    the checkpoint's (``saved``): another method, other layers, or personal state where the
    checkpoint holds none. The state would not load (another width) or would load as
    something else (FedPer's heads read as FedRep's, personal models begun mid-run), so it is
    refused before any process starts. What changes no state passes, as another --lr does:
    Ditto's lambda, fine-tuning's steps (or fine-tuning said or left out: it keeps nothing).
    """
    if _kept(saved) == _kept(now):
        return
    said = named("personalize")
    source = f"the checkpoint in {where}" if where else "the checkpoint"
    was = f"trained with {said} {saved}" if saved else f"trained without {said}"
    keep = f"with {said} {saved} (or leave {said} out)" if saved else f"without {said}"
    raise UserError(f"{source} was {was}: it holds no personal state for {now}; resume "
                    f"{keep}, or train with {said} {now} in a new run (no {named('resume')})")


def _kept(value: str | None) -> tuple | None:
    """What personal state ``value`` keeps on each client (None: none)."""
    spec = parse_personalize(value) if value is not None else None
    if spec is None or not spec.trains:
        return None
    return spec.method, spec.layers, spec.last


def _layers_spec(method: str, argument: str, said: str) -> PersonalizeSpec:
    kind, _, count = argument.partition(":")
    if kind.strip() == "last":
        last = _whole(count)
        if last is None or last < 1:
            raise UserError(f"{said} {method}:last:N needs a positive whole number of layers, "
                            f"got {argument!r}")
        return PersonalizeSpec(method, last=last)
    names = tuple(name.strip() for name in argument.split(","))
    if any(not name for name in names):
        raise UserError(f"{said} {method}:LAYERS needs comma-separated module names such as "
                        f"fc2 or net.4, got {argument!r}")
    return PersonalizeSpec(method, layers=names)


def _whole(text: str) -> int | None:
    try:
        return int(text.strip())
    except ValueError:
        return None
