"""Personalized federated learning (issue 54, ``--personalize``): each client's own model,
measured on its own data. Plain functions and classes that know nothing of processes or
barriers; fedavg's glue is ``strategies.fedavg.personal_*``. One line per file:

- ``spec``: ``--personalize METHOD[:ARG]`` parsed (no torch: the command line reads it);
- ``layers``: which of a model's tensors stay on each client (fedper, fedrep, fedbn), and
  the refusals that name the layers there are;
- ``store``: every client's personal tensors, in shared memory up to a budget and in a
  memory-mapped file beyond it, and their part of a checkpoint;
- ``local``: the local steps the methods add to FedAvg's (fine-tuning, FedRep's head,
  Ditto's proximal personal step).
"""
