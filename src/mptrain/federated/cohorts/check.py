"""Before the first round: can this model's clients train as a cohort (``trainer``), and
what one client of a cohort takes in memory (``memory`` sizes the cohorts from it).

What cannot, found by looking and by a dry run on one batch, and named by module:

- batch-statistics normalisation in training mode (BatchNorm; any norm layer that tracks
  running statistics): its statistics would mix the padding into the batch and its
  running averages are in-place writes to one shared buffer;
- whatever ``vmap`` refuses: data-dependent Python control flow (``if x.sum() > 0``),
  in-place writes of batched values into buffers, random calls it cannot batch, ops
  without a batching rule -- the dry run raises, and the module running then is named;
- any other buffer the dry run changed (a counter a module bumps in ``forward``): under
  ``vmap`` one copy would serve every client.

And what can, but only slowly: an op without a batching rule, which ``vmap`` runs as a
Python loop over the clients, one call each (it warns "performance drop ... batching rule
for aten::..."). The result is right, so ``on`` trains stacked; ``auto`` trains one client
at a time and says which module and op (``CohortCheck.slow``). ``nn.LSTM``'s fused kernel
was one (5x slower than one client at a time, measured); cohorts now run it as ``stackable``'s
twin, and a subclass of it, which the twin leaves alone, is found here.
"""

from __future__ import annotations

import re
import warnings
from dataclasses import dataclass

import torch
import torch.nn as nn

from ...errors import error_line
from .choice import vectorizing
from .trainer import CohortTrainer

#: vmap's warning when it loops over an op's batch (BatchedFallback.cpp).
_FALLBACK = re.compile(r"batching rule for (\S+?)\.? ")

#: Activations saved for backward, as a multiple of the module outputs counted in the dry
#: run (functional ops between modules -- relu, pooling -- save theirs too).
ACTIVATION_FACTOR = 3


@dataclass(frozen=True)
class CohortCheck:
    """``reason``: why the model cannot train as a cohort (None: it can);
    ``client_bytes``: one client's memory in a cohort (parameters, gradients, optimizer
    state, activations, its batch); ``slow``: why the model stacks, but slower than its
    clients one at a time (None: nothing known)."""

    reason: str | None
    client_bytes: int
    slow: str | None = None

    @property
    def vectorizes(self) -> bool:
        return self.reason is None


def check_cohort(trainer: CohortTrainer, inputs: torch.Tensor, targets: torch.Tensor,
                 extra_state: int = 0) -> CohortCheck:
    """Look at ``trainer.model`` and dry-run one stacked step of two clients on the batch
    ``(inputs, targets)`` (on the trainer's device). ``extra_state``: tensors per parameter
    beyond parameters, gradients and optimizer state (SCAFFOLD's correction, FedProx's
    anchor)."""
    model = trainer.model
    reason = _batch_statistics(model)
    param_bytes = sum(p.numel() * p.element_size() for p in model.parameters())
    state = 3 + trainer.optimizer.state_tensors() + extra_state
    batch_bytes = inputs.numel() * inputs.element_size() + targets.numel() * 8
    if reason is not None:
        return CohortCheck(reason, param_bytes * state + batch_bytes)
    reason, activations, slow = _dry_run(trainer, inputs, targets)
    return CohortCheck(reason, param_bytes * state + activations + batch_bytes, slow)


def _batch_statistics(model: nn.Module) -> str | None:
    for name, module in model.named_modules():
        batch_norm = isinstance(module, nn.modules.batchnorm._BatchNorm)
        tracks = isinstance(module, nn.modules.batchnorm._NormBase) and \
            module.track_running_stats
        if batch_norm or tracks:
            return (f"{_label(name, module)} normalises with batch statistics in training "
                    "mode (and updates running statistics in place); use GroupNorm or "
                    f"LayerNorm, or {vectorizing('off')}")
    return None


