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
        "updates": sum(report.extras.get("updates", 0) for report in reports),
        "epsilon": next((report.extras["epsilon"] for report in reports
                         if "epsilon" in report.extras), None),
    }
