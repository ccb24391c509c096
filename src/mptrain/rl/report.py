"""What an RL run says about itself: banner, summary.json, closing lines, and the return
curves (against environment steps and against seconds)."""

from __future__ import annotations

import os
import platform
from pathlib import Path

import torch

from ..report.outputs import outputs_line, save_state_dict, write_json, write_jsonl
from ..report.words import count
from ..report.plots import new_figure, save_png
from .nets import DuelingQNetwork


def banner_lines(config, shape, model, plan) -> list[str]:
    params = sum(p.numel() for p in model.parameters())
    network = config.net or ("built-in, dueling head" if isinstance(model, DuelingQNetwork)
                             else "built-in")
    return [f"rl [bold]{config.algo}[/bold] · {count(plan.workers, 'actor process')} × "
            f"{count(plan.threads, 'thread')} ({plan.cores} usable cores) · start method "
            f"{plan.start_method} ({plan.start_reason})",
            f"env {shape.name}: {shape.obs_dim} observations, {shape.n_actions} actions · "
            f"{count(config.steps, 'step')} in {count(config.units, 'round')} of "
            f"{config.round_steps:,} · seed {config.seed}",
            f"network {network}: {params:,} parameters · adam lr "
            f"{config.learning_rate:g} · gamma {config.gamma:g}"]


def build_summary(config, plan, rows: list[dict], wall_s: float) -> dict:
    evaluated = [row for row in rows if row.get("eval_return") is not None]
    last_eval = evaluated[-1] if evaluated else None
    train_s = sum(row["epoch_s"] for row in rows)
    steps = rows[-1]["env_steps"] if rows else 0
    summary = {
        "algo": config.algo, "env": config.env, "workers": plan.workers,
        "threads_per_worker": plan.threads, "start_method": plan.start_method,
        "seed": config.seed, "steps_planned": config.steps, "rounds_done": len(rows),
        "env_steps": steps,
        "env_steps_per_s": (sum(row["train_samples"] for row in rows) / train_s
                            if train_s > 0 else None),
        "eval_return": last_eval["eval_return"] if last_eval else None,
        "eval_return_std": last_eval["eval_return_std"] if last_eval else None,
        "eval_episodes": last_eval["eval_episodes"] if last_eval else 0,
        "wall_s": wall_s, "config": config.as_dict(),
        "torch": torch.__version__, "python": platform.python_version(),
        "cores": plan.cores, "logical_cpus": os.cpu_count(),
    }
    best = next((row for row in reversed(rows) if row.get("new_best")), None)
    summary.update(best_summary(config, best))
    if config.target_return is not None:
        reached = next((row for row in evaluated
                        if row["eval_return"] >= config.target_return), None)
        summary["target_return"] = config.target_return
        summary["target_reached_at_round"] = reached["epoch"] if reached else None
        summary["target_reached_at_steps"] = reached["env_steps"] if reached else None
        summary["target_reached_at_s"] = reached["elapsed_s"] if reached else None
    return summary


def best_summary(config, best: dict | None) -> dict:
    """The summary's entries of the best evaluation (``best``: its round's row, None when
    no evaluation kept a policy) and which policy the run hands back."""
    return {"best_eval_return": _score(best) if best else None,
            "best_eval_episodes": (best.get("eval_score_episodes") or best["eval_episodes"])
            if best else None,
            "best_at_steps": best["env_steps"] if best else None,
            "best_at_round": best["epoch"] if best else None,
            "kept": config.keep if best else "final"}


def _score(row: dict) -> float:
    """An evaluated round's score: with confirming episodes, the mean over all of them (a
    row of before them has only its evaluation's)."""
    return row["eval_score"] if row.get("eval_score") is not None else row["eval_return"]


