"""The global model on the whole training set (``--eval-train``): the training loss FedProx's
paper plots -- f(w) over every device's data, not the clients' running loss while they train
(``train_loss``), which is measured on moving local models and only on the round's sample.

Each rank scores its contiguous slice of the training set after the server step; the parent
adds the slices (``train_eval_row``)."""

from __future__ import annotations

from ...data.sharding import eval_shard
from ...data.sources import CLASSIFICATION
from ...engine.evaluation import every_nth
from ...engine.task import evaluate


def due(config, round_index: int) -> bool:
    """Whether round ``round_index`` (0-based) scores the training set: with the test set."""
    return config.fedavg.eval_train and every_nth(round_index, config.eval_every,
                                                  round_index + 1 == config.fedavg.rounds)


def on_training_set(config, setup, trainer) -> dict:
    """This rank's share: the loss sum, correct count and count over its slice."""
    group = setup.group
    indices = eval_shard(len(setup.data.train), group.world_size, group.rank)
    loss_sum, correct, count = evaluate(trainer.model, trainer.feed, indices,
                                        setup.data.task, config.eval_batch_size,
                                        setup.device, beat=setup.progress.beat,
                                        precision=config.precision)
    share = {"train_eval_loss_sum": loss_sum, "train_eval_count": count}
    if setup.data.task == CLASSIFICATION:
        share["train_eval_correct"] = correct
    return share


def train_eval_row(extras: list[dict]) -> dict:
    """The round's ``train_eval_loss`` (and for classification ``train_eval_accuracy``)
    from every rank's share; nothing when the round did not score the training set."""
    count = sum(e.get("train_eval_count", 0) for e in extras)
    if not count:
        return {}
    row = {"train_eval_loss": sum(e["train_eval_loss_sum"] for e in extras) / count}
    if "train_eval_correct" in extras[0]:
        row["train_eval_accuracy"] = sum(e["train_eval_correct"] for e in extras) / count
    return row
