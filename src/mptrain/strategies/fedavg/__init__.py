"""Federated averaging (McMahan et al. 2017) with many simulated clients on a few processes,
and the algorithms around it: FedProx, server optimizers (FedAvgM, FedAdam, FedYogi,
FedAdagrad), SCAFFOLD, unreliable clients, DP-FedAvg with an accountant, per-client
evaluation, personalization (FedPer, FedRep, FedBN, Ditto, fine-tuning).

Clients are not processes and not model copies: a client is an index slice of the one shared
data set. Every round the same seeded sample of clients is drawn on every worker; each worker
trains its share of them one after the other, reusing one model and one optimizer, and
writes each client's result into its row of a shared table. After a barrier every worker
aggregates one slice of the columns in client-id order and applies the server step to that
slice of the shared global parameters (a reduce-scatter through shared memory; the server
optimizer's state, SCAFFOLD's variates and the clip live in shared memory, sliced the same
way). So memory does not grow with the clients sampled, and the same seed gives the bitwise
same model whatever the number of workers (at the same threads per worker).

Where ranks do not share memory (torchrun across nodes) each rank averages its own clients
and the ranks combine the partial averages with the weighted-average collective instead: the
same maths, summed in a different order; a robust rule or an attack gathers the ranks'
rows to rank 0 instead (``gathered``: the same rule, the same bits); SCAFFOLD and DP need
the shared table and are refused there.

The parts, one line per file, in the order a run meets them:

- ``settings``: :class:`~.settings.FedAvgSettings`, fedavg's own section of the config
  (``TrainConfig.fedavg``), and what its settings stand for when left out;
- ``strategy``: the parent's side -- facts, what it prepares, what it reports;
- ``refusals``: every refusal of fedavg's, while the config is built and before the run
  starts;
- ``shared``: :class:`~.shared.FedAvgShared`, everything the workers share, as one value;
- ``worker``: one worker's round -- sample, train my clients, then the server step;
- ``clients``: ``ClientTrainer``, the one-client-at-a-time training of a worker's clients;
- ``cohorts``: the stacked path's glue: the parent's choice, the cohort size every rank
  agrees on, one cohort's training;
- ``tally``: what happened to a worker's clients in a round;
- ``server``: the server's step on my slice of the columns (``combine_updates``: the
  aggregation seam);
- ``robust_worker``: a worker's part of a robust rule and an attack, between its barriers;
- ``decision_cell``: a row-wise rule's decision, from rank 0 to the others in shared memory;
- ``gathered``: the round's rows gathered to rank 0 where ranks share no memory;
- ``client_evaluation``: the global model on each client's own data, its test split where
  it has one (``--client-eval-every``);
- ``client_metrics``: those scores joined, summarised and written to client_metrics.jsonl;
- ``checkpoint``: the server's state in a checkpoint, and back;
- ``report``: the banner, the round's line and notes, summary.json;
- ``robust_report``: what a robust rule and an attack add to them;
- ``personal_setup``: ``--personalize``'s refusals, its store's place and size;
- ``personal_trainer``: ``ClientTrainer`` with each client's personal state (FedPer,
  FedRep, FedBN, Ditto);
- ``personal_cohorts``: FedPer's personal layers and Ditto's personal models in stacked
  cohorts;
- ``personal_evaluation``: each client's personalized model scored beside the global one;
- ``personal_report``: the personalized figures in the round's row, client_metrics.jsonl,
  the console and the banner.

The maths (sampling, aggregation, privacy, server optimizers, robust rules, cohorts) is in
``mptrain.federated``.
"""

from ...imports import lazy_exports

# Lazy: the config reads ``settings`` (no torch) when the command line starts.
__all__ = ["FedAvgStrategy", "FedAvgSettings"]
__getattr__, __dir__ = lazy_exports(__name__, {"FedAvgStrategy": ".strategy",
                                               "FedAvgSettings": ".settings"})
