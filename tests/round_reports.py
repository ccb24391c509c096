"""A rank's round report as ``report.metrics.combine`` reads it, for tests that combine ranks
without running any."""


class Report:
    def __init__(self, rank, extras):
        self.index, self.rank, self.steps, self.train_samples = 0, rank, 4, 64
        self.train_loss_sum, self.train_started, self.train_ended = 64.0, 1.0, 2.0
        self.eval_loss_sum, self.eval_correct, self.eval_count = 0.0, 0, 0
        self.minor_faults, self.evaluated_at, self.extras = 0, 2.0, extras
