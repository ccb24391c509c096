"""Clients trained stacked in cohorts (issue 39, ``--vectorize-clients``): a cohort's
clients share one vectorized step (``torch.func``) instead of one small step each, each
client still reading its own batches and following its own optimizer. Plain functions and
classes, tested without processes; fedavg's side is ``strategies.fedavg.cohorts``. One line
per file:

- ``choice``: which path a run's clients train on (``auto``'s rule) and the line that says
  so;
- ``check``: whether a model can train stacked (a look and a dry run), and one client's
  memory;
- ``memory``: the memory a worker's cohorts may take, and the cohort size that fits;
- ``batches``: each client's batches, stacked into one padded block per cohort;
- ``optimizer``: SGD and Adam over stacked parameters, each client its own state;
- ``trainer``: a cohort's training (stacked gradients, FedProx, SCAFFOLD);
- ``stackable``: layers ``vmap`` cannot batch, rewritten in ops it can (``nn.LSTM``);
- ``clients``: a worker's clients split into cohorts, and each client's outcome.
"""
