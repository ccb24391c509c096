"""Asynchronous federated learning's pieces (FedBuff, Nguyen et al. 2022; FedAsync, Xie et
al. 2019) as plain functions, tested without processes; the strategy that runs them on the
workers is ``strategies.fedbuff``. One line per file:

- ``staleness``: ``--staleness-weight`` parsed, and the weight of an update ``s`` versions
  old (no torch);
- ``schedule``: the event schedule computed ahead from the seed -- who trains from which
  version, when each update arrives, what each server step applies, the pending table's
  rows (no torch);
- ``buffer``: a buffer's coefficients and the change they add up to.
"""
