"""What happened to a worker's clients in one round: the counts its round line and
metrics report."""

from __future__ import annotations

from ...errors import error_line


class RoundTally:
    """What happened to my clients in one round."""

    def __init__(self):
        self.steps = self.samples = self.reported = self.dropped = self.partial = 0
        #: Dropped stragglers not trained at all (``ClientTrainer.unheard``).
        self.untrained = 0
        self.loss_sum = self.client_loss_sum = 0.0
        self.failed: list[int] = []
        self.nonfinite: list[int] = []
        #: Clients retrained one at a time because their stacked cohort raised, and why.
        self.unstacked = 0
        self.unstacked_reason: str | None = None

    def count(self, steps: int, samples: int, loss_sum: float, partial: bool) -> None:
        self.steps += steps
        self.samples += samples
        self.loss_sum += loss_sum
        self.client_loss_sum += loss_sum / max(1, samples)
        self.partial += int(partial)

    def unheard(self) -> float:
        """A straggler the server will drop, left untrained; its weight (0)."""
        self.dropped += 1
        self.partial += 1
        self.untrained += 1
        return 0.0

    def unstack(self, clients: int, err: Exception) -> None:
        """A stacked cohort of ``clients`` raised ``err``: they train one at a time."""
        self.unstacked += clients
        if self.unstacked_reason is None:
            self.unstacked_reason = error_line(err)

    def as_extras(self) -> dict:
        extras = {"failed_clients": self.failed + self.nonfinite,
                  "nonfinite_clients": self.nonfinite, "reported": self.reported,
                  "dropped": self.dropped, "partial": self.partial,
                  "client_loss_sum": self.client_loss_sum, "untrained": self.untrained}
        if self.unstacked:
            extras.update(unstacked_clients=self.unstacked,
                          unstacked_reason=self.unstacked_reason)
        return extras
