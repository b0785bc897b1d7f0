"""The real trl.GRPOTrainer and DaraGRPOTrainer for several steps on CPU, with
a tiny model built from a config, a locally built tokenizer and three reward
functions (one returns None for some completions, and some completions get
None from all three). Runs where TRL is installed (CI: the TRL virtual
environment of .ci/run)."""
import math

import numpy as np
import pytest
import torch

pytest.importorskip("trl")
import drift  # noqa: E402
from datasets import Dataset  # noqa: E402
from tokenizers import Tokenizer, models, pre_tokenizers  # noqa: E402
from transformers import LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast  # noqa: E402
from trl import GRPOConfig, GRPOTrainer  # noqa: E402

import dara_kernels as dk  # noqa: E402
from dara_kernels.integrations import trl as dara_trl  # noqa: E402
from dara_kernels.integrations.trl import DaraGRPOTrainer  # noqa: E402

CHARS = list("0123456789+=# abc")


def tokenizer():
    vocab = {"<pad>": 0, "<s>": 1, "</s>": 2, "<unk>": 3, **{c: i + 4 for i, c in enumerate(CHARS)}}
    tok = Tokenizer(models.WordLevel(vocab=vocab, unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.Split(pattern="", behavior="isolated")
    return PreTrainedTokenizerFast(tokenizer_object=tok, bos_token="<s>", eos_token="</s>", pad_token="<pad>",
                                   unk_token="<unk>")


def model():
    torch.manual_seed(0)
    config = LlamaConfig(vocab_size=len(CHARS) + 4, hidden_size=32, intermediate_size=64, num_hidden_layers=1,
                         num_attention_heads=1, num_key_value_heads=1, max_position_embeddings=64,
                         pad_token_id=0, bos_token_id=1, eos_token_id=2)
    return LlamaForCausalLM(config)


def unscorable(completion):
    return completion[:1] in ("a", "b", "c", " ")


def has_marker(completions, **kwargs):
    return [None if unscorable(c) else float(c.startswith("#")) for c in completions]


def digit_count(completions, **kwargs):
    # None ("cannot score") when there is no marker to count after
    return [float(sum(ch.isdigit() for ch in c)) if "#" in c else None for c in completions]


def short(completions, **kwargs):
    return [None if unscorable(c) else float(len(c) <= 4) for c in completions]


class Recorder:
    """Keeps each step's rewards and final advantages."""

    def _generate_and_score_completions(self, inputs):
        output = super()._generate_and_score_completions(inputs)
        rewards = self._dara_rewards if hasattr(self, "_dara_rewards") else None
        self.records.append({"completion_ids": output["completion_ids"].clone(),
                             "advantages": output["advantages"].clone(), "rewards": rewards})
        return output


class RecordingTRL(Recorder, GRPOTrainer):
    records: list = []


class RecordingDara(Recorder, DaraGRPOTrainer):
    records: list = []


def run(cls, tmp_path, **extra):
    cls.records = []
    args = GRPOConfig(output_dir=str(tmp_path / cls.__name__), per_device_train_batch_size=8, num_generations=4,
                      max_completion_length=8, max_steps=3, learning_rate=1e-2, report_to="none",
                      logging_steps=1, use_cpu=True, seed=0, multi_objective_aggregation="normalize_then_sum",
                      temperature=1.0, save_strategy="no", bf16=False)
    dataset = Dataset.from_dict({"prompt": [f"{a}+{b}=" for a in range(4) for b in range(4)]})
    trainer = cls(model=model(), processing_class=tokenizer(), reward_funcs=[has_marker, digit_count, short],
                  args=args, train_dataset=dataset, **extra)
    trainer.train()
    return trainer


@pytest.mark.parametrize("options", [{}, {"preset": "trl"}], ids=["no-options", "preset-trl"])
def test_gdpo_equals_trl_normalize_then_sum(tmp_path, options):
    """advantage_method="gdpo" with no options is TRL's normalize_then_sum (the trl preset, the default here)."""
    theirs = run(RecordingTRL, tmp_path)
    ours = run(RecordingDara, tmp_path, advantage_method="gdpo", advantage_options=options)
    assert len(ours.records) >= 2
    compared = 0
    for a, b in zip(theirs.records, ours.records):
        if not torch.equal(a["completion_ids"], b["completion_ids"]):
            break  # sampling diverged after float-level differences in the updates
        err = (a["advantages"] - b["advantages"]).abs().max().item()
        print(f"step {compared + 1}: largest difference {err:.2e}")
        assert err < 1e-4
        compared += 1
    assert compared >= 1
    rewards = torch.cat([r["rewards"] for r in ours.records])
    assert torch.isnan(rewards).any(), "no reward returned None"
    assert torch.isnan(rewards).all(1).any(), "no completion was unscorable"


@pytest.mark.parametrize("method,options", [("dara", {}), ("static", {"calibration": "positive"}),
                                            ("rvpo", {"rvpo_k": 2.0}), ("dara", {"no_signal": "zero"})],
                         ids=["dara-asym", "static-asym", "rvpo", "dara-no-signal-zero"])
def test_dara_equals_op_and_logs_metrics(tmp_path, method, options):
    trainer = run(RecordingDara, tmp_path, advantage_method=method, advantage_options=options)
    for record in trainer.records:
        expected = dk.fused_advantage(record["rewards"], group_size=4, method=method,
                                      reward_weights=trainer.reward_weights, preset="trl", **options)
        torch.testing.assert_close(record["advantages"], expected.advantages)
    logged = [h for h in trainer.state.log_history if "dara/density/has_marker" in h]
    assert logged and all(0.0 <= h["dara/density/has_marker"] <= 1.0 for h in logged)
    assert all(math.isfinite(h["dara/weight/digit_count"]) for h in logged)


def untrained(tmp_path, method, options=None, weights=None, funcs=(has_marker, digit_count, short)):
    """A DaraGRPOTrainer as built for a run (nothing generated): its advantage step on given rewards."""
    args = GRPOConfig(output_dir=str(tmp_path), num_generations=4, per_device_train_batch_size=8, report_to="none",
                      use_cpu=True, reward_weights=weights)
    return DaraGRPOTrainer(model=model(), processing_class=tokenizer(), reward_funcs=list(funcs), args=args,
                           train_dataset=Dataset.from_dict({"prompt": ["1+1="]}), advantage_method=method,
                           advantage_options=options)


@pytest.mark.parametrize("method", dk.METHODS)
def test_every_method_through_advantage_method(tmp_path, method):
    trainer = untrained(tmp_path, method)
    rewards = torch.tensor(drift.components())
    defaults = dara_trl.GRPO_DEFAULTS if method == "grpo" else dara_trl.DEFAULTS
    expected = dk.fused_advantage(rewards, group_size=4, method=method, reward_weights=trainer.reward_weights,
                                  **defaults)
    assert torch.equal(trainer.dara_advantages(rewards), expected.advantages)
    logged = trainer._metrics["train"]
    assert logged["dara/batch_std"] == [pytest.approx(float(expected.batch_std))]
    assert logged["dara/density/digit_count"] == [pytest.approx(float(expected.density[1]))]


def test_drift_batch_gives_the_ops_advantages(tmp_path):
    """drift's non-default active_tol and nan_policy reach the op (TRL has no group filter)."""
    trainer = untrained(tmp_path, "dara", drift.OPTIONS, drift.WEIGHTS)
    advantages = trainer.dara_advantages(torch.tensor(drift.components()))
    assert torch.equal(advantages, drift.expected(preset="trl").advantages)


def drift_reward(column: int):
    """A reward function that scores the completions of a generation batch of 24 (6 prompts x 4) with drift's
    column, row by row (None where drift's entry is missing), whatever they say."""
    values = drift.components()[:, column]

    def reward(completions, **kwargs):
        assert len(completions) == len(values)
        return [None if np.isnan(v) else float(v) for v in values]

    reward.__name__ = drift.KEYS[column]
    return reward


def drift_step(cls, tmp_path, settings: dict, **extra):
    """The advantages of one real training step of `cls` whose three reward functions give drift's batch, under
    the GRPOConfig `settings`."""
    cls.records = []
    args = GRPOConfig(output_dir=str(tmp_path / cls.__name__), per_device_train_batch_size=24, num_generations=4,
                      max_completion_length=4, max_steps=1, learning_rate=1e-2, report_to="none", use_cpu=True,
                      seed=0, save_strategy="no", bf16=False, reward_weights=drift.WEIGHTS, **settings)
    trainer = cls(model=model(), processing_class=tokenizer(), reward_funcs=[drift_reward(k) for k in range(3)],
                  args=args, train_dataset=Dataset.from_dict({"prompt": [f"{a}+1=" for a in range(6)]}), **extra)
    trainer.train()
    return trainer.records[0]["advantages"]


@pytest.mark.parametrize("method,settings,status", drift.setting_cases("trl"))
def test_grpo_config_settings_honoured_or_refused(tmp_path, method, settings, status):
    """Every GRPOConfig setting of drift.SETTINGS: DaraGRPOTrainer(advantage_method=grpo / gdpo, no options) gives
    TRL's own advantages under it, or stops at construction with the setting named."""
    ours, theirs = drift.framework_settings("trl", method, settings, status)
    if status == drift.REFUSED:
        with pytest.raises(ValueError, match=drift.refusal(settings)):
            untrained_with(tmp_path, method, ours)
        return
    expected = drift_step(RecordingTRL, tmp_path, theirs)
    got = drift_step(RecordingDara, tmp_path, ours, advantage_method=method)
    drift.assert_same(got, expected, f"{method} under {ours} against TRL under {theirs}")


def untrained_with(tmp_path, method, settings, options=None):
    args = GRPOConfig(output_dir=str(tmp_path), num_generations=4, per_device_train_batch_size=8, report_to="none",
                      use_cpu=True, **settings)
    return DaraGRPOTrainer(model=model(), processing_class=tokenizer(), reward_funcs=[has_marker], args=args,
                           train_dataset=Dataset.from_dict({"prompt": ["1+1="]}), advantage_method=method,
                           advantage_options=options)


def test_a_setting_and_an_option_that_disagree_stop(tmp_path):
    with pytest.raises(ValueError, match=r"GRPOConfig\.scale_rewards='none' means scale_by_std=False, but "
                                         r"advantage_options sets scale_by_std=True"):
        untrained_with(tmp_path, "grpo", {"scale_rewards": "none"}, {"scale_by_std": True})


def test_options_checked_before_the_model_loads(tmp_path):
    with pytest.raises(ValueError, match="calibration applies to"):
        DaraGRPOTrainer(model="no/such/model", reward_funcs=[has_marker], advantage_method="gdpo",
                        args=GRPOConfig(output_dir=str(tmp_path), report_to="none", use_cpu=True),
                        advantage_options={"calibration": "positive"})


def test_reserved_options_rejected(tmp_path):
    with pytest.raises(ValueError, match="group_size"):
        DaraGRPOTrainer(model=model(), processing_class=tokenizer(), reward_funcs=[has_marker],
                        args=GRPOConfig(output_dir=str(tmp_path), report_to="none", use_cpu=True),
                        advantage_options={"group_size": 2})


def test_two_processes_keep_rewards_local(tmp_path):
    """Two CPU processes under torchrun: no reward gather, process_group mode."""
    import json
    import os
    import subprocess
    import sys

    here = os.path.dirname(os.path.abspath(__file__))
    verdict = tmp_path / "verdict.json"
    env = dict(os.environ, PYTHONPATH=here + os.pathsep + os.environ.get("PYTHONPATH", ""))
    subprocess.run([sys.executable, "-m", "torch.distributed.run", "--nproc_per_node", "2",
                    os.path.join(here, "trl_two_process.py"), str(verdict), str(tmp_path)],
                   check=True, env=env, cwd=tmp_path, timeout=600)
    result = json.loads(verdict.read_text())
    assert result["world"] == 2
    for rank in result["ranks"]:
        assert rank and all(step["local"] for step in rank), "rewards were gathered"
        assert max(step["max_diff"] for step in rank) < 1e-5
