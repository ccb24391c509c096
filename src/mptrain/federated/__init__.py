"""The pieces of a federated round as plain functions and small classes, tested without
processes (the way Flower keeps ``aggregate.py`` apart from its strategies, and
pfl-research its ``algorithm/`` apart from ``privacy/``).

A round is: sample clients (``sampling``) -> each client trains, maybe only part of its work
or never reports (``client``, ``availability``, ``scaffold``) -> clip its update
(``privacy``) -> aggregate (``aggregate``) -> add noise (``privacy``) -> server step
(``server_opt``, ``scaffold``); ``accounting`` counts the privacy spent and
``client_stats`` summarises per-client evaluation. ``strategies.fedavg`` composes them.

Everything random is a function of ``(seed, round, client)`` (or of ``(seed, round,
block)`` for noise), never of the worker that runs it: the same seed gives the same run
whatever the number of workers.
"""
