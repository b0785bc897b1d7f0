"""The deployment targets: the shapes verl and TRL users run, each held to a
ratio measured within one run. Every ratio is measured `runs` times (each
time both sides of it, alternated, so a drifting machine lands on both) and
reported as the median and range of those runs, never a chosen one.

- `dara` at N = 2^20, K = 4, G = 16 against a well-written eager float32
  torch DARA (baselines.eager_dara), both calibrations: >= 10x;
- the same call with a shuffled `group_index` against contiguous groups: <= 2x;
- the token path (verl's shape, 256 x 16 responses, T = 2,048, K = 3,
  `preset="verl"`) against its memory floor (the mask read once and the
  float32 token output written once, at the copy bandwidth): <= 2x;
- verl 0.9.1's own `gdpo` through its dispatcher against `gdpo_fused`
  (shuffled uids, an int64 mask): >= 50x (skipped where verl is not importable);
- the paper's tool-calling batch (2,048 responses, K = 3, T = 8,192), `dara`
  with each calibration against the authors' per-group Python estimator
  (baselines.authors_style_dara): reported, no target;
- memory kept: the process's RSS growth over 200 verl-shaped calls whose T
  changes every call, against a plain torch loop making the same tensors;
- the CPU extension's build on 2 cores: < 120 s (`--build`).
"""
from __future__ import annotations

import copy
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import torch
from baselines import authors_style_dara, eager_dara
from failure import failure_reason

import dara_kernels as dk
from dara_kernels.check.batches import (
    PAPER_TOKENS,
    VERL_GROUP,
    VERL_K,
    VERL_PROMPTS,
    VERL_TOKENS,
    paper_batch,
    token_mask,
    verl_shaped_batch,
)

ROOT = Path(__file__).resolve().parents[1]
HEADLINE_N, HEADLINE_K, HEADLINE_G = 1 << 20, 4, 16
MASK_DTYPES = (torch.bool, torch.uint8, torch.int64, torch.float32)
MEMORY_CALLS = 200
BUILD_LIMIT_S = 120


def median_seconds(fn, calls: int) -> float:
    fn()
    times = []
    for _ in range(calls):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def batch(n: int, k: int, g: int, shuffled: bool, seed: int = 0):
    gen = torch.Generator().manual_seed(seed)
    rewards = (torch.rand(n, k, generator=gen) < torch.linspace(0.05, 0.9, k)).float()
    ids = torch.randperm(n, generator=gen) // g if shuffled else torch.arange(n) // g
    return rewards, ids


def ratio_row(name: str, ratios: list[float], target: str, met, unit: str = "x", **extra) -> dict:
    value = statistics.median(ratios)
    return {"name": name, "value": value, "low": min(ratios), "high": max(ratios), "unit": unit, "runs": ratios,
            "target": target, "met": bool(met(value)), **extra}


