"""Training and evaluation of convolutional networks in channels-last memory format on CPU.

PyTorch's CPU kernels for convolution and max-pooling are much faster on channels-last
(NHWC) tensors than on the default NCHW: a training step of the classic MNIST CNN takes
6.2 instead of 11 ms at batch 64 and 3.6 instead of 4.9 ms at batch 32, and it evaluates
5,000 images in 0.26 s instead of 0.39 s (one thread), with the same predictions.

A model that only this worker trains -- the caller's model under ``single`` (handed back in
its own layout after every round), the replicas of sync and ddp over shared memory, fedavg's
client model -- trains in channels-last itself (:class:`ChannelsLastTraining`).
Its values still travel in the usual order: the collectives and the copies into the shared
model use ``copy_`` and ``reshape``, which follow the logical layout. A model whose tensors
other workers share (hogwild's parameters, views into shared memory) cannot change layout,
nor can one inside torch's ``DistributedDataParallel`` (its gradient buckets follow the
layout it was built with); for evaluation a channels-last twin of such a model takes its
parameters and buffers, by name, before each evaluation (a copy of a few thousand to a few
million numbers, against thousands of forward passes). Only those are refreshed: a model
with forward hooks, or that cannot be deep-copied, is evaluated as it is.

Not every network runs in channels-last: ``x.view(-1, n)`` after a convolution needs NCHW.
Such a model fails on its first channels-last batch and goes back to NCHW (trains, or is
evaluated, as it is from then on); an error after channels-last has worked once is the
model's own and is raised.
"""

from __future__ import annotations

import copy

import torch
import torch.nn as nn

from ..models import model_bytes

#: Larger models are evaluated as they are: the twin is a second copy of the parameters
#: in every worker.
MAX_TWIN_BYTES = 64 * 2**20


class _FirstBatchProbe:
    """Whether a network runs in channels-last, learnt from its first batch.

    ``run`` gives ``module``'s output for ``inputs`` in channels-last, or None: for inputs
    that are not images, and from the moment the network has failed before ever working
    (it needs NCHW; ``usable`` turns False). After one batch has worked, errors are the
    model's own and are raised.

    A network that fails in train mode may already have drawn dropout masks and updated
    BatchNorm statistics before the failing line: until a batch has worked, the module's
    buffers and the random generator are put back as they were, so that the batch's rerun
    in NCHW is the only pass that counts (what a run without the probe would do).
    """

    def __init__(self):
        self.usable = True
        self._proven = False

    def run(self, module: nn.Module, inputs: torch.Tensor):
        if not self.usable or not isinstance(inputs, torch.Tensor) or inputs.dim() != 4:
            return None
        if self._proven:
            return module(_channels_last(inputs))
        buffers = [(buffer, buffer.clone()) for buffer in module.buffers()]
        rng_state = torch.get_rng_state()
        try:
            output = module(_channels_last(inputs))
        except RuntimeError:
            with torch.no_grad():
                for buffer, before in buffers:
                    buffer.copy_(before)
            torch.set_rng_state(rng_state)
            self.usable = False
            return None
        self._proven = True
        return output


def _channels_last(inputs: torch.Tensor) -> torch.Tensor:
    return inputs.contiguous(memory_format=torch.channels_last) if inputs.dim() == 4 \
        else inputs


def _already_channels_last(model: nn.Module) -> bool:
    """Whether a 4-d parameter is laid out channels-last and not NCHW (with one input
    channel the two layouts coincide, which says nothing)."""
    return any(p.dim() == 4 and p.is_contiguous(memory_format=torch.channels_last)
               and not p.is_contiguous() for p in model.parameters())


def _convolutional_without_hooks(model: nn.Module) -> bool:
    hooked = any(m._forward_hooks or m._forward_pre_hooks for m in model.modules())
    return not hooked and any(isinstance(m, nn.Conv2d) for m in model.modules())


def already_channels_last(model: nn.Module) -> bool:
    """Whether ``model``'s parameters are laid out channels-last (see ``hogwild``)."""
    return _already_channels_last(model)


def forward_in_its_layout(model: nn.Module):
    """``model``'s forward, fed channels-last images when its parameters are channels-last
    (a shared model laid out so before the workers started), else ``model`` itself."""
    if _already_channels_last(model):
        return lambda inputs: model(_channels_last(inputs))
    return model


@torch.no_grad()
def lay_out_shared_model(model: nn.Module, sample: torch.Tensor) -> bool:
    """Lay a shared CPU model out in channels-last before workers start, when it is a
    convolutional network without hooks that runs so on ``sample`` (a batch of inputs);
    the new tensors are put in shared memory again. True when it was changed.

    Every worker then trains the one shared copy in the fast layout; a worker cannot change
    the layout of parameters other processes share (a new layout is a new, private copy).
    The probe runs in eval mode under a forked RNG: it changes no buffer and draws nothing.
    """
    if not isinstance(sample, torch.Tensor) or sample.dim() != 4 \
            or _already_channels_last(model) \
            or not _convolutional_without_hooks(model) \
            or torch.__future__.get_overwrite_module_params_on_conversion():
        return False
    was_training = model.training
    model.to(memory_format=torch.channels_last)   # same Parameter objects, new tensors
    model.eval()
    try:
        with torch.random.fork_rng(devices=[]):
            model(_channels_last(sample))
        laid_out = True
    except Exception:  # noqa: BLE001 -- a network that needs NCHW trains as it is
        model.to(memory_format=torch.contiguous_format)
        laid_out = False
    finally:
        model.train(was_training)
        model.share_memory()
    return laid_out


