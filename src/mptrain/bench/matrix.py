"""Which runs a bench makes, in which order, and what each cell is compared with (pure
functions)."""

from __future__ import annotations

from dataclasses import dataclass

from ..strategies.registry import DEFAULT_STRATEGY, strategy_class

#: The one-process strategy every epoch cell is measured against.
REFERENCE = DEFAULT_STRATEGY


def counts_rounds(strategy: str) -> bool:
    """Whether a strategy's unit of work is a round (sampled clients, local epochs, one
    aggregation) rather than an epoch: its cells run `--rounds`, and they are a different
    workload from an epoch of the reference, so they get their own single-thread
    reference."""
    return strategy_class(strategy).unit == "round"


def one_worker(strategy: str) -> bool:
    """Whether a strategy always runs one worker (``single``): one cell per workload."""
    return not strategy_class(strategy).takes_worker_count


@dataclass(frozen=True)
class Cell:
    strategy: str
    workers: int
    threads: int | None = None      # None: mptrain's budget (cores // workers)
    reference: bool = False         # the single-thread baseline of the efficiency figures

    @property
    def label(self) -> str:
        if self.reference:
            return f"{self.strategy} (1 thread)"
        threads = f", {self.threads} thr" if self.threads else ""
        return f"{self.strategy} x{self.workers}{threads}"

    @property
    def unit(self) -> str:
        """What `--epochs N` of the bench counts for this cell."""
        return strategy_class(self.strategy).unit


def worker_counts(requested: list[int] | None, cores: int) -> list[int]:
    """Default: 1, 2 and the usable core count, without repeats."""
    counts = requested or [1, 2, cores]
    return sorted(set(counts))


def expand(strategies: list[str], workers: list[int], threads: int | None) -> list[Cell]:
    """The cells of the matrix, each once, with a single-thread reference per workload:
    ``single (1 thread)`` first for the epoch strategies, ``fedavg (1 thread)`` ahead of the
    fedavg cells. A cell identical to its reference (1 worker, 1 thread) is not run twice."""
    epoch_strategies = [s for s in strategies if not counts_rounds(s)]
    cells = [Cell(REFERENCE, 1, threads=1, reference=True)] if epoch_strategies else []
    for strategy in [*epoch_strategies, *(s for s in strategies if counts_rounds(s))]:
        if counts_rounds(strategy):
            cells.append(Cell(strategy, 1, threads=1, reference=True))
        counts = [1] if one_worker(strategy) else workers
        for count in counts:
            if count == 1 and (threads or 0) == 1 and \
                    (one_worker(strategy) or counts_rounds(strategy)):
                continue  # identical to the reference
            cells.append(Cell(strategy, count, threads))
    return cells


def reference_of(cell: Cell, cells: list[Cell]) -> Cell | None:
    """The single-thread run that ``cell``'s efficiency divides by: the same workload in one
    process with one thread."""
    strategy = cell.strategy if counts_rounds(cell.strategy) else REFERENCE
    return next((c for c in cells if c.reference and c.strategy == strategy), None)


def speedup_baseline(cell: Cell, cells: list[Cell]) -> Cell | None:
    """What ``cell``'s speed-up is over: one process with mptrain's default threads (``single
    x1``; ``fedavg x1`` for fedavg), else, when that cell is not in the matrix (it equals the
    reference under ``--threads-per-worker 1``, or 1 is not among the worker counts), the
    single-thread reference."""
    strategy = cell.strategy if counts_rounds(cell.strategy) else REFERENCE
    return next((c for c in cells if not c.reference and c.strategy == strategy
                 and c.workers == 1), reference_of(cell, cells))


def interleave(cells: list[Cell], repeats: int) -> list[tuple[int, Cell]]:
    """A B C A B C ...: machine drift during the bench hits every cell alike, and run k of
    every cell belongs to repeat k (the pairs of the paired ratios)."""
    return [(repeat, cell) for repeat in range(repeats) for cell in cells]


def memory_pass(cells: list[Cell], repeats: int) -> list[tuple[int, Cell]]:
    """One more run per cell, after the timed ones, numbered after them: the runs whose
    process tree is sampled for memory (sampling slows the run it measures)."""
    return [(repeats, cell) for cell in cells]
