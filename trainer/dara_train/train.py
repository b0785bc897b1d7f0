"""The training loop: rollout -> rewards -> fused advantages -> PPO update ->
weight sync, with per-step metrics, periodic evaluation and checkpoints."""
from __future__ import annotations

import copy
import dataclasses
import random
import sys
import time
from pathlib import Path

import torch
import torch.distributed as dist
import yaml

import dara_kernels as dk
from dara_kernels.group_signal import CRITERIA, Sampling

from .checkpoint import latest_checkpoint, load_checkpoint, save_checkpoint
from .config import TrainConfig, to_dict
from .distributed import all_max, all_sum, full_state_dict, init_distributed, shard_policy
from .metrics import MetricsLog, applied_weight, read_metrics
from .model import build_policy
from .plot import plot_run
from .ppo import TrainBatch, ppo_loss, token_logprobs
from .pretrain import pretrain
from .rollout import build_engine
from .sampling import Group, Sampled, check_sampling, first_round_groups, next_round_groups, round_rng
from .summary import format_summary, summarize, thresholds_for
from .tasks import Response, build_task


def step_seed(seed: int, step: int, rank: int) -> int:
    return (seed * 1_000_003 + step * 10_007 + rank) % (2 ** 31)


def eval_seed(seed: int, step: int) -> int:
    """The sampled evaluation's seed: its own stream, apart from every training step's (step_seed), so an
    evaluation changes no training rollout."""
    return random.Random(f"eval:{seed}:{step}").randrange(2 ** 31)


def build_batch(prompt_ids, generations, pad_id: int, device) -> tuple[torch.Tensor, ...]:
    """Right-padded rows of prompt + response: ids, attention mask, response mask and the engine's
    log-probability of each response token, at the positions token_logprobs gives them."""
    rows = [prompt_ids[g.prompt_index] + g.token_ids for g in generations]
    width = max(len(r) for r in rows)
    ids = torch.full((len(rows), width), pad_id, dtype=torch.long)
    attention = torch.zeros_like(ids)
    response = torch.zeros_like(ids)
    sampled = torch.zeros(ids.shape)
    for i, (g, row) in enumerate(zip(generations, rows)):
        ids[i, :len(row)] = torch.tensor(row)
        attention[i, :len(row)] = 1
        start = len(prompt_ids[g.prompt_index])
        response[i, start:len(row)] = 1
        sampled[i, start:len(row)] = torch.tensor(g.logprobs)
    return ids.to(device), attention.to(device), response.to(device), sampled.to(device)


def rollout_logprob_diff(sampled: torch.Tensor, trainer: torch.Tensor, response_mask: torch.Tensor) -> dict:
    """|engine - trainer| log-probability of the sampled tokens over all ranks' response tokens: near 0 when
    the engine samples from the policy being trained (a stale or wrong weight sync shows here first)."""
    diff = (sampled - trainer).abs() * response_mask
    sums = all_sum(torch.stack([diff.sum(), response_mask.sum()]).double().cpu())
    return {"rollout/logprob_diff_mean": (sums[0] / sums[1].clamp(min=1)).item(),
            "rollout/logprob_diff_max": all_max(diff.max().reshape(1).cpu()).item()}


def clip_range(optim_cfg) -> tuple[float, float]:
    """(low, high): the PPO ratio is clipped to [1 - low, 1 + high]; optim.clip_low and optim.clip_high
    default to optim.clip_ratio."""
    low = optim_cfg.clip_ratio if optim_cfg.clip_low is None else optim_cfg.clip_low
    high = optim_cfg.clip_ratio if optim_cfg.clip_high is None else optim_cfg.clip_high
    if not (0 <= low < 1 and high >= 0):
        raise ValueError(f"optim clip range: low={low} must be in [0, 1) and high={high} at least 0")
    return low, high


