"""What a run learned, read from its metrics: held-out evaluation at the
first and last evaluation, and the first step at which each reward's training
mean (over a trailing window) reaches its threshold. The learning-speed
benchmark uses the same definitions."""
from __future__ import annotations

from typing import Optional

DEFAULT_THRESHOLD = 0.8
WINDOW = 5   # steps averaged, so one lucky batch does not count as learned


def steps_to_threshold(records: list[dict], reward: str, threshold: float, start: int = 0,
                       window: int = WINDOW) -> Optional[int]:
    """Steps after `start` until the trailing mean of reward/<reward>/mean first
    reaches `threshold` (None: never)."""
    key = f"reward/{reward}/mean"
    values = [(r["step"], r[key]) for r in records if r.get(key) is not None and r["step"] > start]
    for i in range(window - 1, len(values)):
        if sum(v for _, v in values[i - window + 1:i + 1]) / window >= threshold:
            return values[i][0] - start
    return None


def first_joint_step(steps: dict) -> Optional[int]:
    """Steps until every reward has reached its threshold (None if one never did)."""
    return None if any(s is None for s in steps.values()) else max(steps.values(), default=None)


def thresholds_for(rewards: list[str], configured: dict) -> dict:
    return {name: float(configured.get(name, DEFAULT_THRESHOLD)) for name in rewards}


def sampling_summary(records: list[dict]) -> dict:
    """Dynamic sampling over the run's steps: medians of the responses generated and the acceptance rate,
    and the steps that found no informative group (no update); {} for a run without it."""
    import statistics

    steps = [r for r in records if "sampling/acceptance_rate" in r]
    if not steps:
        return {}
    return {"responses": statistics.median(r["sampling/responses"] for r in steps),
            "acceptance": statistics.median(r["sampling/acceptance_rate"] for r in steps),
            "rounds": statistics.median(r["sampling/rounds"] for r in steps),
            "skipped": [r["step"] for r in steps if not r["sampling/updated"]], "steps": len(steps)}


def summarize(records: list[dict], rewards: list[str], thresholds: dict, start: int = 0) -> dict:
    evals = [r for r in records if any(k.startswith("eval/") for k in r)]
    steps = {name: steps_to_threshold(records, name, thresholds[name], start) for name in rewards}
    return {
        "eval_first": {k[5:]: v for k, v in evals[0].items() if k.startswith("eval/")} if evals else {},
        "eval_last": {k[5:]: v for k, v in evals[-1].items() if k.startswith("eval/")} if evals else {},
        "eval_steps": [evals[0]["step"], evals[-1]["step"]] if evals else [],
        "steps_to_threshold": steps,
        "steps_to_all": first_joint_step(steps),
        "thresholds": thresholds,
        "start": start,
        "sampling": sampling_summary(records),
    }


def format_summary(summary: dict, rewards: list[str]) -> list[str]:
    first, last = summary["eval_first"], summary["eval_last"]
    lines = []
    if first:
        s0, s1 = summary["eval_steps"]
        lines.append(f"held-out eval (greedy), step {s0} -> {s1}:")
        for name in rewards:
            lines.append(f"  {name:<10} {first.get(name, float('nan')):.2f} -> {last.get(name, float('nan')):.2f}")
    after = f" after step {summary['start']}" if summary["start"] else ""
    lines.append(f"steps until the training mean ({WINDOW}-step window) reaches its threshold{after}:")
    for name in rewards:
        steps = summary["steps_to_threshold"][name]
        lines.append(f"  {name:<10} >= {summary['thresholds'][name]:.2f}: "
                     + (f"step {steps}" if steps is not None else "not reached"))
    sampling = summary.get("sampling")
    if sampling:
        skipped = sampling["skipped"]
        lines.append(f"dynamic sampling, median per step: {sampling['responses']:g} responses generated in "
                     f"{sampling['rounds']:g} rounds, acceptance rate {sampling['acceptance']:.2f}; "
                     + (f"{len(skipped)} of {sampling['steps']} steps found no informative group and made no "
                        f"update (steps {', '.join(map(str, skipped[:10]))}{', ...' if len(skipped) > 10 else ''})"
                        if skipped else "every step found an informative group"))
    return lines