def kept_line(summary: dict, out_dir: Path | None) -> str | None:
    """Which policy the run hands back (``model.pt``, ``fit()``'s ``model``), and the other."""
    if summary.get("best_at_round") is None:
        return None
    over = f" over {summary['best_eval_episodes']} episodes" \
        if summary.get("best_eval_episodes") else ""
    best = (f"greedy {summary['best_eval_return']:.1f}{over} at "
            f"{summary['best_at_steps']:,} steps")
    files = out_dir is not None
    if summary["best_at_round"] == summary["rounds_done"]:
        return "the final policy is the best evaluated" + (
            " (model.pt, best.pt, final.pt)" if files else "")
    if summary["kept"] == "best":
        return (f"kept the best policy ({best}){' as model.pt and best.pt' if files else ''}"
                f"; the final one{' is final.pt' if files else ''}, greedy "
                f"{summary['eval_return']:.1f}")
    return (f"kept the final policy{' as model.pt and final.pt' if files else ''}; the best "
            f"({best}){' is best.pt' if files else ''}")


def result_lines(summary: dict, out_dir: Path | None) -> list[str]:
    if summary["eval_return"] is not None:
        score = f"greedy return {summary['eval_return']:.1f} ± " \
                f"{summary['eval_return_std']:.1f} over {summary['eval_episodes']} episodes"
    else:
        score = "no evaluation completed"
    line = f"[bold]done[/bold]: {score} · {summary['env_steps']:,} env steps · " \
           f"{summary['wall_s']:.1f} s wall"
    if summary.get("env_steps_per_s"):
        line += f" · {summary['env_steps_per_s']:,.0f} env steps/s"
    lines = [line]
    if summary.get("target_return") is not None:
        at = summary.get("target_reached_at_steps")
        lines.append(f"target return {summary['target_return']:g} reached at "
                     f"{at:,} steps ({summary['target_reached_at_s']:.1f} s)" if at
                     else f"target return {summary['target_return']:g} not reached")
    kept = kept_line(summary, out_dir)
    if kept is not None:
        lines.append(kept)
    if out_dir is not None:
        lines.append(outputs_line(out_dir))
    return lines


def write_outputs(out_dir: Path, rows: list[dict], final, best, summary: dict) -> None:
    """metrics.jsonl, the policies (``model.pt`` the one ``summary["kept"]`` names, and
    ``final.pt`` and ``best.pt`` by name), the curves, summary.json."""
    write_jsonl(out_dir / "metrics.jsonl", rows)
    save_state_dict(out_dir / "final.pt", final)
    if summary.get("best_at_round") is not None:
        save_state_dict(out_dir / "best.pt", best)
    save_state_dict(out_dir / "model.pt", best if summary.get("kept") == "best" else final)
    if rows:
        plot_returns(out_dir / "curves.png", rows,
                     f"{summary['env']} · {summary['algo']} × {summary['workers']}")
    write_json(out_dir / "summary.json", summary)


def plot_returns(path: Path, rows: list[dict], title: str) -> None:
    """Training and greedy returns against environment steps and against seconds, and a
    star where the best evaluated policy was found."""
    figure = new_figure((10, 4))
    axes = figure.subplots(1, 2)
    best = next((row for row in reversed(rows) if row.get("new_best")), None)
    for axis, x_key, x_label in ((axes[0], "env_steps", "environment steps"),
                                 (axes[1], "elapsed_s", "seconds")):
        for key, label in (("return_mean", "training episodes"),
                           ("eval_return", "greedy evaluation")):
            points = [(row[x_key], row[key]) for row in rows
                      if row.get(key) is not None and row.get(x_key) is not None]
            if points:
                axis.plot(*zip(*points), marker="o" if len(points) <= 50 else None,
                          label=label)
        if best is not None and best.get(x_key) is not None:
            axis.plot([best[x_key]], [best["eval_return"]], "*", markersize=14,
                      label="best evaluated")
        axis.set(xlabel=x_label, ylabel="return")
        axis.grid(alpha=0.3)
        axis.legend()
    figure.suptitle(title)
    save_png(figure, path)