def update(model, optimizer, batch: TrainBatch, optim_cfg, temperature: float = 1.0) -> dict:
    """PPO epochs over mini-batches. Losses are divided by the global count of
    tokens (or sequences) per mini-batch times the world size, because FSDP
    averages gradients over ranks: the update equals a one-process update on
    the whole batch."""
    n = batch.input_ids.shape[0]
    world = dist.get_world_size()
    chunks = torch.arange(n, device=batch.input_ids.device).chunk(optim_cfg.mini_batches)
    stats = {"loss": 0.0, "clip_fraction": 0.0, "grad_norm": 0.0, "entropy": 0.0}
    clip_low, clip_high = clip_range(optim_cfg)
    updates = 0
    for _ in range(optim_cfg.ppo_epochs):
        for rows in chunks:
            mask = batch.response_mask[rows].float()
            count = mask.sum() if optim_cfg.loss_agg == "token-mean" else (mask.sum(1) > 0).float().sum()
            normaliser = all_sum(count.reshape(1)).item() / world
            logp, entropy = token_logprobs(model, batch.input_ids[rows], batch.attention_mask[rows],
                                           temperature, with_entropy=True)
            loss, extra = ppo_loss(logp, batch, rows, clip_low, optim_cfg.kl_coef, optim_cfg.loss_agg,
                                   max(normaliser, 1e-8), entropy, optim_cfg.entropy_coef, clip_high)
            loss.backward()
            grad_norm = torch.nn.utils.clip_grad_norm_(model.parameters(), optim_cfg.grad_clip)
            optimizer.step()
            optimizer.zero_grad(set_to_none=True)
            stats["loss"] += all_sum(loss.detach().reshape(1)).item()
            stats["clip_fraction"] += extra["clip_fraction"]
            stats["entropy"] += extra["entropy"]
            grad_norm = grad_norm.full_tensor() if hasattr(grad_norm, "full_tensor") else grad_norm
            stats["grad_norm"] += float(grad_norm)
            updates += 1
    return {k: v / max(updates, 1) for k, v in stats.items()}


def reward_metrics(names, rewards: torch.Tensor, out) -> dict:
    valid = ~torch.isnan(rewards)
    sums = all_sum(torch.cat([torch.where(valid, rewards, 0.0).sum(0), valid.float().sum(0)]))
    k = len(names)
    record = {}
    for i, name in enumerate(names):
        record[f"reward/{name}/mean"] = (sums[i] / sums[k + i]).item() if sums[k + i] > 0 else float("nan")
        record[f"density/{name}"] = out.density[i].item()
        record[f"weight/{name}"] = out.weights[i].item()
        record[f"applied_weight/{name}"] = applied_weight(out.density[i].item(), out.weights[i].item())
        record[f"energy/{name}"] = out.energy[i].item()
        record[f"weighted_energy/{name}"] = out.weighted_energy[i].item()
    return record


def to_responses(tokenizer, generations) -> list[Response]:
    """What the rewards read: the reply's text (after what the chat template opened of it) without the stop
    token, and its length in generated tokens."""
    out = []
    for g in generations:
        tokens = g.token_ids[:-1] if g.finished else g.token_ids
        out.append(Response(tokenizer.reply_prefix + tokenizer.decode(tokens), len(tokens), g.finished))
    return out


# The op's batch counts of group signal (docs/spec.md, Group signal), logged over the step's candidate groups.
SIGNAL_COUNTS = ("informative_groups", "sum_informative_groups", "conflict_groups")


