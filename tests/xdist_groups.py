"""``xdist_group`` marks that group under pytest 9.

pytest-xdist (3.8) groups tests of ``--dist loadgroup`` by the name it appends to each
item's node id on the workers ("...::test@nodes"), and writes it to ``item._nodeid``, which
pytest 9 no longer reads (a node id is ``item._id``, a structured ``NodeId``). Every mark
was then ignored without a word: the torchrun tests of the "nodes" group ran beside each
other on both workers, and a module fixture meant to run once ran once per worker.
"""

from __future__ import annotations


def group_names(item) -> list[str]:
    return sorted({str(mark.args[0] if mark.args else mark.kwargs.get("name", "default"))
                   for mark in item.iter_markers("xdist_group")})


def name_groups(config, items) -> None:
    """On an xdist worker of ``--dist loadgroup``, give each grouped test the node id
    "...@group" that xdist's scheduler sends to one worker (what xdist does itself where
    pytest still reads ``_nodeid``)."""
    if not getattr(config.option, "loadgroup", False):
        return
    from _pytest.nodeid import NodeId

    for item in items:
        groups = group_names(item)
        if groups and "@" not in item.nodeid and hasattr(item, "_id"):
            item._id = NodeId.parse(f"{item.nodeid}@{'_'.join(groups)}")
