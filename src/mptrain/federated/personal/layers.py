"""Which of a model's tensors stay on each client: FedPer's and FedRep's named layers (or
the last N), FedBN's normalisation layers, Ditto's whole model.

The tensors are those the server averages (``floating_state``: parameters, then floating
buffers such as BatchNorm's running statistics), so a personal layer's statistics stay
local with its weights -- which is FedBN's point. Bad names are refused in one line that
names the layers there are.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch.nn as nn

from ...errors import UserError
from ...errors import setting_name as named  # as the caller spelled the setting
from .spec import PersonalizeSpec

#: What FedBN keeps local: every normalisation layer (Li et al. 2021 keep BatchNorm's;
#: the others normalise per client just the same).
NORMALISATION = (nn.modules.batchnorm._NormBase, nn.GroupNorm, nn.LayerNorm)


@dataclass(frozen=True)
class PersonalLayers:
    """The personal share of a model's floating state."""

    modules: tuple[str, ...]       # the module names chosen
    tensors: tuple[int, ...]       # their tensors' positions in ``floating_state``
    whole: bool = False            # Ditto: every tensor, a whole personal model


def floating_names(model: nn.Module) -> list[str]:
    """The names of ``floating_state(model)``'s tensors, in its order."""
    names = [name for name, _ in model.named_parameters()]
    return names + [name for name, buffer in model.named_buffers() if buffer.is_floating_point()]


def layers_with_parameters(model: nn.Module) -> list[str]:
    """The modules that hold parameters of their own, in the model's order: what ``last:N``
    counts and what a refusal lists."""
    return [name for name, module in model.named_modules()
            if name and any(True for _ in module.parameters(recurse=False))]


def personal_layers(model: nn.Module, spec: PersonalizeSpec) -> PersonalLayers | None:
    """The tensors ``spec`` keeps on each client (None: fine-tuning keeps none)."""
    names = floating_names(model)
    if spec.method == "finetune":
        return None
    if spec.method == "ditto":
        return PersonalLayers(("(whole model)",), tuple(range(len(names))), whole=True)
    there = layers_with_parameters(model)
    said = f"{named('personalize')} {spec.method}"
    if spec.method == "fedbn":
        chosen = [name for name, module in model.named_modules()
                  if name and isinstance(module, NORMALISATION)]
        if not chosen:
            raise UserError(f"{said}: the model has no normalisation layer (BatchNorm, "
                            f"GroupNorm, LayerNorm) to keep local; its layers: "
                            f"{', '.join(there)}")
    elif spec.last is not None:
        if spec.last >= len(there):
            raise UserError(f"{said}:last:{spec.last} would keep every layer personal and "
                            f"leave nothing to average; the model has {len(there)}: "
                            f"{', '.join(there)}")
        chosen = there[-spec.last:]
    else:
        modules = dict(model.named_modules())
        unknown = [name for name in spec.layers if name not in modules or not name]
        if unknown:
            raise UserError(f"{said}: the model has no layer {unknown[0]!r}; its layers: "
                            f"{', '.join(there)}")
        chosen = list(spec.layers)
    tensors = tuple(i for i, name in enumerate(names)
                    if any(name.startswith(module + ".") for module in chosen))
    if not tensors:
        raise UserError(f"{said}: {', '.join(chosen)} hold(s) no parameters; the layers that "
                        f"do: {', '.join(there)}")
    if len(tensors) == len(names):
        raise UserError(f"{said}: {', '.join(chosen)} is every layer of the model, which "
                        f"leaves nothing to average; its layers: {', '.join(there)}")
    params = list(model.parameters())
    head = [i for i in tensors if i < len(params)]
    if spec.method == "fedrep":
        _refuse_a_phase_with_nothing_to_train(said, chosen, there, params, head)
    if len(head) == len(params):
        raise UserError(f"{said}: {', '.join(chosen)} hold(s) every parameter of the model, "
                        f"which leaves none to average; its layers: {', '.join(there)}")
    return PersonalLayers(tuple(chosen), tensors)


def _refuse_a_phase_with_nothing_to_train(said: str, chosen: list[str], there: list[str],
                                          params: list, head: list[int]):
    """FedRep trains the head alone, then the body alone: a head of buffers only, or a
    phase whose parameters the user froze (``requires_grad=False``), has nothing to train."""
    if not head:
        raise UserError(f"{said}: {', '.join(chosen)} hold(s) no parameters to train as "
                        f"the head, only buffers; the layers that do: {', '.join(there)}")
    head_trains = any(params[i].requires_grad for i in head)
    body_trains = any(p.requires_grad for i, p in enumerate(params) if i not in head)
    if not head_trains:
        raise UserError(f"{said}: every parameter of its head ({', '.join(chosen)}) is frozen "
                        "(requires_grad False), so its head phase has nothing to train; "
                        "unfreeze the head, or name other layers")
    if not body_trains:
        raise UserError(f"{said}: every parameter outside its head ({', '.join(chosen)}) is "
                        "frozen (requires_grad False), so its body phase has nothing to "
                        f"train; {named('personalize')} fedper:{','.join(chosen)} trains "
                        "heads on a frozen body")


def personal_numel(model: nn.Module, layers: PersonalLayers | None) -> int:
    """Floats one client's personal tensors take."""
    if layers is None:
        return 0
    state = [p for p in model.parameters()]
    state += [b for b in model.buffers() if b.is_floating_point()]
    return sum(state[i].numel() for i in layers.tensors)
