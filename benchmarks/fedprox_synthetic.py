"""FedProx's synthetic experiment (Li et al., "Federated Optimization in Heterogeneous
Networks", MLSys 2020, section 5 and figures 1-2) run with mptrain, against the paper's
claims.

    python benchmarks/fedprox_synthetic.py [--rounds 200] [--seeds 0,1,2]
        [--datasets "0,0;0.5,0.5;1,1"] [--stragglers 0,0.9] [--workers 1]
        [--vectorize-clients on] [--json auto|PATH|none] [--cache DIR [--cached-only]]

Every run is a fresh ``python -m mptrain run``; figures come from its metrics.jsonl. The
paper's setting: Synthetic(alpha, beta) (``--data synthetic:A,B``: 30 devices, one client
each, 90/10 train/test split per device), multinomial logistic regression (``mclr``), client
SGD lr 0.01, batch 10, 20 local epochs, 10 clients a round, 200 rounds. Two methods:

- **FedAvg**: mu = 0, and with stragglers their partial work is dropped
  (``--straggler-rate P --straggler-mode exact --drop-stragglers``), as the paper runs
  FedAvg;
- **FedProx**: mu = 1, the stragglers' partial work aggregated (``--prox-mu 1
  --straggler-rate P --straggler-mode exact``).

Stragglers are the paper's code's (``--straggler-mode exact``): of a round's 10 clients
exactly round(10 (1 - P)) finish -- 1 at 90% -- and the others each do a uniform whole
number of local epochs from 1 to 19. Both methods see the same stragglers in a round of a
seed (the paper's code reseeds per round for that).

Each cell is the mean (and spread) over the seeds of the pooled test accuracy over every
device's test split (``test_accuracy``) and of the global model's loss over every device's
training data (``train_eval_loss``, ``--eval-train``: the training loss the paper plots),
after the last round; the instability column is the standard deviation of that training
loss over the last quarter of the rounds.

How mptrain's run differs from the paper's code (litian96/FedProx), said again under the
table:

- which clients straggle and for how many epochs come from mptrain's seeded streams, not
  numpy's ``np.random.seed(round)``: the same count and law, other draws;
- ``--seed`` draws the data too: each seed is another Synthetic(alpha, beta) sample, where
  the paper ran one data set; clients are sampled uniformly and averaged by their data, as
  the paper's code does (its text states the opposite pairing: sampling by data, simple
  mean).

``--cache DIR`` keeps each finished run as a JSON file there, so a long table is run over
several sittings; ``--cached-only`` prints the table from the kept runs alone. A straggler
run's name says its mode (``_s0.9exact_``): runs kept before the mode existed (stragglers
drawn per client, ``_s0.9_``) are not taken for the paper's; the 0% runs have none to say. Nothing here
asserts: verdicts are printed.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
from pathlib import Path

from common import kept_run, machine_info, result_path, run_measured, write_json

PYTHON = sys.executable
PAPER = ["--strategy", "fedavg", "--model", "mclr", "--partition", "natural",
         "--lr", "0.01", "--optimizer", "sgd", "--momentum", "0", "--batch-size", "10",
         "--local-epochs", "20", "--clients-per-round", "10", "--eval-every", "1",
         "--eval-train"]
METHODS = {"FedAvg": [], "FedProx": ["--prox-mu", "1"]}
#: The paper's claims, as it states them (it shows curves, not a table of figures).
CLAIMS = {
    "accuracy_90": "at 90% stragglers FedProx (mu=1, partial work kept) has a higher test "
                   "accuracy than FedAvg (stragglers dropped); the abstract: +22 points on "
                   "average in highly heterogeneous settings (Fig. 1, its test accuracy "
                   "in the appendix)",
    "loss_90": "at 90% stragglers FedProx's training loss is lower than FedAvg's (Fig. 1)",
    "loss_0": "at 0% stragglers, mu=1 lowers the training loss against FedAvg as the data "
              "grow more heterogeneous: Synthetic(0.5,0.5) and (1,1) (Fig. 2)",
    "stable": "FedProx converges more stably than FedAvg (Fig. 1-2): a smaller spread of "
              "the training loss over the last rounds",
}
DIFFERENCES = [
    ("stragglers as the paper's code makes them (exactly 1 of 10 finishes at 90%; a "
     "straggler does 1 to E-1 whole epochs), drawn from mptrain's seeded streams rather "
     "than numpy's"),
    "each seed draws its own Synthetic data set; the paper ran one",
]
#: The paper's stragglers (``--straggler-mode``); the kept runs' names carry it.
STRAGGLER_MODE = "exact"


def flags_of(dataset: str, method: str, straggle: float, seed: int, args) -> list[str]:
    flags = [*PAPER, "--data", f"synthetic:{dataset}", "--rounds", str(args.rounds),
             "--seed", str(seed), "--workers", str(args.workers), "--threads-per-worker",
             "1", "--vectorize-clients", args.vectorize_clients, *METHODS[method]]
    if straggle:
        flags += ["--straggler-rate", f"{straggle:g}", "--straggler-mode", STRAGGLER_MODE]
        if method == "FedAvg":
            flags.append("--drop-stragglers")
    return flags


def run_cell(dataset: str, method: str, straggle: float, seed: int, args) -> dict:
    """One run: the test accuracy and the training loss per round."""
    with tempfile.TemporaryDirectory(prefix="fedprox-") as out:
        command = [PYTHON, "-m", "mptrain", "run", "--quiet", "--out", out,
                   *flags_of(dataset, method, straggle, seed, args)]
        measured = run_measured(command, timeout_s=48 * 3600, sample_memory=False)
        metrics = Path(out) / "metrics.jsonl"
        rows = [json.loads(line) for line in metrics.open()] if metrics.exists() else []
    if measured["returncode"] != 0:
        tail = (measured["output"].strip().splitlines() or ["(no output)"])[-1]
        return {"ok": False, "error": tail, "command": command, "rounds_done": len(rows)}
    return {"ok": True, "command": command, "wall_s": measured["wall_s"],
            "accuracy": [r.get("test_accuracy") for r in rows],
            "train_loss": [r.get("train_eval_loss") for r in rows],
            "reported": [r.get("reported") for r in rows],
            "round_s": [r.get("round_s") for r in rows]}


def cached_run(cache: Path | None, dataset: str, method: str, straggle: float, seed: int,
               args) -> dict:
    """``run_cell``, or its result kept under ``--cache`` (``common.kept_run``)."""
    # 0%: no straggler, no mode: the names of the runs kept before the mode existed.
    mode = STRAGGLER_MODE if straggle else ""
    name = f"synthetic-{dataset}_{method}_s{straggle:g}{mode}_seed{seed}_r{args.rounds}"
    return kept_run(cache, name, lambda: run_cell(dataset, method, straggle, seed, args),
                    args.cached_only)


def cell_figures(runs: list[dict]) -> dict:
    """Mean and spread over the seeds of the last round's figures, and the instability."""
    done = [r for r in runs if r.get("ok") and r["accuracy"]]
    if not done:
        return {"n": 0}
    accuracy = [r["accuracy"][-1] for r in done]
    loss = [r["train_loss"][-1] for r in done]
    tail = max(1, len(done[0]["train_loss"]) // 4)
    spread = [statistics.pstdev(r["train_loss"][-tail:]) if tail > 1 else 0.0 for r in done]
    return {"n": len(done), "accuracy": statistics.fmean(accuracy),
            "accuracy_sd": statistics.pstdev(accuracy), "train_loss": statistics.fmean(loss),
            "train_loss_sd": statistics.pstdev(loss), "instability": statistics.fmean(spread),
            "wall_s": statistics.fmean(r["wall_s"] for r in done)}


def verdicts(table: dict, datasets: list[str], stragglers: list[float],
             rounds: int) -> list[str]:
    """Each claim of the paper checked against the table: holds, or where it does not."""
    lines = []

    def pair(dataset, straggle):
        cells = table.get((dataset, straggle), {})
        avg, prox = cells.get("FedAvg", {}), cells.get("FedProx", {})
        return (avg, prox) if avg.get("n") and prox.get("n") else (None, None)

    if 0.9 in stragglers:
        gaps, worse = [], []
        for d in datasets:
            avg, prox = pair(d, 0.9)
            if avg is not None:
                gaps.append(100 * (prox["accuracy"] - avg["accuracy"]))
                if gaps[-1] <= 0:
                    worse.append(d)
        if gaps:
            mean_gap = statistics.fmean(gaps)
            size = "as large as" if mean_gap >= 22 else "smaller than"
            listed = ", ".join(f"{g:+.1f}" for g in gaps)
            lines.append(f"accuracy at 90%: FedProx - FedAvg = {listed} points (mean "
                         f"{mean_gap:+.1f}) -> " +
                         (f"holds in direction, the gain {size} the paper's +22 (the "
                          "abstract's average in its highly heterogeneous settings, not "
                          "these cells alone)" if not worse else
                          f"does NOT hold on Synthetic({'), ('.join(worse)})"))
        worse = [d for d in datasets if pair(d, 0.9)[0] is not None
                 and pair(d, 0.9)[1]["train_loss"] >= pair(d, 0.9)[0]["train_loss"]]
        if any(pair(d, 0.9)[0] is not None for d in datasets):
            lines.append("training loss at 90%: FedProx below FedAvg -> " +
                         ("holds" if not worse else
                          f"does NOT hold on Synthetic({'), ('.join(worse)})"))
    if 0.0 in stragglers:
        hetero = [d for d in datasets if d != "0,0" and pair(d, 0.0)[0] is not None]
        worse = [d for d in hetero
                 if pair(d, 0.0)[1]["train_loss"] >= pair(d, 0.0)[0]["train_loss"]]
        if hetero:
            lines.append("training loss at 0% on the heterogeneous sets: mu=1 below FedAvg -> "
                         + ("holds" if not worse else
                            f"does NOT hold on Synthetic({'), ('.join(worse)})"))
    measured = [(d, s) for d in datasets for s in stragglers if pair(d, s)[0] is not None]
    unstable = [f"Synthetic({d}) at {s:.0%}" for d, s in measured
                if pair(d, s)[1]["instability"] >= pair(d, s)[0]["instability"]]
    if measured and rounds < 8:
        lines.append("stability: too few rounds to say")
    elif measured:
        lines.append("stability: FedProx's training loss varies less over the last quarter "
                     "of the rounds -> " + ("holds" if not unstable else
                                            f"does NOT hold for {', '.join(unstable)}"))
    return lines


def print_table(table: dict, datasets: list[str], stragglers: list[float]) -> list[str]:
    header = (f"{'data':<18}{'stragglers':>11}  {'method':<8}{'n':>3}  {'test acc %':>15}"
              f"  {'train loss':>15}  {'instab.':>8}")
    lines = [header]
    for d in datasets:
        for s in stragglers:
            for method in METHODS:
                cell = table.get((d, s), {}).get(method, {"n": 0})
                if not cell["n"]:
                    lines.append(f"{'Synthetic(' + d + ')':<18}{s:>10.0%}  {method:<8}"
                                 f"{0:>3}  {'-':>15}  {'-':>15}  {'-':>8}")
                    continue
                lines.append(
                    f"{'Synthetic(' + d + ')':<18}{s:>10.0%}  {method:<8}{cell['n']:>3}  "
                    f"{100 * cell['accuracy']:>8.2f} ± {100 * cell['accuracy_sd']:<4.1f}"
                    f"  {cell['train_loss']:>8.4f} ± {cell['train_loss_sd']:<5.3f}"
                    f"  {cell['instability']:>8.4f}")
    return lines


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=200)
    parser.add_argument("--seeds", default="0,1,2")
    parser.add_argument("--datasets", default="0,0;0.5,0.5;1,1",
                        help="ALPHA,BETA pairs separated by ';'")
    parser.add_argument("--stragglers", default="0,0.9")
    parser.add_argument("--workers", type=int, default=1)
    parser.add_argument("--vectorize-clients", default="on", choices=("auto", "on", "off"))
    parser.add_argument("--json", default="auto")
    parser.add_argument("--cache", help="a folder keeping each finished run")
    parser.add_argument("--cached-only", action="store_true")
    args = parser.parse_args()
    if args.cached_only and not args.cache:
        parser.error("--cached-only reads the runs kept under --cache DIR: give --cache")
    seeds = [int(s) for s in args.seeds.split(",")]
    datasets = [d.strip() for d in args.datasets.split(";")]
    stragglers = [float(s) for s in args.stragglers.split(",")]
    cache = Path(args.cache) if args.cache else None
    if cache is not None:
        cache.mkdir(parents=True, exist_ok=True)
    runs, table = [], {}
    for d in datasets:
        for s in stragglers:
            for method in METHODS:
                cell_runs = []
                for seed in seeds:
                    run = cached_run(cache, d, method, s, seed, args)
                    run.update(dataset=d, method=method, stragglers=s, seed=seed)
                    cell_runs.append(run)
                    state = "ok" if run.get("ok") else run.get("error")
                    print(f"Synthetic({d}) {s:.0%} {method} seed {seed}: {state}"
                          + (f", {run['wall_s']:.0f} s" if run.get("ok") else ""), flush=True)
                runs += cell_runs
                table.setdefault((d, s), {})[method] = cell_figures(cell_runs)
    lines = print_table(table, datasets, stragglers)
    lines += ["", "The paper's claims:"] + [f"- {claim}" for claim in CLAIMS.values()]
    lines += ["", "Against this table:"] + [f"- {v}" for v in verdicts(table, datasets,
                                                                         stragglers, args.rounds)]
    lines += ["", "How this run differs from the paper's:"] + [f"- {d}" for d in DIFFERENCES]
    if args.rounds != 200:
        lines.append(f"- {args.rounds} rounds, not the paper's 200: the verdicts say nothing "
                     "about the claims")
    if len(seeds) < 3 or len(datasets) < 3 or len(stragglers) < 2:
        lines.append(f"- part of the table only (seeds {args.seeds}; the issue asks for 3 "
                     "seeds of 3 data sets at 0% and 90%): each verdict covers the cells shown")
    print("\n".join(lines))
    path = result_path("fedprox-synthetic", args.json)
    if path is not None:
        write_json(path, {"machine": machine_info(), "rounds": args.rounds, "seeds": seeds,
                          "setting": PAPER, "claims": CLAIMS, "differences": DIFFERENCES,
                          "table": [{"dataset": d, "stragglers": s, "method": m, **cell}
                                    for (d, s), cells in table.items()
                                    for m, cell in cells.items()],
                          "printed": lines, "runs": runs})
        print(f"figures in {path}")


if __name__ == "__main__":
    main()
