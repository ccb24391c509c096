"""What happened to a worker's clients in one round: the counts its round line and
metrics report."""

from __future__ import annotations


class RoundTally:
    """What happened to my clients in one round."""

    def __init__(self):
        self.steps = self.samples = self.reported = self.dropped = self.partial = 0
        self.loss_sum = self.client_loss_sum = 0.0
        self.failed: list[int] = []
        self.nonfinite: list[int] = []

    def count(self, steps: int, samples: int, loss_sum: float, partial: bool) -> None:
        self.steps += steps
        self.samples += samples
        self.loss_sum += loss_sum
        self.client_loss_sum += loss_sum / max(1, samples)
        self.partial += int(partial)

    def as_extras(self) -> dict:
        return {"failed_clients": self.failed + self.nonfinite,
                "nonfinite_clients": self.nonfinite, "reported": self.reported,
                "dropped": self.dropped, "partial": self.partial,
                "client_loss_sum": self.client_loss_sum}
