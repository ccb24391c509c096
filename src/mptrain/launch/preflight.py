"""Checks made in the parent before any worker starts: a mistake found here is one clear
line, not a traceback from every worker."""

from __future__ import annotations

import pickle
import sys
from pathlib import Path

import psutil
import torch
import torch.nn as nn

from ..config import TrainConfig
from ..data.batch_transform import resolve_transform
from ..data.ragged import resolve_collate
from ..data.sources import CLASSIFICATION, DataBundle
from ..errors import UserError, error_line
from ..errors import setting_name as named   # as the caller spelled the setting
from ..imports import load_object, unimportable_where
from ..report.words import count

_SPAWN_REIMPORTS = ("mptrain started worker processes with the 'spawn' start method, which "
                    "re-imports your main script in every worker")
_PUT_UNDER_GUARD = ("put the training call under `if __name__ == \"__main__\":` (see the Python "
                    "multiprocessing docs, 'Safe importing of main module')")
#: A spawn'd worker re-imported the script and the script called mptrain again.
GUARD_HELP = (f"{_SPAWN_REIMPORTS}, and the script called mptrain again while being "
              f"imported; {_PUT_UNDER_GUARD}")
#: Before any worker starts: the script has no guard at all.
NO_GUARD_HELP = (f"{_SPAWN_REIMPORTS}: a script without a main guard would train again in each "
                 f"worker; {_PUT_UNDER_GUARD}")


def check_device(device: str) -> None:
    """Refuse ``--device cuda`` where no GPU is visible (NVML: CUDA stays uninitialised)."""
    if device == "cuda" and torch.cuda.device_count() == 0:
        raise UserError(f"{named('device')} cuda was asked for but no CUDA device is "
                        f"visible; use {named('device')} cpu")


def check_model_trains(model: nn.Module) -> None:
    """A model with nothing to train fails in every worker's first backward pass (one
    traceback per worker, or per client under fedavg): a user's mistake, said once here."""
    params = list(model.parameters())
    if not params:
        raise UserError(f"the model ({type(model).__name__}) has no parameters: there is "
                        "nothing to train")
    if not any(p.requires_grad for p in params):
        raise UserError(f"every parameter of the model ({type(model).__name__}, "
                        f"{len(params)} tensors) has requires_grad=False: nothing would train; "
                        "unfreeze the layers to train (param.requires_grad_(True))")


def check_model_fits_data(model: nn.Module, bundle: DataBundle) -> None:
    """Run two samples through the model in the parent: a shape mismatch is a user error
    to report now, not a traceback from every worker later."""
    was_training = model.training
    model.eval()
    try:
        with torch.no_grad():
            try:
                output = model(bundle.train.head(2))
            except Exception as err:
                raise UserError(f"the model cannot take the data's inputs of shape "
                                f"{tuple(bundle.input_shape)}: {error_line(err)}") from None
            if bundle.test is not None and isinstance(output, torch.Tensor):
                _check_test_inputs(model, bundle, output)
    finally:
        model.train(was_training)
    if not isinstance(output, torch.Tensor):
        raise UserError(f"the model returned {type(output).__name__}; it must return a tensor")
    if bundle.task == CLASSIFICATION and (output.dim() != 2
                                          or output.shape[1] < bundle.output_size):
        raise UserError(f"the model's output has shape {tuple(output.shape)} but the data has "
                        f"{bundle.output_size} classes; it must return [batch, classes]")
    samples = min(2, len(bundle.train))
    if bundle.task != CLASSIFICATION and (output.dim() == 0 or output.shape[0] != samples
                                          or output.numel() != samples * bundle.output_size):
        # The loss views each batch's targets as the output: the counts must agree.
        raise UserError(f"the model's output for {samples} samples has shape "
                        f"{tuple(output.shape)} but each target has {bundle.output_size} "
                        f"value(s); it must return [batch, {bundle.output_size}]"
                        + _classes_as_floats(bundle, output))


def no_test_accuracy(bundle: DataBundle) -> str | None:
    """Why ``bundle`` gives no test accuracy to reach (none where it does): what a target
    accuracy (``--target-accuracy``, the bench's ``--time-to-accuracy``) needs."""
    if bundle.test is None:
        return "there is no test set to score (give one)"
    if bundle.task != CLASSIFICATION:
        return "a regression run (float targets) has none: it is scored by its test mse"
    return None


