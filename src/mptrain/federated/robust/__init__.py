"""Robust aggregation and attacks (issue 41) as plain functions over a round's rows, tested
without processes; fedavg's workers call them between their barriers
(``strategies.fedavg.robust_worker``). One line per file:

- ``spec``: ``--aggregator`` and ``--attack`` parsed, their names (no torch);
- ``settings``: the three settings checked together, the attackers drawn from the seed;
- ``rules``: a rule resolved for a run (its F, its assumption) and how it decides and
  combines;
- ``row_wise``: the Gram matrix and the rules that need whole rows (Krum, Bulyan's
  selection, norm bounding, the geometric median);
- ``coordinate_wise``: the rules that take a column at a time (median, trimmed mean,
  Bulyan's step);
- ``blocks``: the fixed blocks of columns every sum runs over;
- ``table``: a round over the table of rows, a block of columns at a time (decide, forge
  ALIE, aggregate a worker's slice);
- ``attacks``: which clients attack and what each attack sends.
"""
