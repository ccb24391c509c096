"""One round's RL columns from every actor's report (pure functions)."""

from __future__ import annotations

import statistics


def rl_round_extras(reports) -> dict:
    returns = [r for report in reports for r in report.extras.get("returns", [])]
    evals = [r for report in reports for r in report.extras.get("eval_returns", [])]
    return {
        "env_steps": sum(report.extras.get("env_steps", 0) for report in reports),
        "episodes": len(returns),
        "return_mean": statistics.fmean(returns) if returns else None,
        "return_max": max(returns) if returns else None,
        "eval_return": statistics.fmean(evals) if evals else None,
        "eval_return_std": statistics.pstdev(evals) if evals else None,
        "eval_episodes": len(evals),
        # True: this round's evaluation is the best so far, its policy the one kept
        # (``rl.best``); every rank decided the same, None when the round was not evaluated.
        "new_best": next((report.extras["new_best"] for report in reports
                          if "new_best" in report.extras), None),
        "updates": sum(report.extras.get("updates", 0) for report in reports),
        **{key: next((report.extras[key] for report in reports if key in report.extras),
                     None)
           # dqn's epsilon; ppo's learner's means over the round's minibatches
           for key in ("epsilon", "approx_kl", "clip_fraction", "entropy", "value_loss",
                       # the evaluated policy's score: its mean over the evaluation's
                       # episodes and any confirming ones (``GreedyEvaluation``)
                       "eval_score", "eval_score_episodes")},
    }


def rl_round_parts(m) -> list[str]:
    """What an RL round's console line shows: steps, episodes, returns, epsilon, speed."""
    x = m.extras
    parts = [f"{x['env_steps']:,} steps", f"{x.get('episodes', 0)} episodes"]
    if x.get("return_mean") is not None:
        parts.append(f"return {x['return_mean']:.1f}")
    if x.get("eval_return") is not None:
        confirmed = (x.get("eval_score_episodes") or 0) > x.get("eval_episodes", 0)
        said = [f"{x['eval_score']:.1f} over {x['eval_score_episodes']}"] if confirmed else []
        said += ["best so far"] if x.get("new_best") else []
        parts.append(f"greedy {x['eval_return']:.1f}"
                     + (f" ({', '.join(said)})" if said else ""))
    if x.get("epsilon") is not None:
        parts.append(f"eps {x['epsilon']:.2f}")
    if x.get("approx_kl") is not None:
        parts.append(f"kl {x['approx_kl']:.4f}")
        parts.append(f"clipped {x['clip_fraction']:.0%}")
    parts.append(f"{m.samples_per_s:,.0f} steps/s")
    parts.append(f"{m.epoch_s:.2f} s")
    return parts
