"""The pieces of a federated round as plain functions and small classes, tested without
processes (the way Flower keeps ``aggregate.py`` apart from its strategies, and
pfl-research its ``algorithm/`` apart from ``privacy/``). Nothing here starts a process,
waits at a barrier or reads the command line; ``strategies.fedavg`` composes the pieces.

A round is: sample clients -> each client trains, maybe only part of its work or never
reports -> clip its update -> aggregate -> add noise -> server step. One line per file:

- ``choices``: the names each federated setting may take (no torch: the config checks them);
- ``sampling``: which clients a round samples (fixed-size or Poisson), and their seeds;
- ``client``: one client's local steps, FedProx's pull, whether its update is finite;
- ``availability``: dropouts (train, never report) and stragglers (part of their steps);
- ``scaffold``: SCAFFOLD's control variates and drift correction;
- ``privacy``: DP-FedAvg's clip, noise and adaptive clip;
- ``accounting``: the privacy spent (Google's dp-accounting);
- ``aggregate``: the weighted mean or plain sum of the rows, and each worker's columns;
- ``server_opt``: server optimizers (FedAvgM, FedAdam, FedYogi, FedAdagrad; Reddi et al.);
- ``client_accuracy``: each client's hits and loss under the global model, batches across
  clients;
- ``client_stats``: the summary of those accuracies (mean, spread, worst);
- ``robust/``: robust aggregation rules and attacks (``--aggregator``, ``--attack``);
- ``cohorts/``: clients trained stacked in cohorts (``--vectorize-clients``);
- ``clock/``: the virtual clock -- client speeds, availability traces, a round's duration;
- ``asynchronous/``: FedBuff's and FedAsync's event schedule, staleness weights and buffer;
- ``personal/``: each client's own model (``--personalize``): which tensors stay local,
  the per-client store, the personal local steps.

Everything random is a function of ``(seed, round, client)`` (or of ``(seed, round,
block)`` for noise), never of the worker that runs it: the same seed gives the same run
whatever the number of workers.
"""