def check_target_accuracy(config: TrainConfig, bundle: DataBundle, strategy=None) -> None:
    """A target accuracy is a test accuracy to stop at: with no test set, or regression
    data, none is ever measured, and the run trained to its end before saying the target
    was not reached."""
    if config.target_accuracy is None or (
            strategy is not None and strategy.inherited("target_accuracy",
                                                        config.target_accuracy)):
        return
    why = no_test_accuracy(bundle)
    if why is not None:
        raise UserError(f"{named('target_accuracy')} stops the run at a test accuracy, but "
                        f"{why}; leave {named('target_accuracy')} out")


def _classes_as_floats(bundle: DataBundle, output: torch.Tensor) -> str:
    """Advice where float targets that are whole numbers (``y.float()`` of class labels)
    met a model with a column per class: float targets mean regression, and the model's
    shape was right for the classifier the user meant."""
    data = bundle.train
    if output.dim() != 2 or output.shape[1] < 2 or not data.built \
            or not data.targets.is_floating_point() or data.targets.numel() == 0:
        return ""
    targets = data.targets
    if not bool(torch.isfinite(targets).all()) or not bool((targets == targets.round()).all()):
        return ""
    return ("; float targets mean regression: for classes give integer targets "
            "(y.long())")


def _check_test_inputs(model: nn.Module, bundle: DataBundle, output: torch.Tensor) -> None:
    """The test set's inputs through the model (in eval mode, without gradients): not their
    shape against the training data's -- a model with a global pool takes images of any
    size -- but whether the model takes them and answers them as it answers the training
    data (a traceback from the first evaluation, after a whole epoch, or a score over
    outputs of another meaning)."""
    test_shape = tuple(bundle.test.input_shape)
    try:
        scored = model(bundle.test.head(2))
    except Exception as err:
        raise UserError(f"the model cannot take the test data's inputs of shape {test_shape} "
                        f"(the training data's are {tuple(bundle.input_shape)}): "
                        f"{error_line(err)}") from None
    if not isinstance(scored, torch.Tensor) or scored.shape[1:] != output.shape[1:]:
        shape = tuple(scored.shape) if isinstance(scored, torch.Tensor) \
            else type(scored).__name__
        raise UserError(f"the model's output for the test data has shape {shape} but "
                        f"{tuple(output.shape)} for the training data; give both sets "
                        "inputs that the model takes alike")