def _dry_run(trainer: CohortTrainer, inputs, targets) -> tuple[str | None, int, str | None]:
    """One stacked gradient of two clients; the innermost module running when it fails,
    or when ``vmap`` warns that it loops over the clients, is the one named. Returns
    (reason, activation bytes of one client, slow)."""
    model, device = trainer.model, trainer.device
    running: list[tuple[str, nn.Module, int]] = []
    outputs, kept = [0], [0]   # leaf modules' outputs; what a module says it keeps
    runs = trainer.stacked_model   # what runs under vmap (``stackable``)
    names = {module: name for name, module in runs.named_modules()}
    caught: list[warnings.WarningMessage] = []
    slow: list[str] = []

    def enter(module, args):
        running.append((names[module], module, len(caught)))

    def leave(module, args, output):
        name, _, seen = running.pop()
        if isinstance(output, torch.Tensor) and not list(module.children()):
            outputs[0] += output.numel() * output.element_size()   # one client's (vmap)
        if hasattr(module, "activation_bytes"):   # a loop inside one module (stackable)
            kept[0] += module.activation_bytes(output)
        looped = [m.group(1) for w in caught[seen:]
                  if (m := _FALLBACK.search(str(w.message)))]
        if looped and not slow:   # the innermost module leaves first
            slow.append(f"{_label(name, module)} runs {looped[0]}, which vmap has no "
                        "batching rule for: stacked, it loops over the clients, slower than "
                        f"one at a time ({vectorizing('on')} to train stacked anyway)")

    buffers = {name: b.clone() for name, b in model.named_buffers()}
    params = [p.detach().to(device).unsqueeze(0).repeat(2, *([1] * p.dim()))
              for p in model.parameters()]
    stacked = inputs.to(device).unsqueeze(0).expand(2, *inputs.shape).contiguous()
    labels = targets.to(device).unsqueeze(0).expand(2, *targets.shape).contiguous()
    weight = torch.ones(2, len(inputs), device=device)
    was_training = model.training
    generator_state = torch.get_rng_state()
    model.train()
    before = peak_before = 0
    if device.type == "cuda":   # a round resets the peak before it trains (engine.loop)
        before = torch.cuda.memory_allocated(device)
        peak_before = torch.cuda.max_memory_allocated(device)
    hooks = []
    try:
        # Which parameters train, by a plain pass first: not counted as a client's outputs.
        trainer.find_trained(inputs.to(device), targets.to(device))
        hooks = [h for m in runs.modules() for h in (m.register_forward_pre_hook(enter),
                                                      m.register_forward_hook(leave))]
        with warnings.catch_warnings(record=True) as caught_here:
            warnings.simplefilter("always")
            caught = caught_here
            trainer.gradients(params, stacked, labels, weight)
    except Exception as err:  # noqa: BLE001 - any failure of the dry run is the answer
        where = _label(*running[-1][:2]) if running else "the loss"
        return (f"{where} cannot run vectorized ({error_line(err)}); use "
                f"{vectorizing('off')}"), 0, None
    finally:
        for hook in hooks:
            hook.remove()
        model.train(was_training)
        torch.set_rng_state(generator_state)
        changed = [name for name, b in model.named_buffers()
                   if not torch.equal(b, buffers[name])]
        with torch.no_grad():
            for name, b in model.named_buffers():
                b.copy_(buffers[name])
    if changed:
        owner = changed[0].rpartition(".")[0]
        module = model.get_submodule(owner)
        return (f"{_label(owner, module)} writes its buffer {changed[0]!r} in forward: "
                f"stacked clients would share one copy; use {vectorizing('off')}"), 0, None
    estimate = outputs[0] * ACTIVATION_FACTOR + kept[0]
    if device.type == "cuda":   # measured, where the dry run set a new peak: its two
        peak = torch.cuda.max_memory_allocated(device)   # clients' transient memory
        if peak > peak_before:
            estimate = max(estimate, (peak - before) // 2)
    return None, estimate, slow[0] if slow else None


def _label(name: str, module: nn.Module) -> str:
    where = f"module {name!r}" if name else "the model"
    return f"{where} ({type(module).__name__})"
