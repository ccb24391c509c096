"""The dqn learner beats while it learns.

With actors ahead of it, the learner finds every row it needs already written: it never
waits, and waiting was the only place it beat. A round of updates then looked like a hang:
``mptrain rl --algo dqn --workers 2 --worker-timeout 10`` was stopped within seconds as
"rank 0 made no progress", on a healthy run (and a long enough round did the same at the
default timeout).
"""

from __future__ import annotations

from types import SimpleNamespace

from mptrain.rl.dqn import DQNProgram


def learner_with_rows_written() -> tuple[DQNProgram, list[str]]:
    """A learner whose rows are all there (no waiting) and whose updates and publications
    only count; ``events`` records them and its heartbeats in order."""
    events: list[str] = []
    learner = object.__new__(DQNProgram)
    learner.config = SimpleNamespace(learning_starts=4, train_every=2, policy_every=4,
                                     buffer_size=8)
    learner.updates, learner.published = 0, -1
    learner.actor, learner.actors = None, 1
    learner.model = None
    learner.progress = SimpleNamespace(beat=lambda: events.append("beat"),
                                       advance=lambda samples: events.append("advance"))

    def update(first, end):
        events.append("update")
        learner.updates += 1
        return 0.0

    learner.update = update
    learner.wait_for_rows = lambda step, limit, margin: None
    learner.policy = SimpleNamespace(publish=lambda model, version: events.append("publish"))
    return learner, events


def test_a_learner_that_never_waits_beats_before_every_update_and_publication():
    learner, events = learner_with_rows_written()
    learner.learn_until(400)
    work = [event for event in events if event != "beat"]
    assert work.count("update") == 198 and work.count("publish") == 100
    # Never two pieces of work without a heartbeat between them.
    assert all(events[i] == "beat" for i in range(0, len(events), 2)), events[:8]
    assert len(events) == 2 * len(work)
