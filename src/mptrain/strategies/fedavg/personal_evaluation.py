"""The personalized models on each client's own data (``--personalize``), scored beside the
global model by ``client_evaluation``: the same clients, the same rows, the same feed.

A client's personalized model is the global model with its personal state put back
(FedPer, FedRep, FedBN: its layers; Ditto: its whole model; a client never trained has
none and is scored with the global model), or -- ``finetune:STEPS`` -- the global model after
STEPS local steps on the client's own training samples, seeded by (seed, round, client) so
that any worker gets the same bits. The global model is loaded back afterwards: nothing
here changes what the server holds.
"""

from __future__ import annotations

from ...federated.client_accuracy import ClientScores, client_scores
from ...federated.personal.local import personal_seed, run_local_steps
from .personal_setup import spec_of


def personal_evaluation(config, shared, setup, trainer):
    """The run's ``PersonalEvaluation``, or None without --personalize."""
    spec = spec_of(config)
    return None if spec is None else PersonalEvaluation(config, shared, setup, trainer, spec)


class PersonalEvaluation:
    """One rank's scoring of its clients' personalized models."""

    def __init__(self, config, shared, setup, trainer, spec):
        self.config, self.shared, self.setup, self.trainer = config, shared, setup, trainer
        self.spec = spec

    def scores(self, clients: list[int], feed, offsets, index, round_index: int) -> dict:
        """``clients``' personalized scores on the rows ``client_evaluation`` scores the
        global model on, as a report's lists; with how many of them had personal state."""
        c, trainer = self.config, self.trainer
        parts, personalized = [], 0
        for client in clients:
            personalized += self._personalize(client, round_index)
            parts.append(client_scores(trainer.model, feed, offsets, [client],
                                       c.eval_batch_size, self.setup.device, c.precision,
                                       index=index, beat=self.setup.progress.beat))
        trainer.load_global()
        lists = ClientScores.joined(parts).as_lists()
        lists["personalized"] = personalized
        return lists

    def _personalize(self, client: int, round_index: int) -> bool:
        """Make the trainer's model ``client``'s personalized model; whether it differs
        from the global one."""
        c, trainer = self.config, self.trainer
        trainer.load_global()
        if self.spec.method != "finetune":
            return trainer.load_personal(client)
        trainer.optimizer.state.clear()
        for group in trainer.optimizer.param_groups:
            group["lr"] = trainer.client_lr(round_index)
        trainer.model.train()
        steps, _ = run_local_steps(
            trainer.forward, trainer.optimizer, trainer.feed, self.shared.client_indices(client),
            c.batch_size, self.setup.data.task,
            personal_seed(c.seed, round_index, client, "finetune"), self.setup.device,
            steps=self.spec.steps, beat=self.setup.progress.beat, transform=trainer.transform)
        return steps > 0
