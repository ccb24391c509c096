"""The names a federated setting may take, one tuple per choice, without torch: the config
checks them (and the command line offers them) before torch is imported, and the modules
that act on them import the same tuples."""

#: ``--server-optimizer`` (``server_opt``).
SERVER_OPTIMIZERS = ("sgd", "adam", "yogi", "adagrad")
#: ``--accountant`` (``accounting``).
ACCOUNTANTS = ("rdp", "pld")
#: ``--sampling``: a fixed-size uniform sample, or Poisson's (each client with rate q).
CLIENT_SAMPLING = ("fixed", "poisson")
#: ``--vectorize-clients`` (``cohorts.choice``).
VECTORIZE_CLIENTS = ("auto", "on", "off")
#: ``--straggler-mode`` (``availability``): each sampled client straggles with probability
#: P and does part of its local steps, or FedProx's code: exactly that share of the round's
#: clients straggle, each doing a whole number of local epochs.
STRAGGLER_MODES = ("per-client", "exact")
