"""Per-step metrics: one JSON line per step in OUTPUT_DIR/metrics.jsonl, an
optional TensorBoard mirror, and a one-line progress display; at each
evaluation a few prompts as the model saw them, its responses and their
rewards in OUTPUT_DIR/samples.jsonl."""
from __future__ import annotations

import json
import math
import sys
import time
from pathlib import Path


class MetricsLog:
    def __init__(self, output_dir: Path, total_steps: int, tensorboard: bool, enabled: bool):
        self.enabled = enabled
        self.total = total_steps
        self.start = time.perf_counter()
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
        step = record["step"]
        done = step / max(self.total, 1)
        bar = "#" * int(30 * done) + "-" * (30 - int(30 * done))
        rewards = " ".join(f"{k.split('/')[1]}={v:.2f}" for k, v in record.items()
                           if k.startswith("reward/") and v is not None)
        elapsed = time.perf_counter() - self.start
        sys.stderr.write(f"\r[{bar}] step {step}/{self.total} {rewards} ({elapsed:.0f}s)")
        if step >= self.total:
            sys.stderr.write("\n")
        sys.stderr.flush()

    def close(self) -> None:
        if self.writer:
            self.writer.close()


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
