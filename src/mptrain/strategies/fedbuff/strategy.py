"""The parent's side of fedbuff: its facts, its refusals, the shared state and the schedule
it makes before anything starts, and what the run reports. The clients, their partition,
their stacked path and the divergence watch are fedavg's (``FedAvgStrategy``)."""

from __future__ import annotations

from ...errors import UserError
from ...errors import setting_name as named   # as the caller spelled the setting
from ...report.words import human_bytes
from ..base import ResourceNeeds, model_tensor_count
from ..fedavg import cohorts, personal_report
from ..fedavg.client_evaluation import check_client_evaluation
from ..fedavg.personal_setup import check_personalize_run
from ..fedavg.settings import LR_PER_ROUND
from ..fedavg.shared import TABLE_LIMIT_BYTES
from ..fedavg.strategy import FedAvgStrategy
from ..model_state import floating_state
from . import report
from .checkpoint import check_in_flight
from .clock import event_schedule, model_bytes_of
from .refusals import check_fedbuff_config
from .settings import FEDBUFF_SETTINGS, WITHOUT_DP, buffer_size_of
from .shared import share_async_state, table_bytes, table_rows


class FedBuffStrategy(FedAvgStrategy):
    name = "fedbuff"
    unit = "round"          # a server step; --rounds counts them
    settings = FEDBUFF_SETTINGS
    instead = {"epochs": "{rounds}", "steps_per_epoch": "{rounds}",
               "lr_schedule": LR_PER_ROUND,
               "clients_per_round": "{concurrency}", "client_fraction": "{concurrency}",
               **{name: WITHOUT_DP for name in ("dp_clip", "dp_noise", "dp_delta",
                                                "target_epsilon", "accountant",
                                                "dp_clip_quantile", "dp_clip_lr",
                                                "dp_count_noise")}}
    runs_under_torchrun = False   # the pending table lives in one machine's shared memory
    resumes_on_other_worker_counts = True

    def __init__(self, config):
        super().__init__(config)
        #: The run's events (``federated.asynchronous.schedule``), the parent's own copy:
        #: the summary's staleness histogram and virtual time.
        self.schedule = None
        self.last_step: int | None = None   # the last step reported (0-based)
        #: A resumed checkpoint's updates in flight and its last step (``resuming_from``).
        self.resumed_in_flight: tuple | None = None

    @classmethod
    def check_config(cls, config):
        check_fedbuff_config(config)

    def check(self, data, model, plan) -> None:
        """Cut the clients, make the schedule (a bad speeds file or trace is refused here,
        before any output exists; so is a resumed checkpoint whose updates in flight are
        not the schedule's), refuse what --personalize cannot have (as fedavg does) and a
        pending table too large to share, and choose the clients' path as fedavg does for
        about a buffer's clients a step."""
        self.partition(data)
        numel = sum(t.numel() for t in floating_state(model))
        if self.schedule is None:
            sizes = (self.clients[1][1:] - self.clients[1][:-1]).tolist()
            self.schedule = event_schedule(self.config, sizes, model_bytes_of(numel))
        if self.resumed_in_flight is not None:
            check_in_flight(self.resumed_in_flight[0], self.schedule, self.resumed_in_flight[1])
        check_client_evaluation(self.config, data, self)
        check_personalize_run(self.config, data, model, plan, self.out_dir)
        need = table_rows(self.config) * numel * 4
        if need > TABLE_LIMIT_BYTES:
            raise UserError(f"fedbuff's updates in flight need {human_bytes(need)} of shared "
                            f"memory ({table_rows(self.config)} rows x {numel:,} parameters x "
                            f"4 bytes), over the {human_bytes(TABLE_LIMIT_BYTES)} limit; give "
                            f"a smaller {named('concurrency')} or {named('buffer_size')}")
        if self.chosen_path is None:   # once: restarts reuse it
            per_step = self.config.replace(clients_per_round=buffer_size_of(self.config.fedavg),
                                           client_fraction=None)
            check, self.chosen_path = cohorts.choose_path(per_step, model, data, plan.workers)
            self.client_bytes = check.client_bytes if check is not None else None

    def resuming_from(self, resume) -> None:
        """Kept for ``check``, which has the data to compute the schedule with: the
        checkpoint's updates in flight must be the ones the schedule has after its last
        step."""
        saved = resume.ranks[0].get("fedbuff") if resume.ranks else None
        self.resumed_in_flight = (saved, resume.epoch - 1)

    def prepare(self, model, data=None, plan=None) -> None:
        self.partition(data)
        self.shared = share_async_state(self.config, model, self.clients, plan, self.out_dir)

    def needs(self, model, data, plan) -> ResourceNeeds:
        return ResourceNeeds(comm_numel=1, shared_tensors=model_tensor_count(model) + 8,
                             batch_sizes=(self.config.batch_size,),
                             extra_shared_bytes=table_bytes(self.config, model, self.out_dir))

    def samples_per_round(self, data, workers):
        f = self.config.fedavg
        return round(buffer_size_of(f) * len(data.train) / f.clients * f.local_epochs)

    def program(self, setup):
        from .worker import FedBuffProgram

        return FedBuffProgram(self.config, self.shared, setup, self.chosen_path,
                              self.client_bytes)

    # -- what the run says about itself ----------------------------------------------------------
    def round_extras(self, reports) -> dict:
        row = report.round_row(reports, self.divergence)
        self.last_step = row["round"] - 1
        if "client_path" in row:
            self.client_path = row["client_path"]
        self.add_client_scores(reports, row)
        return row

    def round_line(self, metrics):
        return report.round_line(metrics)

    def round_notes(self, metrics):
        planned = self.chosen_path.describe() if self.chosen_path else None
        return report.round_notes(metrics, planned)

    def summary_fields(self):
        return {**report.summary_fields(self.config, self.schedule, self.last_step),
                "vectorize_clients": self.config.fedavg.vectorize_clients,
                "client_path": self.client_path,
                **self.client_evaluation_fields(),
                **personal_report.summary_fields(self.config, self.last_personal_summary)}

    def describe(self, plan, model):
        lines = report.describe(self.config, self.out_dir, self.client_eval_split,
                                self.only_sampled_scored)
        if self.data_line is not None:
            lines.append(self.data_line)
        personal = personal_report.banner_line(self.config, model, self.out_dir)
        if personal is not None:
            lines.append(personal)
        return lines + [cohorts.banner_line(self.chosen_path)]