def check_workload(config: TrainConfig, bundle: DataBundle, workers: int,
                   cores: int, model: nn.Module | None = None,
                   local_workers: int | None = None, processes: int | None = None,
                   parameter_copies: int = 4, queued_batches: bool = False) -> list[str]:
    """Refuse impossible splits; return warnings for legal but surprising ones.

    ``workers`` split the data; ``local_workers`` of them (default: all) share this
    machine's ``cores`` and memory -- under torchrun, the ranks of this node. ``processes``:
    fewer worker processes than workers, whose ranks take turns in them (no time-sharing).
    ``model`` refines the memory check with what a worker holds of its own for it
    (``parameter_copies`` copies of its parameters -- replica, gradients, optimizer state --
    and one batch's activations); without it only the interpreter's share counts.
    ``queued_batches``: the workers take the epoch's batches from one queue (hogwild), so
    what must suffice is the number of batches, not a shard per worker.
    """
    samples = len(bundle.train)
    if workers > samples:
        raise UserError(f"{workers} workers for {samples} training samples: every worker "
                        f"needs at least one; use {named('workers')} {samples} or fewer")
    warnings = []
    shard = -(-samples // workers)
    if queued_batches:
        _check_batches_for_every_worker(samples, config.batch_size, workers)
    elif workers > 1 and config.batch_size > shard:
        most = (samples - 1) // (config.batch_size - 1)  # the most with ceil(s / w) >= batch
        # A batch larger than the whole set leaves no worker count to suggest.
        fewer = f"{named('workers')} {most} or fewer, or " if most >= 1 else ""
        raise UserError(f"{workers} workers leave each a shard of {shard} samples, less than "
                        f"one batch of {config.batch_size}; use {fewer}"
                        f"{named('batch_size')} {shard} or less")
    here = workers if local_workers is None else local_workers
    if here > cores:
        _check_memory(config, bundle, here, model, processes, parameter_copies)
    if here > 2 * cores and processes is None:   # ranks taking turns do not time-share
        warnings.append(f"{here} workers on {cores} usable cores: they time-share the "
                        f"cores with 1 thread each; expect no speed-up beyond {cores} workers")
    return warnings


def data_warnings(bundle: DataBundle) -> list[str]:
    """A warning naming the first sample that holds a NaN or an infinity (a missing value),
    in the user's data: a step on it has a non-finite loss, which stops the run as a
    divergence whose advice (a lower learning rate) cannot help. Not a refusal: fedavg
    drops a client whose update is non-finite, so a client with corrupt data is a case to
    simulate. The built-in sets (built from rows, not held yet) are finite."""
    frozen = [frozen_randomness_warning(what, data.varied_sample)
              for what, data in (("training", bundle.train), ("test", bundle.test))
              if data is not None and data.varied_sample is not None]
    return frozen + [f"{where}: a step on them has a non-finite loss; drop or fill those "
                     "samples" for where in non_finite_data(bundle)]


def non_finite_data(bundle: DataBundle, sets=("training", "test")) -> list[str]:
    """Where ``bundle``'s ``sets`` hold a NaN or an infinity: ``the training data's inputs
    hold NaN or infinite values (first in sample 3)``, one line per tensor."""
    from ..data.shared import first_non_finite

    found = []
    for what, data in (("training", bundle.train), ("test", bundle.test)):
        if what not in sets or data is None or not data.built:
            continue
        for part, tensor in (("inputs", data.inputs), ("targets", data.targets)):
            first = first_non_finite(tensor)
            if first is not None:
                found.append(f"the {what} data's {part} hold NaN or infinite values "
                             f"(first in sample {first})")
    return found


def frozen_randomness_warning(what: str, index: int) -> str:
    """A ``__getitem__`` that draws at random (augmentation) is read once: its draws are the
    data of every epoch. Fresh draws each batch are what per-batch transforms are for."""
    return (f"the {what} data's __getitem__ gave sample {index} other values when read "
            "again: its randomness (augmentation) is drawn once, when mptrain stacks the "
            "data before training, and every epoch sees the same draws; for fresh draws "
            f"each batch, move the augmentation into {named('transform')} (a function "
            f"(inputs, targets, generator) -> (inputs, targets) run on each training batch in "
            f"the workers) or use {named('augment')} crop:PAD,hflip,shift:PX")


def thread_warnings(requested: int | None, granted: int, processes: int,
                    cores: int) -> list[str]:
    """The line that says ``--threads-per-worker`` (``requested``; None: mptrain's budget
    of cores // workers) was capped at ``granted`` (``tuning.thread_cap``): more threads
    in ``processes`` than the machine has cores time-share them, and a step waits for its
    slowest thread (64 on 2 cores trained at 62 samples/s instead of ~1,300)."""
    if requested is None or granted >= requested:
        return []
    return [f"{named('threads_per_worker')} {requested} capped at {granted}: "
            f"{count(processes, 'process')} on {count(cores, 'usable core')}, and more "
            "threads than cores time-share them, slowing every step"]


def _check_batches_for_every_worker(samples: int, batch_size: int, workers: int) -> None:
    count = -(-samples // batch_size)
    if workers > count:
        largest = (samples - 1) // (workers - 1)   # the largest with ceil(s / b) >= workers
        raise UserError(f"{workers} workers share the epoch's {count} batch(es) of "
                        f"{batch_size}: {workers - count} would have nothing to train; use "
                        f"{named('workers')} {count} or fewer, or {named('batch_size')} "
                        f"{largest} or less")


# What a forked worker takes of its own before its model and batch: the pages of the
# interpreter and of torch it writes to (copy-on-write), its page tables and allocator.
# Measured (USS + page tables, torch 2.13, x86-64): 14 MiB per worker with a 5-parameter
# model, 21 and 25 MiB with the MNIST CNN at batch 32 and 64, which the estimate below
# (floor + 4 x parameters + 3 x saved activations) gives as 22 and 28.
WORKER_FLOOR_BYTES = 16 * 2**20
ACTIVATION_FACTOR = 3


def _check_memory(config: TrainConfig, bundle: DataBundle, workers: int,
                  model: nn.Module | None, processes: int | None = None,
                  parameter_copies: int = 4) -> None:
    """Many more workers than cores run out of memory before they run out of time: refuse
    a run whose workers cannot all fit in the memory available now. ``processes``: ranks
    take turns in that many processes, which hold the interpreter and one batch's
    activations once each; every rank still holds its own ``parameter_copies`` copies of
    the parameters (replica, gradients, optimizer state: what is not shared)."""
    per_process, per_rank = WORKER_FLOOR_BYTES, 0
    if model is not None:
        # The rank's own copies of the parameters (``parameter_copies``); the activations
        # autograd keeps for one batch, their gradients in the backward pass, and what the
        # allocator keeps of both.
        params = sum(p.numel() * p.element_size() for p in model.parameters())
        per_rank = parameter_copies * params
        per_process += ACTIVATION_FACTOR * _activation_bytes(model, bundle, config.batch_size)
    available = psutil.virtual_memory().available
    need = (processes or workers) * per_process + workers * per_rank
    # A process a worker: each more worker brings its own process; else only its state.
    most = available // (per_process + per_rank) if processes is None \
        else (available - processes * per_process) // max(per_rank, 1)
    if need > available:
        each = need / workers
        raise UserError(f"{workers} workers need about {need / 2**30:.1f} GiB "
                        f"({each / 2**20:.0f} MiB each) but {available / 2**30:.1f} GiB of "
                        f"memory is available; use {named('workers')} {max(1, most)} or fewer")


def _activation_bytes(model: nn.Module, bundle: DataBundle, batch_size: int) -> int:
    """Bytes autograd saves for the backward pass of one training batch (0 if the model
    cannot run here). The model's buffers and the random state are left as they were."""
    inputs = bundle.train.head(min(batch_size, len(bundle.train)))
    params = {p.data_ptr() for p in model.parameters()}
    saved = 0

    def pack(tensor):
        nonlocal saved
        if tensor.data_ptr() not in params:
            saved += tensor.numel() * tensor.element_size()
        return tensor

    buffers = [b.detach().clone() for b in model.buffers()]
    was_training = model.training
    model.train()
    try:
        with torch.random.fork_rng(devices=[]), \
                torch.autograd.graph.saved_tensors_hooks(pack, lambda tensor: tensor):
            output = model(inputs)
        saved += output.numel() * output.element_size()
    except Exception:  # noqa: BLE001 - an estimate; check_model_fits_data reports errors
        return 0
    finally:
        model.train(was_training)
        with torch.no_grad():
            for buffer, value in zip(model.buffers(), buffers):
                buffer.copy_(value)
    return saved


def check_functions_importable(config, why: str = "") -> None:
    """A spawn'd worker finds the user's ``--transform`` and ``--collate`` functions by
    name (``module:qualified_name``); refuse now, in one line, those it cannot import --
    a notebook's or the prompt's, a lambda, one defined inside another function -- as the
    model's class is refused: each worker failed with the same traceback instead.
    ``why``: the reason the workers are not forked, said with the fix."""
    because = f" (workers are not forked here: {why})" if why else ""
    for setting in ("transform", "collate"):
        name = getattr(config, setting, None)   # RL runs have neither
        if not name or ":" not in name:
            continue
        said = f"{named(setting)} {name!r}"
        where = unimportable_where(*name.split(":", 1))
        if where is not None:
            raise UserError(f"{said} is {where}, which spawn'd workers cannot "
                            f"import{because}; define it at the top level of a .py module "
                            "and import it")
        if _RESOLVERS[setting](name) is not load_object(name, named(setting)):
            # What a worker imports by the name is not what was given: a functools.partial
            # ("functools:partial"), a callable object (its class), a bound method.
            raise UserError(f"{said} names something else than the {setting} given (a "
                            f"functools.partial, a callable object or a bound method?), and "
                            f"spawn'd workers import it by that name{because}; give a "
                            "function defined at the top level of a .py module")


#: What a run takes for each setting's name: a function given from Python, or the import.
_RESOLVERS = {"transform": resolve_transform, "collate": resolve_collate}


def check_spawn_ready(model: nn.Module, why: str = "") -> None:
    """Spawn pickles the model to every worker and re-imports ``__main__``; check both now.
    ``why``: the reason the workers are not forked, said with the fix."""
    because = f" (workers are not forked here: {why})" if why else ""
    cls = type(model)
    where = unimportable_where(cls.__module__, cls.__qualname__)
    if where is not None:   # it pickles by reference, by a name no worker can import
        raise UserError(
            f"the model class {cls.__qualname__} is {where}, which spawn'd workers cannot "
            f"import{because}; define it at the top level of a .py module and import it")
    main = sys.modules.get("__main__")
    try:
        pickle.dumps(cls)
    except Exception:
        raise UserError(
            f"the model class {cls.__qualname__} cannot be pickled by reference, which "
            f"spawn'd workers need{because}; define it in an importable module, not in a "
            "notebook cell or inside a function") from None
    for name, module in model.named_modules():
        for attr, value in vars(module).items():
            if attr.startswith("_") or isinstance(value, (nn.Module,)):
                continue
            try:
                pickle.dumps(value)
            except Exception as err:
                where = f"{name}.{attr}" if name else attr
                raise UserError(f"model attribute {where!r} ({type(value).__name__}) cannot "
                                f"be pickled for spawn'd workers: {err}") from None
    main_file = getattr(main, "__file__", None)
    if main_file and main_file.endswith(".py") and Path(main_file).is_file():
        source = Path(main_file).read_text(errors="replace")
        if "__name__" not in source:
            raise UserError(NO_GUARD_HELP)