def headline_rows(runs: int, calls: int) -> list[dict]:
    rewards, ids = batch(HEADLINE_N, HEADLINE_K, HEADLINE_G, shuffled=True)
    rows = []
    for calibration in ("positive", "symmetric"):
        ratios = []
        for _ in range(runs):
            ours = median_seconds(lambda c=calibration: dk.fused_advantage(
                rewards, HEADLINE_G, calibration=c, backend="cpu"), calls)
            eager = median_seconds(lambda c=calibration: eager_dara(rewards, HEADLINE_G, c), max(3, calls // 4))
            ratios.append(eager / ours)
        rows.append(ratio_row(f"dara ({calibration}) N=2^20 K=4 G=16 vs eager float32 torch", ratios, ">= 10x",
                              lambda v: v >= 10))
    ratios = []
    for _ in range(runs):
        contiguous = median_seconds(lambda: dk.fused_advantage(rewards, HEADLINE_G, backend="cpu"), calls)
        shuffled = median_seconds(lambda: dk.fused_advantage(rewards, group_index=ids, backend="cpu"), calls)
        ratios.append(shuffled / contiguous)
    rows.append(ratio_row("dara N=2^20 shuffled group_index vs contiguous", ratios, "<= 2x", lambda v: v <= 2))
    return rows


def copy_bandwidth() -> float:
    """Bytes per second of a 256 MiB copy into memory already touched (read + write counted)."""
    src = torch.ones((256 << 20) // 4)
    dst = torch.empty_like(src)
    return 2 * src.numel() * 4 / median_seconds(lambda: dst.copy_(src), 10)


def token_rows(runs: int, calls: int) -> list[dict]:
    n = VERL_PROMPTS * VERL_GROUP
    rows = []
    for dtype in MASK_DTYPES:
        rewards, ids, mask = verl_shaped_batch(dtype)
        ratios = []
        for _ in range(runs):
            seconds = median_seconds(lambda r=rewards, i=ids, m=mask: dk.fused_advantage(
                r, group_index=i, method="gdpo", preset="verl", response_mask=m, backend="cpu"), calls)
            floor = (mask.numel() * mask.element_size() + mask.numel() * 4) / copy_bandwidth()
            ratios.append(seconds / floor)
        rows.append(ratio_row(f"token path N={n} T={VERL_TOKENS} mask {str(dtype).split('.')[-1]} vs memory floor",
                              ratios, "<= 2x", lambda v: v <= 2))
    return rows


def verl_batch(prompts: int, group: int, tokens: int, k: int):
    from verl import DataProto

    n = prompts * group
    rng = np.random.default_rng(0)
    uids = np.repeat(np.array([f"prompt-{g}" for g in range(prompts)], dtype=object), group)[rng.permutation(n)]
    mask = token_mask(n, tokens, torch.int64)
    names = ["accuracy", "format", "length"][:k]
    rates = {"accuracy": 0.3, "format": 0.002, "length": 0.5}
    components = {name: (rng.random(n) < rates[name]).astype(np.float32) for name in names}
    tensors = {"prompts": torch.zeros(n, 8, dtype=torch.long),
               "attention_mask": torch.cat([torch.ones(n, 8, dtype=torch.int64), mask], 1),
               "response_mask": mask, "token_level_rewards": torch.zeros(n, tokens)}
    return DataProto.from_dict(tensors=tensors, non_tensors={"uid": uids, **components}), names


def verl_rows(runs: int) -> list[dict]:
    try:
        from verl.trainer.config import AlgoConfig
        from verl.trainer.ppo import ray_trainer

        from dara_kernels.integrations import verl as dara_verl
    except ImportError as err:
        print(f"  verl rows skipped: verl is not importable here ({err})")
        return []
    dara_verl.install()  # registers gdpo_fused and dara
    data, keys = verl_batch(VERL_PROMPTS, VERL_GROUP, VERL_TOKENS, VERL_K)
    config = AlgoConfig(gdpo_reward_keys=keys)

    def estimator(name, calls):
        work = copy.deepcopy(data)
        return median_seconds(lambda: ray_trainer.compute_advantage(work, adv_estimator=name, config=config), calls)

    ratios, fused = [], []
    for _ in range(runs):
        theirs, ours = estimator("gdpo", 1), estimator("gdpo_fused", 10)
        ratios.append(theirs / ours)
        fused.append(ours * 1e3)
    return [ratio_row("verl dispatcher: verl's gdpo vs gdpo_fused", ratios, ">= 50x", lambda v: v >= 50,
                      gdpo_fused_ms=statistics.median(fused))]


def paper_rows(runs: int, calls: int) -> list[dict]:
    """The paper's tool-calling batch through the verl preset, against the authors' per-group estimator."""
    rewards, ids, mask = paper_batch()
    n, uids = rewards.shape[0], ids.tolist()
    rows = []
    for calibration in ("positive", "symmetric"):
        ratios, ours_ms, theirs_ms = [], [], []
        for _ in range(runs):
            ours = median_seconds(lambda c=calibration: dk.fused_advantage(
                rewards, group_index=ids, calibration=c, preset="verl", response_mask=mask, backend="cpu"), calls)
            theirs = median_seconds(lambda c=calibration: authors_style_dara(rewards, uids, mask, c), 1)
            ratios.append(theirs / ours)
            ours_ms.append(ours * 1e3)
            theirs_ms.append(theirs * 1e3)
        rows.append(ratio_row(f"paper tool-calling batch N={n} K=3 T={PAPER_TOKENS}, dara ({calibration}) vs the "
                              "authors' per-group estimator", ratios, "-", lambda v: True,
                              ours_ms=statistics.median(ours_ms), theirs_ms=statistics.median(theirs_ms)))
    return rows


MEMORY_CHILD = """
import resource, sys, torch
import dara_kernels as dk
torch.set_num_threads(1)
n, calls, mode = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3]
gen = torch.Generator().manual_seed(0)
rewards = (torch.rand(n, 3, generator=gen) < torch.tensor([0.5, 0.1, 0.7])).float()
ids = torch.randperm(n, generator=gen) // 16
def rss_mib():
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * resource.getpagesize() / 2**20
def call(t):
    mask = torch.arange(t)[None, :] < torch.randint(t // 8, t + 1, (n, 1), generator=gen)
    mask = mask.to(torch.int64)
    if mode == "dara":
        out = dk.fused_advantage(rewards, group_index=ids, method="gdpo", preset="verl", response_mask=mask)
        return out.advantages, out.token_advantages
    advantages = torch.empty(n)
    return advantages, advantages[:, None] * mask
call(1024)
before = rss_mib()
for i in range(calls):
    kept = call(1024 + (i * 977) % 3072)  # T changes every call, 1,024 to 4,095
    del kept
print(rss_mib() - before)
"""


def memory_rows() -> list[dict]:
    n = VERL_PROMPTS * VERL_GROUP
    growth = {}
    for mode in ("dara", "torch"):
        out = subprocess.run([sys.executable, "-c", MEMORY_CHILD, str(n), str(MEMORY_CALLS), mode],
                             capture_output=True, text=True, check=True, env={**os.environ, "PYTHONPATH": str(ROOT)})
        growth[mode] = float(out.stdout.strip().splitlines()[-1])
    return [ratio_row(f"RSS growth over {MEMORY_CALLS} verl-shaped calls, T changing every call (MiB)",
                      [growth["dara"]], f"plain torch loop: {growth['torch']:.0f} MiB",
                      lambda v: v <= growth["torch"], unit="MiB", torch_loop_mib=growth["torch"])]


def build_rows(runs: int) -> list[dict]:
    """The CPU extension built from a clean copy of the checkout with 2 jobs."""
    seconds = []
    for _ in range(runs):
        with tempfile.TemporaryDirectory() as tmp:
            src = Path(tmp) / "src"
            shutil.copytree(ROOT, src, ignore=shutil.ignore_patterns(".git", ".venv*", "build", "*.so", "runs"))
            t0 = time.perf_counter()
            subprocess.run([sys.executable, "setup.py", "build_ext", "--inplace"], cwd=src, check=True,
                           capture_output=True, env={**os.environ, "MAX_JOBS": "2", "DARA_BUILD_CUDA": "0"})
            seconds.append(time.perf_counter() - t0)
    return [ratio_row("CPU extension build, 2 jobs (s)", seconds, f"< {BUILD_LIMIT_S} s",
                      lambda v: v < BUILD_LIMIT_S, unit="s")]


def run_targets(runs: int, calls: int, build: bool) -> list[dict]:
    rows = []
    for name, make in (("headline", lambda: headline_rows(runs, calls)),
                       ("token path", lambda: token_rows(runs, calls)),
                       ("verl dispatcher", lambda: verl_rows(runs)),
                       ("paper batch", lambda: paper_rows(runs, max(3, calls // 4))),
                       ("memory", memory_rows),
                       ("build", lambda: build_rows(1) if build else [])):
        print(f"[targets] {name}", flush=True)
        try:
            rows += make()
        except Exception as err:  # noqa: BLE001 - a target that cannot be measured is a row; the run goes on
            rows.append({"name": name, "failed": failure_reason(err)})
            print(f"  {name} failed: {rows[-1]['failed']}", flush=True)
    return rows


def format_targets(rows: list[dict]) -> str:
    head = f"{'row':<92} {'median':>9} {'range':>17} {'target':<24} met"
    lines = [head, "-" * len(head)]
    for r in rows:
        if "failed" in r:
            lines.append(f"{r['name']:<92} failed: {r['failed']}")
            continue
        unit = r["unit"]
        lines.append(f"{r['name']:<92} {r['value']:>8.2f}{unit if unit == 'x' else ''} "
                     f"{r['low']:>8.2f}-{r['high']:<8.2f} {r['target']:<24} {'yes' if r['met'] else 'NO'}")
    return "\n".join(lines)
