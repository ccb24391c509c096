"""What each built-in data set recommends when the user does not say: its training recipe,
known by name without loading a sample (and without torch), so that the settings are
resolved -- and refused -- before any data is built, and ``--help`` shows what will run."""

from __future__ import annotations

from .defaults import TrainingDefaults

# Adam with a high rate halved every epoch, parameters averaged every step: chosen so that
# `sync` with 4 workers reaches 97% on MNIST after one epoch (SGD 0.01 with momentum 0.5,
# averaged once per epoch, reaches ~85%). See benchmarks/results/notebook-2026-11-22.md.
MNIST_DEFAULTS = TrainingDefaults(epochs=3, batch_size=64, lr=0.006, momentum=0.9,
                                  optimizer="adam", lr_decay=0.5, sync_every=1)

# 1,438 training digits make small clients: 20 of ~72 samples, 5 per round, two local
# epochs of batch 10 with momentum reach ~97-99% in 20 rounds (2 workers, a few seconds).
DIGITS_FEDERATED = {"rounds": 20, "clients": 20, "clients_per_round": 5, "batch_size": 10,
                    "lr": 0.05, "momentum": 0.9, "optimizer": "sgd", "lr_decay": 1.0,
                    "local_epochs": 2}

DIGITS_DEFAULTS = TrainingDefaults(epochs=10, batch_size=32, lr=0.05, momentum=0.9,
                                   optimizer="sgd", federated=DIGITS_FEDERATED)

# 80 training points: the generic 100 clients would outnumber them. 8 clients of 10
# points, 4 a round, each doing 5 local epochs of batch 5 -- the centralised recipe's rate.
LINREG_FEDERATED = {"rounds": 20, "clients": 8, "clients_per_round": 4, "batch_size": 5,
                    "lr": 0.005, "momentum": 0.9, "optimizer": "sgd", "lr_decay": 1.0,
                    "local_epochs": 5}

LINREG_DEFAULTS = TrainingDefaults(epochs=100, batch_size=10, lr=0.005, momentum=0.9,
                                   optimizer="sgd", federated=LINREG_FEDERATED)

#: Your own data (``--data module:factory``, ``fit()``): the generic recipe.
GENERIC_DEFAULTS = TrainingDefaults()

RECIPES = {"digits": DIGITS_DEFAULTS, "digits-60k": MNIST_DEFAULTS,
           "linreg": LINREG_DEFAULTS, "mnist": MNIST_DEFAULTS}


def recipe_for(data: str | None) -> TrainingDefaults:
    """The recipe of data set ``data`` (a built-in name; natural data's before it is read;
    else the generic one: a user's factory or an unknown name, which loading the data
    refuses)."""
    natural = _natural_recipe(data or "")
    return natural if natural is not None else RECIPES.get(data or "digits", GENERIC_DEFAULTS)


def _natural_recipe(data: str) -> TrainingDefaults | None:
    """``synthetic:A,B``'s recipe (its devices are --clients, 30 by default); a LEAF folder's
    or a Hub set's with a stand-in client count, until the data is read and says (the
    settings are then resolved again with the data's own recipe)."""
    from .natural.recipes import SYNTHETIC_DEVICES, UNKNOWN_CLIENTS, natural_recipe

    if data.startswith("synthetic:") or data == "synthetic-iid":
        return natural_recipe("synthetic", SYNTHETIC_DEVICES)
    if data.startswith(("leaf:", "hf:")):
        return natural_recipe(None, UNKNOWN_CLIENTS)
    return None