class Trainer:
    def __init__(self, cfg: TrainConfig, resume: bool = False):
        self.cfg = cfg
        self.rank, self.world, self.device = init_distributed()
        self.criterion = check_sampling(cfg.rollout, self.world)
        clip_range(cfg.optim)
        torch.manual_seed(cfg.seed + self.rank)
        self.output_dir = Path(cfg.output_dir)
        self.output_dir.mkdir(parents=True, exist_ok=True)
        if self.rank == 0:
            (self.output_dir / "config.yaml").write_text(yaml.safe_dump(to_dict(cfg), sort_keys=False))
        self.task = build_task(cfg.task)
        policy, self.tokenizer = build_policy(cfg.model, cfg.seed)
        self.pretrained = {}
        if cfg.pretrain.steps and not resume:
            if cfg.model.path:
                raise ValueError("pretrain.steps: pre-training is for the tiny model (model.path unset); a local "
                                 "model starts as it is")
            self.pretrained = pretrain(policy, self.tokenizer, self.task, cfg.pretrain)
        max_len = cfg.model.max_positions
        self.engine = build_engine(cfg.rollout.engine, policy, self.tokenizer, self.output_dir / "inference-model",
                                   cfg.seed, max_len, self.device, cfg.model.path)
        self.reference = copy.deepcopy(policy).to(self.device).eval() if cfg.optim.kl_coef else None
        self.model = shard_policy(policy, self.device, cfg.mixed_precision)
        self.optimizer = torch.optim.AdamW(self.model.parameters(), lr=cfg.optim.lr,
                                           weight_decay=cfg.optim.weight_decay)
        self.step = 0
        if resume:
            path = latest_checkpoint(self.output_dir)
            if path is None:
                raise FileNotFoundError(f"--resume: no complete checkpoint under {self.output_dir}/checkpoints")
            self.step = load_checkpoint(path, self.model, self.optimizer)
            self.engine.sync(full_state_dict(self.model))
        self.log = MetricsLog(self.output_dir, cfg.steps, cfg.tensorboard, enabled=self.rank == 0)

    def advantages(self, rewards: torch.Tensor, lengths: torch.Tensor):
        options = dict(self.cfg.advantage.options)
        # The task's reward names, so that advantage.options can gate rewards by name (reward_gates).
        options.setdefault("reward_names", list(self.cfg.task.rewards))
        if self.world > 1:
            options["process_group"] = dist.group.WORLD
        return dk.fused_advantage(rewards, group_size=self.cfg.rollout.group_size,
                                  method=self.cfg.advantage.method, response_lengths=lengths, **options)

    def generate_round(self, groups: int, round_index: int, times: dict) -> tuple[list[Group], torch.Tensor]:
        """`groups` prompts drawn for all ranks (this rank keeps its slice), G responses each, scored (the
        scoring's seconds added to times["time/reward"])."""
        cfg = self.cfg
        prompts = self.task.sample(round_rng(step_seed(cfg.seed, self.step, 0), round_index), groups)
        per_rank = groups // self.world
        prompts = prompts[self.rank * per_rank:(self.rank + 1) * per_rank]
        prompt_ids = [self.tokenizer.encode_prompt(p.messages) for p in prompts]
        seed = step_seed(cfg.seed, self.step, self.rank)
        generations = self.engine.generate(prompt_ids, cfg.rollout.group_size, cfg.rollout.max_new_tokens,
                                           cfg.rollout.temperature, cfg.rollout.top_p,
                                           round_rng(seed, round_index).randrange(2 ** 31) if round_index else seed)
        t0 = time.perf_counter()
        rewards = self.task.score(cfg.task.rewards, [prompts[g.prompt_index] for g in generations],
                                  to_responses(self.tokenizer, generations))
        times["time/reward"] = times.get("time/reward", 0.0) + time.perf_counter() - t0
        g = cfg.rollout.group_size
        return [Group(prompts[i], prompt_ids[i], generations[i * g:(i + 1) * g], rewards[i * g:(i + 1) * g])
                for i in range(len(prompts))], rewards

    def gather_groups(self, groups: list[Group]) -> list[Group]:
        """Every rank's groups, in rank order, on every rank."""
        if self.world == 1:
            return groups
        gathered = [None] * self.world
        dist.all_gather_object(gathered, groups)
        return [group for rank_groups in gathered for group in rank_groups]

    def sample(self, times: dict) -> Sampled:
        """The step's rollout. Without dynamic sampling: rollout.prompts_per_step groups, all trained on.
        With it: rounds of candidate groups until prompts_per_step are accepted or max_rounds are spent;
        every rank sees every rank's accepted groups in the same order, so all decide alike and run the
        same rounds, and each trains on an equal, contiguous share of the first accepted ones."""
        ro = self.cfg.rollout
        self.task.set_step(self.step + 1)
        if self.criterion == "off":
            groups, rewards = self.generate_round(ro.prompts_per_step, 0, times)
            return Sampled(groups, rewards, None, {"sampling/rounds": 1,
                                                   "sampling/candidate_groups": ro.prompts_per_step})
        target, cap = ro.prompts_per_step, first_round_groups(ro)
        accepted, rewards, first = [], [], None
        counts = dict.fromkeys(SIGNAL_COUNTS, 0)
        sampling = Sampling(self.criterion)
        while len(accepted) < target and sampling.rounds < ro.max_rounds:
            size = cap if sampling.rounds == 0 else next_round_groups(
                target - len(accepted), len(accepted), sampling.candidate_groups, cap, self.world)
            groups, round_rewards = self.generate_round(size, sampling.rounds, times)
            out = self.advantages(round_rewards, torch.tensor([len(g.token_ids) for grp in groups
                                                               for g in grp.generations]))
            flags = getattr(out, CRITERIA[self.criterion])[::ro.group_size].tolist()
            new = self.gather_groups([grp for grp, keep in zip(groups, flags) if keep])
            accepted += new
            first = out if first is None else first
            rewards.append(round_rewards)
            sampling.add(out, size, len(new), size * ro.group_size)
            for name in counts:
                counts[name] += int(getattr(out, name))
        kept = accepted[:target]
        # Equal shares keep every rank's update in step; a remainder the ranks cannot share is dropped.
        share = len(kept) // self.world
        stats = {"sampling/candidate_groups": sampling.candidate_groups, "sampling/accepted_groups": len(accepted),
                 **{f"sampling/{name}": count for name, count in counts.items()},
                 **sampling.metrics(share * self.world * ro.group_size, prefix="sampling/")}
        return Sampled(kept[self.rank * share:(self.rank + 1) * share], torch.cat(rewards), first, stats)

    def train_step(self) -> dict:
        cfg = self.cfg
        times = {}
        t0 = time.perf_counter()
        sampled = self.sample(times)
        times["time/rollout"] = time.perf_counter() - t0 - times["time/reward"]
        record = {"step": self.step + 1, **sampled.stats,
                  "sampling/trained_groups": int(all_sum(torch.tensor([len(sampled.groups)]))[0]),
                  "sampling/responses": sampled.stats["sampling/candidate_groups"] * cfg.rollout.group_size}
        if not sampled.groups:
            self.step += 1
            record["sampling/updated"] = 0
            record.update(reward_metrics(cfg.task.rewards, sampled.candidate_rewards, sampled.signal))
            record.update(times)
            if self.rank == 0:
                accepted = record["sampling/accepted_groups"]  # fewer than the ranks, when not 0: none to share
                why = f"{accepted} accepted groups for {self.world} ranks" if accepted else "no informative group"
                # On a terminal the progress bar's line is still open.
                lead = "\n" if sys.stderr.isatty() else ""
                print(f"{lead}step {self.step}: {why} in {record['sampling/rounds']} rounds "
                      f"({record['sampling/candidate_groups']} candidate groups): no policy update",
                      file=sys.stderr, flush=True)
            return record

        t0 = time.perf_counter()
        generations = [dataclasses.replace(g, prompt_index=i) for i, grp in enumerate(sampled.groups)
                       for g in grp.generations]
        rewards = torch.cat([grp.rewards for grp in sampled.groups])
        ids, attention, response_mask, sampled_logprobs = build_batch(
            [grp.prompt_ids for grp in sampled.groups], generations, self.tokenizer.pad_token_id, self.device)
        lengths = response_mask.sum(1).cpu()
        out = self.advantages(rewards, lengths)
        token_adv = out.advantages.to(self.device).unsqueeze(1) * response_mask
        times["time/advantage"] = time.perf_counter() - t0

        t0 = time.perf_counter()
        with torch.no_grad():
            old = token_logprobs(self.model, ids, attention, cfg.rollout.temperature)
            ref = (token_logprobs(self.reference, ids, attention, cfg.rollout.temperature)
                   if self.reference is not None else None)
        batch = TrainBatch(ids, attention, response_mask, token_adv, old, ref)
        stats = update(self.model, self.optimizer, batch, cfg.optim, cfg.rollout.temperature)
        times["time/update"] = time.perf_counter() - t0
        t0 = time.perf_counter()
        self.engine.sync(full_state_dict(self.model))
        times["time/sync"] = time.perf_counter() - t0

        self.step += 1
        record["sampling/updated"] = 1
        record.update(reward_metrics(cfg.task.rewards, sampled.candidate_rewards, out))
        if self.criterion == "off":
            record.update({f"sampling/{name}": int(getattr(out, name)) for name in SIGNAL_COUNTS})
        lengths_sum = all_sum(torch.tensor([lengths.float().sum().item(), float(len(lengths))]))
        record["response_length/mean"] = (lengths_sum[0] / lengths_sum[1]).item()
        record["adv/batch_mean"] = out.batch_mean.item()
        record["adv/batch_std"] = out.batch_std.item()
        record.update(rollout_logprob_diff(sampled_logprobs, old, response_mask))
        record.update({f"train/{k}": v for k, v in stats.items()})
        record.update(times)
        return record

    def evaluate(self) -> dict:
        """The held-out prompts, decoded greedily (`eval/`) and, with `eval_replies`, sampled that many times
        each at the training temperature (`eval_sampled/`): each reward's mean (accuracy, compliance rates),
        the joint rate (every reward satisfied by the same reply) and the counts behind them; the first
        `eval_samples` greedy replies to samples.jsonl."""
        prompts = self.task.eval_prompts()
        ids = [self.tokenizer.encode_prompt(p.messages) for p in prompts]
        generations = self.engine.generate(ids, 1, self.cfg.rollout.max_new_tokens, 0.0, 1.0, 0)
        responses = to_responses(self.tokenizer, generations)
        names = self.cfg.task.rewards
        rewards = self.task.score(names, prompts, responses)
        self.log.samples([{"step": self.step, "prompt": self.tokenizer.decode_as_seen(ids[i]),
                           "response": self.tokenizer.decode_as_seen(generations[i].token_ids),
                           "finished": generations[i].finished,
                           "rewards": dict(zip(names, rewards[i].tolist()))}
                          for i in range(min(self.cfg.eval_samples, len(prompts)))])
        record = self.eval_record("eval", prompts, responses, rewards, len(prompts))
        if self.cfg.eval_replies:
            sampled = self.engine.generate(ids, self.cfg.eval_replies, self.cfg.rollout.max_new_tokens,
                                           self.cfg.rollout.temperature, self.cfg.rollout.top_p,
                                           eval_seed(self.cfg.seed, self.step))
            replied = [prompts[g.prompt_index] for g in sampled]
            replies = to_responses(self.tokenizer, sampled)
            record.update(self.eval_record("eval_sampled", replied, replies, self.task.score(names, replied, replies),
                                           len(prompts)))
        return record

    def eval_record(self, prefix: str, prompts, responses, rewards: torch.Tensor, prompt_count: int) -> dict:
        """Each reward's mean over the replies (a reply it cannot score counts 0), the share of replies that
        satisfy every reward (`joint`), the task's own metrics, and the numbers of prompts and replies."""
        names = self.cfg.task.rewards
        scores = torch.nan_to_num(rewards, nan=0.0)
        satisfied = scores >= torch.tensor([self.task.full_mark(name) for name in names])
        record = {f"{prefix}/{name}": scores[:, i].mean().item() for i, name in enumerate(names)}
        record[f"{prefix}/joint"] = satisfied.all(1).float().mean().item()
        record.update({f"{prefix}/{k}": v for k, v in self.task.eval_metrics(prompts, responses).items()})
        record.update({f"{prefix}/prompts": prompt_count, f"{prefix}/replies": len(responses)})
        return record

    def run(self) -> None:
        cfg = self.cfg
        if self.step == 0 and (cfg.eval_every or self.pretrained):
            self.log.log({"step": 0, **self.pretrained, **(self.evaluate() if cfg.eval_every else {})})
        while self.step < cfg.steps:
            record = self.train_step()
            if cfg.eval_every and self.step % cfg.eval_every == 0:
                record.update(self.evaluate())
            self.log.log(record)
            if cfg.save_every and self.step % cfg.save_every == 0:
                save_checkpoint(self.output_dir, self.step, self.model, self.optimizer)
        if not cfg.save_every or self.step % cfg.save_every:
            save_checkpoint(self.output_dir, self.step, self.model, self.optimizer)
        self.close()
        if self.rank == 0 and cfg.report:
            print(self.report(), flush=True)

    def report(self) -> str:
        """The end-of-run summary: what was learned, and where the metrics and curves are."""
        cfg = self.cfg
        records = read_metrics(self.output_dir)
        thresholds = thresholds_for(cfg.task.rewards, cfg.task.thresholds)
        summary = summarize(records, cfg.task.rewards, thresholds, start=cfg.task.shift_step)
        lines = [f"dara-train: {cfg.task.name}, advantage.method={cfg.advantage.method}, {self.step} steps"]
        lines += format_summary(summary, cfg.task.rewards)
        lines.append(f"metrics: {self.output_dir / 'metrics.jsonl'}")
        try:
            lines.append(f"curves:  {plot_run(self.output_dir, self.output_dir / 'curves.png')}")
        except ImportError:
            lines.append("curves:  not drawn (matplotlib is not installed)")
        return "\n".join(lines)

    def close(self) -> None:
        self.log.close()
        self.engine.close()