def hand_back_layout(model: nn.Module) -> None:
    """The caller's model back in the usual layout after :func:`lay_out_shared_model`."""
    model.to(memory_format=torch.contiguous_format)


class ChannelsLastTraining:
    """Trains a worker's private convolutional model in channels-last on CPU.

    ``forward(inputs)`` replaces ``model(inputs)``. A network that needs NCHW fails on its
    first batch; its buffers and the random generator are restored, the model goes back to
    NCHW and that batch runs again, so nothing was trained or drawn in between. After one
    batch has worked, errors are the model's own.
    """

    def __init__(self, model: nn.Module, device: torch.device):
        self.model = model
        # With torch's "overwrite module params on conversion" future flag, Module.to makes
        # new Parameters: the optimizer, built once, would go on stepping the old ones.
        self.active = device.type == "cpu" and _convolutional_without_hooks(model) \
            and not torch.__future__.get_overwrite_module_params_on_conversion()
        self._came_channels_last = _already_channels_last(model)
        self._probe = _FirstBatchProbe()
        self.resume()

    def resume(self) -> None:
        """Lay the model out in channels-last (again, after :meth:`hand_back`)."""
        if self.active:
            self.model.to(memory_format=torch.channels_last)   # same Parameter objects

    def hand_back(self) -> None:
        """Give the model back in the layout it came in: the caller's own model (``single``
        trains it in place) must not come back from training in another layout."""
        if self.active and not self._came_channels_last:
            self.model.to(memory_format=torch.contiguous_format)

    def forward(self, inputs: torch.Tensor) -> torch.Tensor:
        if self.active:
            output = self._probe.run(self.model, inputs)
            if output is not None:
                return output
            if not self._probe.usable:   # this network needs NCHW
                self.active = False
                self.model.to(memory_format=torch.contiguous_format)
        return self.model(inputs)


class ChannelsLastEvaluation:
    """One per worker: ``forward_for(model)`` gives the function to evaluate ``model``
    with for this evaluation (the twin's channels-last forward, or the model itself)."""

    def __init__(self, device: torch.device):
        self._usable = device.type == "cpu"
        self._probe = _FirstBatchProbe()
        self._source: nn.Module | None = None
        self._twin: nn.Module | None = None

    def forward_for(self, model: nn.Module):
        # A compiled model (``engine.compiling``: its own ``forward`` on the instance) is
        # evaluated as it is: a deep-copied twin would call the original's compiled forward.
        if not self._usable or "forward" in vars(model):
            return model
        if _already_channels_last(model):
            # It trains in that layout (ChannelsLastTraining): no twin to copy it into.
            return lambda inputs: model(_channels_last(inputs))
        state = model.state_dict()
        if model is not self._source or not self._fits(state):
            self._build(model)
            if not self._usable:
                return model
        # By name, every time: a module may have put a new tensor in a buffer since.
        self._twin.load_state_dict(state)
        self._twin.train(model.training)
        return self._forward

    def _fits(self, state: dict) -> bool:
        """Whether the twin has the same tensors by name and shape (a module may have
        added a buffer, or resized one, since the twin was made)."""
        mine = self._twin.state_dict()
        return mine.keys() == state.keys() and all(
            getattr(mine[key], "shape", None) == getattr(value, "shape", None)
            for key, value in state.items())

    def _build(self, model: nn.Module) -> None:
        """A twin of ``model`` in channels-last, or ``_usable`` False when there can be
        none: no convolution, too big, hooks (they would run on a copy of their owner, or
        not at all), a model that cannot be copied or has tensors of another rank."""
        self._source, self._twin, self._probe = model, None, _FirstBatchProbe()
        if model_bytes(model) > MAX_TWIN_BYTES or not _convolutional_without_hooks(model):
            self._usable = False
            return
        try:
            twin = copy.deepcopy(model)
            twin.to(memory_format=torch.channels_last)
        except Exception:  # noqa: BLE001 -- such a model is evaluated as it is
            self._usable = False
            return
        for param in twin.parameters():
            param.grad = None
            param.requires_grad_(False)
        self._twin = twin

    def _forward(self, inputs: torch.Tensor) -> torch.Tensor:
        output = self._probe.run(self._twin, inputs) if self._usable else None
        if output is not None:
            return output
        self._usable = self._probe.usable   # False: this network needs NCHW
        return self._source(inputs)
