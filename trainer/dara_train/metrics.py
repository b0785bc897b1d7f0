"""Per-step metrics: one JSON line per step in OUTPUT_DIR/metrics.jsonl, an
optional TensorBoard mirror, and a progress display; at each
evaluation a few prompts as the model saw them, its responses and their
rewards in OUTPUT_DIR/samples.jsonl."""
from __future__ import annotations

import json
import math
import sys
import time
from pathlib import Path

PLAIN_LINES = 20   # progress lines over a run (one every 5%) when stderr is not a terminal


class MetricsLog:
    def __init__(self, output_dir: Path, total_steps: int, tensorboard: bool, enabled: bool):
        self.enabled = enabled
        self.total = total_steps
        self.start = time.perf_counter()
        self.plain_mark = -1
        self.path = output_dir / "metrics.jsonl"
        self.samples_path = output_dir / "samples.jsonl"
        self.writer = None
        if enabled and tensorboard:
            from torch.utils.tensorboard import SummaryWriter

            self.writer = SummaryWriter(str(output_dir / "tensorboard"))

    def log(self, record: dict) -> None:
        if not self.enabled:
            return
        clean = append_json_line(self.path, record)
        if self.writer:
            for key, value in clean.items():
                if key != "step" and isinstance(value, (int, float)):
                    self.writer.add_scalar(key, value, record["step"])
        self.progress(record)

    def samples(self, records: list[dict]) -> None:
        if self.enabled:
            for record in records:
                append_json_line(self.samples_path, record)

    def progress(self, record: dict) -> None:
        """On a terminal a bar redrawn in place; elsewhere (a file, a CI log) a plain line at the first
        step, every 1/PLAIN_LINES of the run and the last step, rather than one line of carriage returns."""
        step = record["step"]
        done = step / max(self.total, 1)
        rewards = " ".join(f"{k.split('/')[1]}={v:.2f}" for k, v in record.items()
                           if k.startswith("reward/") and v is not None)
        status = " ".join(filter(None, (f"step {step}/{self.total}", rewards,
                                        f"({time.perf_counter() - self.start:.0f}s)")))
        if sys.stderr.isatty():
            bar = "#" * int(30 * done) + "-" * (30 - int(30 * done))
            sys.stderr.write(f"\r[{bar}] {status}" + ("\n" if step >= self.total else ""))
        elif step * PLAIN_LINES // max(self.total, 1) > self.plain_mark:
            self.plain_mark = step * PLAIN_LINES // max(self.total, 1)
            sys.stderr.write(f"{100 * done:3.0f}% {status}\n")
        sys.stderr.flush()

    def close(self) -> None:
        if self.writer:
            self.writer.close()


def applied_weight(density: float, weight: float) -> float | None:
    """The weight the op applied to a reward's advantages: `weights` where the reward was active in some
    group, None where it was active in none (docs/spec.md: every A_jk is then 0, and DARA reports the
    cap `max_weight` there while it would apply b_k: a weight that did nothing)."""
    return weight if density > 0 else None


def finite_or_none(record: dict) -> dict:
    """JSON has no NaN: a reward that could not score a response, or a missing metric, is null."""
    return {k: (finite_or_none(v) if isinstance(v, dict) else
                None if isinstance(v, float) and not math.isfinite(v) else v) for k, v in record.items()}


def append_json_line(path: Path, record: dict) -> dict:
    clean = finite_or_none(record)
    with path.open("a") as fh:
        fh.write(json.dumps(clean) + "\n")
    return clean


def read_metrics(output_dir) -> list[dict]:
    path = Path(output_dir) / "metrics.jsonl"
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
