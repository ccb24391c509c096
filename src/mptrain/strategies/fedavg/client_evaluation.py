"""The global model on every client's own data (``--client-eval-every``): each rank scores
a run of clients -- one at a time, or stacked when the clients train stacked -- and rank 0
summarises after a barrier."""

from __future__ import annotations

from ...data.sources import CLASSIFICATION
from ...engine.task import evaluate
from ...federated.aggregate import column_slice
from ...federated.client_stats import summarize
from ...federated.client_accuracy import client_accuracies


def evaluate_clients(config, shared, setup, trainer, stacked: bool) -> dict:
    """Each client's accuracy into ``shared.client_accuracy``; rank 0 returns the summary
    (mean, std, 10th percentile, worst), the other ranks nothing."""
    group, c = setup.group, config
    if setup.data.task != CLASSIFICATION:
        return {}
    mine = column_slice(c.fedavg.clients, group.world_size, group.rank)
    if stacked:
        shared.client_accuracy[mine] = client_accuracies(
            trainer.model, trainer.feed, shared.client_index, shared.client_offsets,
            range(mine.start, mine.stop), c.eval_batch_size, setup.device, c.precision,
            beat=setup.progress.beat)
    else:
        for client in range(mine.start, mine.stop):
            _, correct, count = evaluate(trainer.model, trainer.feed,
                                         shared.client_indices(client), setup.data.task,
                                         c.eval_batch_size, setup.device,
                                         beat=setup.progress.beat, precision=c.precision)
            shared.client_accuracy[client] = correct / count if count else float("nan")
    group.barrier()
    return summarize(shared.client_accuracy) if group.rank == 0 else {}
