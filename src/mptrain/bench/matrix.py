"""Which runs a bench makes, in which order (pure functions)."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Cell:
    strategy: str
    workers: int
    threads: int | None = None      # None: mptrain's budget (cores // workers)
    reference: bool = False         # the single-thread baseline of the efficiency figures

    @property
    def label(self) -> str:
        if self.reference:
            return "single (1 thread)"
        threads = f", {self.threads} thr" if self.threads else ""
        return f"{self.strategy} x{self.workers}{threads}"


def worker_counts(requested: list[int] | None, cores: int) -> list[int]:
    """Default: 1, 2 and the usable core count, without repeats."""
    counts = requested or [1, 2, cores]
    return sorted(set(counts))


def expand(strategies: list[str], workers: list[int], threads: int | None) -> list[Cell]:
    """The cells of the matrix plus the single-thread reference, each once."""
    cells = [Cell("single", 1, threads=1, reference=True)]
    for strategy in strategies:
        counts = [1] if strategy == "single" else workers
        for count in counts:
            cell = Cell(strategy, count, threads)
            if strategy == "single" and (threads or 0) == 1:
                continue  # identical to the reference
            cells.append(cell)
    return cells


def interleave(cells: list[Cell], repeats: int) -> list[tuple[int, Cell]]:
    """A B C A B C ...: machine drift during the bench hits every cell alike."""
    return [(repeat, cell) for repeat in range(repeats) for cell in cells]


def memory_pass(cells: list[Cell], repeats: int) -> list[tuple[int, Cell]]:
    """One more run per cell, after the timed ones, numbered after them: the runs whose
    process tree is sampled for memory (sampling slows the run it measures)."""
    return [(repeats, cell) for cell in cells]
