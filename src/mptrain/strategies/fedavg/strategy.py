"""The parent's side of fedavg: its facts (the unit, the settings it takes), its refusals
before anything starts, the shared state it makes for the workers, and what the run
reports (``report``)."""

from __future__ import annotations

from pathlib import Path

from ..base import (ResourceNeeds, Strategy, WorkerProgram, host_memory_comm,
                    model_tensor_count)
from ..model_state import floating_state
from . import client_metrics, cohorts, personal_report, report, robust_report, virtual_clock
from .client_evaluation import check_client_evaluation, evaluation_split, scores_only_sampled
from .refusals import check_fedavg_config, check_run
from .settings import ASYNCHRONOUS_SETTINGS, FEDAVG_SETTINGS, LR_PER_ROUND
from .shared import FedAvgShared, cut_clients, share_round_state, shared_bytes


class FedAvgStrategy(Strategy):
    name = "fedavg"
    unit = "round"
    #: Its own section's (``FedAvgSettings``) but fedbuff's, and restarts as sync and ddp
    #: have them.
    settings = frozenset(FEDAVG_SETTINGS) - ASYNCHRONOUS_SETTINGS | {"max_restarts"}
    instead = {"epochs": "{rounds}",
               "steps_per_epoch": "{rounds} with fewer {clients_per_round}",
               "lr_schedule": LR_PER_ROUND}
    runs_under_torchrun = True
    resumes_on_other_worker_counts = True   # the server's state is the checkpoint

    def __init__(self, config):
        super().__init__(config)
        #: The training set cut into clients (``shared.cut_clients``): cut once, in
        #: ``check``, and reused by ``prepare`` and every restart.
        self.clients = None
        #: What the workers share, made by ``prepare``.
        self.shared: FedAvgShared | None = None
        #: The parent's view of the privacy spent (for summary.json).
        self.last_epsilon: float | None = None
        self.stopped_for_privacy_at: int | None = None
        self.divergence = report.DivergenceWatch()
        #: --vectorize-clients: the path the parent chose (``cohorts.choose_path``) and
        #: one client's memory in a cohort, from its dry run.
        self.chosen_path = None
        self.client_bytes: int | None = None
        #: Which path the clients trained on, as the workers reported it.
        self.client_path: str | None = None
        self.rounds_skipped = 0   # rounds too few clients reported for the rule
        #: Per-client evaluation: the rows scored (``test``/``train``), whether only the
        #: round's clients are, the data's client names, the last round's summary, and
        #: client_metrics.jsonl (under --out).
        self.client_eval_split, self.only_sampled_scored = "train", False
        self.client_names = None
        self.data_line: str | None = None   # devices drawn on demand: what the banner says
        self.last_client_summary: dict = {}
        self.last_row: dict | None = None   # the last round's metrics (its virtual time)
        self.last_personal_summary: dict = {}   # --personalize: the last evaluation's
        self.client_metrics: client_metrics.ClientMetricsFile | None = None

    # -- facts ---------------------------------------------------------------------------------
    @classmethod
    def recommended(cls, defaults):
        values = super().recommended(defaults)
        values.update(defaults.federated)
        return values

    @classmethod
    def check_config(cls, config):
        check_fedavg_config(config)

    @classmethod
    def comm_kind(cls, config, torchrun_local_ranks):
        """Under torchrun on GPUs as on CPUs: what fedavg's ranks exchange (the global
        model, the round's sums and update rows) lives in host memory whatever the device
        clients train on, and an nccl group takes CUDA tensors only."""
        return host_memory_comm(torchrun_local_ranks)

    @classmethod
    def units(cls, config):
        return config.fedavg.rounds

    # -- parent side -------------------------------------------------------------------------
    def check(self, data, model, plan) -> None:
        """Before anything starts: cut the clients, since cutting them is how a partition
        that cannot split this data set (or a user's function that returns bad clients) is
        found -- in one line, before any output exists. The cut is kept for ``prepare``.
        Then what the run cannot offer its settings (``refusals.check_run``), and the
        path the clients train on."""
        self.partition(data)
        check_client_evaluation(self.config, data, self)
        check_run(self.config, data, model, plan, self.out_dir)
        if self.chosen_path is None:   # once: restarts reuse it
            check, self.chosen_path = cohorts.choose_path(self.config, model, data,
                                                               plan.workers)
            self.client_bytes = check.client_bytes if check is not None else None

    def partition(self, data) -> None:
        """Cut the training set into clients (once; restarts reuse it)."""
        if self.clients is None:
            self.clients = cut_clients(self.config, data)
            self.client_eval_split = evaluation_split(data, self.config.fedavg.partition)
            self.only_sampled_scored = scores_only_sampled(data)
            from ...data.natural.on_demand import banner_line

            self.data_line = banner_line(data)
            if self.config.fedavg.partition == "natural":
                self.client_names = data.clients.names

    def prepare(self, model, data=None, plan=None) -> None:
        self.partition(data)
        self.shared = share_round_state(self.config, model, self.clients, plan, self.out_dir)

    def needs(self, model, data, plan) -> ResourceNeeds:
        # The fallback reduction sends the flat model and its weight through the group.
        # Clients end in last batches of as many sizes as there are clients: those shapes
        # are left to the workers, only the full batch is rehearsed.
        numel = sum(t.numel() for t in floating_state(model))
        return ResourceNeeds(comm_numel=numel + 1,
                             shared_tensors=model_tensor_count(model) + 14,
                             batch_sizes=(self.config.batch_size,),
                             extra_shared_bytes=shared_bytes(self.config, model, plan,
                                                             self.out_dir))

    def samples_per_round(self, data, workers):
        f = self.config.fedavg
        mean_client = len(data.train) / f.clients
        return round(f.sampled_clients * mean_client * f.local_epochs)

    def program(self, setup) -> WorkerProgram:
        from .worker import FedAvgProgram

        return FedAvgProgram(self.config, self.shared, setup, self.chosen_path,
                             self.client_bytes)

    # -- what the run says about itself ----------------------------------------------------------
    def round_extras(self, reports) -> dict:
        row = report.round_row(reports, self.divergence)
        self.last_row = row
        if "epsilon" in row:
            self.last_epsilon = row["epsilon"]
        if "stopped" in row:
            self.stopped_for_privacy_at = row["round"]
        if "client_path" in row:
            self.client_path = row["client_path"]
        # Rank 0's count since the run began (a resumed run's includes the rounds before
        # its checkpoint, and a restart's re-run rounds are not counted twice).
        skipped = reports[0].extras.get("rounds_skipped")
        if skipped is not None:
            self.rounds_skipped = skipped
        self.add_client_scores(reports, row)
        return row

    def add_client_scores(self, reports, row: dict) -> None:
        """An evaluated round's per-client figures -- the global model's and, with
        --personalize, the personalized models' -- into ``row`` and client_metrics.jsonl
        (fedbuff's server steps report theirs alike)."""
        scores = client_metrics.joined_scores(reports)
        if scores is None:
            return
        self.last_client_summary = client_metrics.summary_of(scores)
        row.update(self.last_client_summary)
        personal, personalized = personal_report.joined_personal(reports)
        if personal is not None:
            self.last_personal_summary = personal_report.personal_summary(personal,
                                                                          personalized)
            row.update(self.last_personal_summary)
        if self.out_dir is not None:
            if self.client_metrics is None:
                self.client_metrics = client_metrics.ClientMetricsFile(self.out_dir)
            rows = client_metrics.client_rows(row["round"], scores, self.client_names)
            if personal is not None:
                rows = personal_report.with_personal(rows, personal)
            self.client_metrics.add(row["round"], rows)

    def round_line(self, metrics):
        return report.round_line(metrics)

    def round_notes(self, metrics):
        planned = self.chosen_path.describe() if self.chosen_path else None
        return report.round_notes(self.config, metrics, planned)

    def finish(self, model) -> None:
        """Remove the clients' state files under --out (--personalize's rows past its
        memory, SCAFFOLD's variates on disk): the run's scratch, which a checkpoint holds
        row by row and a resume or restart makes afresh. Left, a 10,000-client Ditto run of
        the 2NN kept 7.4 GiB in --out after it ended, and --overwrite kept it too."""
        super().finish(model)
        shared = self.shared
        if shared is None or self.out_dir is None:
            return
        store = getattr(shared.personal, "path", None)
        for path in (store, shared.controls_path):
            if path is not None and Path(path).parent == Path(self.out_dir):
                Path(path).unlink(missing_ok=True)

    def summary_fields(self):
        return {**report.summary_fields(self.config, self.last_epsilon,
                                        self.stopped_for_privacy_at),
                "vectorize_clients": self.config.fedavg.vectorize_clients,
                "client_path": self.client_path,
                **self.client_evaluation_fields(),
                **personal_report.summary_fields(self.config, self.last_personal_summary),
                **robust_report.summary_fields(self.config, self.rounds_skipped),
                **virtual_clock.summary_fields(self.config, self.last_row)}

    def client_evaluation_fields(self) -> dict:
        """The last per-client evaluation's figures, and what was scored."""
        if not self.config.fedavg.client_eval_rounds:
            return {}
        return {"client_eval_split": self.client_eval_split,
                "client_eval_only_sampled": self.only_sampled_scored,
                **self.last_client_summary}

    def describe(self, plan, model):
        lines = report.describe(self.config, plan, model, self.out_dir,
                                self.client_eval_split, self.only_sampled_scored)
        if self.data_line is not None:
            lines.append(self.data_line)
        personal = personal_report.banner_line(self.config, model, self.out_dir)
        if personal is not None:
            lines.append(personal)
        return lines + [cohorts.banner_line(self.chosen_path)]
