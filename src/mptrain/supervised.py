"""A supervised run as the runner sees it (``runner.RunFamily``): a data set in shared
memory, its test set to score a round, and the banner, summary and files of
``report.summary``."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from .data.fingerprint import difference, fingerprint, loader_difference, well_formed
from .data.sources import DataBundle
from .engine.evaluation import TestSetEvaluation
from .errors import UserError, python_caller, setting_name
from .launch import warmup
from .launch.plan import preflight
from .report import plots, summary
from .result import FitResult


@dataclass
class SupervisedFamily:
    data: DataBundle
    model_name: str
    #: How ``mptrain run --resume`` rebuilds the data and model (``data``, ``data_dir``,
    #: ``model``), recorded in checkpoints.
    run_info: dict = field(default_factory=dict)
    who: str = "workers"
    command: str = "mptrain run"
    evaluation = TestSetEvaluation

    @property
    def kind(self) -> str:
        return self.data.task

    def preflight(self, config, model, strategy, plan) -> list[str]:
        return preflight(config, self.data, model, strategy, plan)

    def divergence_advice(self) -> str | None:
        """Training data with missing values (the warning before the run named them) makes
        the loss non-finite whatever the learning rate: the divergence names the data."""
        from .launch.preflight import non_finite_data

        found = non_finite_data(self.data, sets=("training",))
        return f"{found[0]}: drop or fill those samples" if found else None

    def data_fingerprint(self, config, resume, launcher, keeps: bool) -> dict | None:
        """The data's fingerprint (``data.fingerprint``) where checkpoints will record it
        (``keeps``) or a resume checks it -- a pass over the data's bytes, 0.13 s for
        MNIST, so nowhere else; a resume on other data than its checkpoint's is refused
        here, before any process starts. A checkpoint written before fingerprints
        (``data`` None) resumes unchecked. The data is first built where the launcher's
        ranks will read it (after the plan checked that /dev/shm holds it), so its bytes
        are read once, in place."""
        if resume is None and not keeps:
            return None
        launcher.place_data(self.data)
        now = fingerprint(self.data)
        if resume is not None and resume.data is not None:
            if not well_formed(resume.data):   # read from the file like its other parts
                raise UserError(f"{resume.source or 'the checkpoint'} is damaged: its 'data' "
                                "is not the fingerprint of a data set; use another checkpoint")
            differs = loader_difference(resume.data, now)
            if differs is not None:
                raise UserError(differs)
            differs = difference(resume.data, now)
            if differs is not None:
                raise UserError(f"this is not the data the checkpoint was trained on: "
                                f"{differs}; {_same_data_advice(config, resume)}")
        return now

    def result(self, model, config) -> FitResult:
        return FitResult(model=model, config=config)

    def banner(self, config, model, plan) -> list[str]:
        return summary.banner_lines(config, self.data, model, self.model_name, plan)

    def summary(self, config, model, plan, rows, wall_s, startup_s) -> dict:
        return summary.build_summary(config, self.data, model, self.model_name, plan, rows,
                                     wall_s, startup_s)

    def result_lines(self, record: dict, out_dir: Path | None) -> list[str]:
        return summary.result_lines(record, out_dir)

    def write_outputs(self, out_dir: Path, model, rows, record: dict) -> None:
        summary.write_outputs(out_dir, model, rows, record)

    def before_plotting(self) -> None:
        warmup.import_in_background(plots.MODULES)


def _same_data_advice(config, resume) -> str:
    """What gives a resume its checkpoint's data back: the run's seed (the user's data is
    built under it), the same factory and files -- or a new run."""
    seed, stored = setting_name("seed"), resume.config.get("seed")
    if isinstance(stored, int) and stored != config.seed:
        said = f"{seed}={stored}" if python_caller() else f"{seed} {stored}"
        return (f"its run built the data under {seed} {stored}, this one under "
                f"{config.seed}: resume with {said}, or start a new run")
    if python_caller():
        return ("pass fit() the data the run was trained on (data sets are stacked under "
                f"{seed}), or start a new run without resume")
    return (f"give the data the run was trained on (the same --data and files; a factory is "
            f"called under {seed}: its random numbers must come from torch, numpy or "
            "random, not the clock), or start a new run without --resume")
