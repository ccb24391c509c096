"""The global model on each client's own data (``--client-eval-every``).

Which data: a natural client's own *test* split where the data has one (LEAF's, FedProx's
devices, a Hub set's test split cut by the same client column); otherwise -- pooled data cut
by ``--partition`` has no per-client test split -- the client's training rows, as before.
Which clients: every client, each rank a slice of them; or, where the devices are
generated on demand (``data.natural.on_demand``), the round's sampled clients, each scored
by the rank that trained it, so a round touches only those. Both client paths score the
same way (``federated.client_accuracy``: batches across clients). Each rank returns its
clients' scores in its round report; the parent joins them (``report``) -- no shared table,
so it works under torchrun as with mptrain's own workers.
"""

from __future__ import annotations

from ...data.device_feed import feed_for
from ...data.sources import CLASSIFICATION
from ...engine.evaluation import every_nth
from ...errors import UserError
from ...errors import setting_name as named   # as the caller spelled the setting
from ...federated.aggregate import column_slice
from ...federated.client_accuracy import client_scores
from .personal_evaluation import personal_evaluation

#: What each split's scores are called in the summary and the banner.
TEST_SPLIT, TRAIN_SPLIT = "test", "train"


def evaluation_split(data, partition: str) -> str:
    """``test`` where each client has its own test split (natural clients with one), else
    ``train``."""
    natural = getattr(data, "clients", None)
    return TEST_SPLIT if partition == "natural" and natural is not None \
        and natural.test_offsets is not None else TRAIN_SPLIT


def check_client_evaluation(config, data, strategy) -> None:
    """Refuse --client-eval-every where it would score nothing: per-client accuracy needs
    classes, and on regression data no round was due (``due``) while the banner promised
    client_metrics.jsonl rows. A checkpoint's own value resumes (``Strategy.inherited``)."""
    every = config.fedavg.client_eval_every
    if every and data is not None and data.task != CLASSIFICATION \
            and not strategy.inherited("client_eval_every", every):
        raise UserError(f"{named('client_eval_every')} scores each client's accuracy on its "
                        "own data, which needs a classifier; this data set is regression "
                        f"(float targets): leave {named('client_eval_every')} out")


def scores_only_sampled(data) -> bool:
    """Whether a round scores only its sampled clients (devices generated on demand)."""
    return bool(getattr(data.train, "on_demand", False))


class ClientEvaluation:
    """One rank's per-client evaluation: which rows, which clients, through which feed."""

    def __init__(self, config, shared, setup, trainer):
        self.config, self.shared, self.setup, self.trainer = config, shared, setup, trainer
        self.split = evaluation_split(setup.data, config.fedavg.partition)
        self.only_sampled = scores_only_sampled(setup.data)
        self._test_feed = None   # made at the first evaluation: a GPU copy only if asked
        #: --personalize: each client's own model, scored on the same rows.
        self.personal = personal_evaluation(config, shared, setup, trainer)

    def due(self, round_index: int) -> bool:
        f = self.config.fedavg
        return bool(f.client_eval_rounds) and self.setup.data.task == CLASSIFICATION and \
            every_nth(round_index, f.client_eval_rounds, round_index + 1 == f.rounds)

    def run(self, mine: list[int], round_index: int) -> dict:
        """This rank's clients scored, as its report's ``client_scores`` (and with
        --personalize its ``personal_scores``); ``mine``: the round's clients this rank
        trained (scored when only sampled clients are)."""
        c, setup, group = self.config, self.setup, self.setup.group
        if self.only_sampled:
            clients = list(mine)
        else:
            part = column_slice(c.fedavg.clients, group.world_size, group.rank)
            clients = list(range(part.start, part.stop))
        if self.split == TEST_SPLIT:
            natural = setup.data.clients
            feed, offsets, index = self._feed_of_test(natural), natural.test_offsets, None
        else:
            feed, offsets = self.trainer.feed, self.shared.client_offsets
            index = self.shared.client_index
        scores = client_scores(self.trainer.model, feed, offsets, clients,
                               c.eval_batch_size, setup.device, c.precision, index=index,
                               beat=setup.progress.beat)
        if self.personal is None:
            return {"client_scores": scores.as_lists()}
        return {"client_scores": scores.as_lists(),
                "personal_scores": self.personal.scores(clients, feed, offsets, index,
                                                        round_index)}

    def _feed_of_test(self, natural):
        if self._test_feed is None:
            # Natural clients' test offsets index the bundle's test set, or an on-demand
            # source's own test split of every device.
            data = natural.test_data if natural.test_data is not None else self.setup.data.test
            self._test_feed = feed_for(data, self.setup.device,
                                       self.setup.group.world_size)
        return self._test_feed
