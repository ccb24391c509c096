"""Built-in models by name, and user models from import strings."""

from __future__ import annotations

import math

import torch
import torch.nn as nn

from ..errors import UserError, did_you_mean
from ..imports import call_factory, colon_hint, is_import_string
from .nets import MLP, DigitsCNN, FedAvgCNN, Mnist2NN, MnistCNN

BUILTIN_MODELS = ("digits-cnn", "mnist-cnn", "mnist-2nn", "mnist-cnn-fedavg", "linear", "mlp",
                  "leaf-femnist-cnn", "leaf-shakespeare-lstm", "mclr", "resnet18-gn")


def model_bytes(model: nn.Module) -> int:
    """Bytes of ``model``'s parameters and buffers: what a copy of it, or its place in
    shared memory, costs."""
    return sum(t.numel() * t.element_size()
               for t in list(model.parameters()) + list(model.buffers()))


def build_model(name: str, input_shape: tuple, output_size: int, seed: int = 0) -> nn.Module:
    """Build the model ``name`` (a built-in or ``module:factory``) for the given data shape.

    Initialisation is seeded (torch seeds every new process at random), so ``--seed``
    decides the initial weights too.
    """
    torch.manual_seed(seed)
    if is_import_string(name):
        model = call_factory(name, "--model")
        if not isinstance(model, nn.Module):
            raise UserError(f"--model {name!r} returned {type(model).__name__}, not a "
                            "torch.nn.Module; the factory must return the model")
        return model
    in_features = math.prod(input_shape)
    if name == "digits-cnn":
        _require_shape(name, input_shape, (1, 8, 8))
        return DigitsCNN(output_size)
    if name == "mnist-cnn":
        _require_shape(name, input_shape, (1, 28, 28))
        if output_size != 10:
            raise UserError("model 'mnist-cnn' has 10 outputs but the data has "
                            f"{output_size} classes; use --model mlp or your own model")
        return MnistCNN()
    if name == "mnist-2nn":
        return Mnist2NN(in_features, output_size)
    if name == "mnist-cnn-fedavg":
        _require_shape(name, input_shape, (1, 28, 28))
        return FedAvgCNN(output_size)
    if name == "linear":
        return nn.Sequential(nn.Flatten(), nn.Linear(in_features, output_size)) \
            if len(input_shape) > 1 else nn.Linear(in_features, output_size)
    if name == "mlp":
        return MLP(in_features, output_size)
    published = _published(name, tuple(input_shape), in_features, output_size)
    if published is not None:
        return published
    hint = colon_hint(name) or did_you_mean(name, BUILTIN_MODELS)
    raise UserError(f"unknown model {name!r}{hint}; choose one of: {', '.join(BUILTIN_MODELS)}, "
                    "or give an import string 'package.module:make_model'")


def _published(name: str, input_shape: tuple, in_features: int, output_size: int):
    """The federated benchmarks' models (``models.federated_nets``), or None."""
    from . import federated_nets as nets

    if name == "leaf-femnist-cnn":
        _require_shape(name, input_shape, (1, 28, 28))
        return nets.LeafFemnistCNN(output_size)
    if name == "leaf-shakespeare-lstm":
        if len(input_shape) != 1:
            raise UserError(f"model {name!r} reads sequences of character indices (shape "
                            f"(length,)), but the data has {input_shape}; use --data leaf:DIR "
                            "with LEAF's Shakespeare, or another model")
        return nets.LeafShakespeareLSTM(max(nets.LEAF_VOCABULARY, output_size), output_size)
    if name == "mclr":
        return nets.MultinomialLogisticRegression(in_features, output_size)
    if name == "resnet18-gn":
        if len(input_shape) != 3 or input_shape[1:] != (32, 32):
            raise UserError(f"model {name!r} expects 32x32 images (channels, 32, 32) but the "
                            f"data has {input_shape}; use --model mlp or your own model")
        return nets.ResNet18GN(input_shape[0], output_size)
    return None


def _require_shape(name, actual, expected):
    if tuple(actual) != expected:
        raise UserError(f"model {name!r} expects inputs of shape {expected} but the data "
                        f"has {tuple(actual)}; use --model mlp or your own model")
