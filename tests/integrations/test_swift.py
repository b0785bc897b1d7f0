"""ms-swift 4.6.0 with dara_kernels.integrations.swift imported: the HF GRPO trainer's `_compute_advantages`,
`compute_std` and `_dynamic_sampling`, and the Ray driver's `compute_advantages`, `_dynamic_sampling` and
`_build_grpo_log_metrics`, each called on a stand-in for the trainer (the attributes those methods read) with
synthetic multi-reward batches; then `swift rlhf --rlhf_type grpo` itself for a few steps on CPU. Runs where
ms-swift is installed (CI: the ms-swift virtual environment of scripts/run.sh)."""
import json
from collections import defaultdict
from types import SimpleNamespace

import pytest
import torch

pytest.importorskip("swift")
import drift  # noqa: E402
import swift.rlhf_trainers.grpo_trainer as hf  # noqa: E402
from swift.ray.megatron import grpo_trainer as driver  # noqa: E402
from swift.rl_core import advantage, grpo_algorithm  # noqa: E402

import dara_kernels as dk  # noqa: E402
import dara_kernels.integrations.swift as dara_swift  # noqa: E402
from dara_kernels.integrations import patching  # noqa: E402

PATCHED = dara_swift.install()  # what the plugin file does

NAMES = ["accuracy", "format", "length"]
WEIGHTS = torch.tensor([1.0, 0.5, 2.0])
G = 4


def rewards(seed: int, groups: int = 6) -> torch.Tensor:
    gen = torch.Generator().manual_seed(seed)
    n = groups * G
    r = torch.stack([(torch.rand(n, generator=gen) < 0.5).float(), (torch.rand(n, generator=gen) < 0.15).float(),
                     torch.randn(n, generator=gen)], 1)
    r[torch.rand(n, generator=gen) < 0.1, 1] = float("nan")  # a reward function returned None
    r[:G, 0] = 1.0  # one group where accuracy does not vary
    return r


class HFStandIn:
    """What GRPOTrainer's advantage and dynamic-sampling methods read from the trainer."""
    _compute_advantages = hf.GRPOTrainer._compute_advantages
    _dynamic_sampling = hf.GRPOTrainer._dynamic_sampling
    compute_std = hf.GRPOTrainer.compute_std

    def __init__(self, generation_batch_size: int = 0, num_generations: int = G, weights=WEIGHTS):
        self.model = SimpleNamespace(training=True)
        self.num_generations = self.num_generations_eval = num_generations
        self.reward_weights = torch.tensor(weights)
        self.reward_func_names = NAMES
        self.advantage_estimator, self.scale_rewards = "grpo", "group"  # ms-swift's defaults
        self.kl_in_reward, self.beta = False, 0.0
        self.dynamic_num_samples = False
        self.max_resample_times = 3
        self.args = SimpleNamespace(generation_batch_size=generation_batch_size, report_to=[])
        self.accelerator = SimpleNamespace(process_index=0, device=torch.device("cpu"), is_main_process=True)
        self._metrics = {"train": defaultdict(list), "eval": defaultdict(list)}
        self._logs = {"rewards": defaultdict(list)}


@pytest.fixture(autouse=True)
def default_settings():
    yield
    dara_swift.configure("dara")


def test_install_patched_the_trainers_that_import_here():
    assert PATCHED == ["swift.rlhf_trainers.grpo_trainer", "swift.ray.megatron.grpo_trainer"]
    assert dara_swift.install() == PATCHED  # idempotent
    for module in (hf, driver):
        assert module.compute_advantages.__wrapped__ is advantage.compute_advantages
    assert not hasattr(advantage.compute_advantages, patching.ORIGINAL)  # ms-swift's own function untouched
    wrapped = hf.GRPOTrainer._dynamic_sampling
    dara_swift.uninstall()
    try:
        assert hf.compute_advantages is advantage.compute_advantages
        assert hf.GRPOTrainer._dynamic_sampling is wrapped.__wrapped__
    finally:
        dara_swift.install()


@pytest.mark.parametrize("seed", range(4))
def test_gdpo_equals_swift_scale_rewards_gdpo(seed, monkeypatch):
    """Both through GRPOTrainer._compute_advantages: ms-swift's function with --scale_rewards gdpo, then ours."""
    r = rewards(seed)
    assert torch.isnan(r).any()
    with monkeypatch.context() as m:
        m.setattr(hf, "compute_advantages", advantage.compute_advantages)
        swift_trainer = HFStandIn()
        swift_trainer.scale_rewards = "gdpo"
        theirs = swift_trainer._compute_advantages([], r, [])
    dara_swift.configure("gdpo")  # ms-swift's 1e-8 by default
    trainer = HFStandIn()
    trainer.scale_rewards = "gdpo"
    ours = trainer._compute_advantages([], r, [])
    err = (theirs - ours).abs().max().item()
    print(f"seed {seed}: largest difference {err:.2e}")
    assert err < 1e-5
    assert trainer._metrics["train"]["reward"], "ms-swift's own reward metrics were not logged"


@pytest.mark.parametrize("options", [{}, {"calibration": "symmetric", "max_weight": 2.0}, {"alpha": 1.0}],
                         ids=["dara-asym", "dara-sym-cap-2", "alpha-1"])
def test_dara_equals_op_and_logs_metrics(options):
    r = rewards(11)
    dara_swift.configure("dara", **options)
    trainer = HFStandIn()
    ours = trainer._compute_advantages([], r, [])
    expected = dk.fused_advantage(r, group_size=G, method="dara", reward_weights=WEIGHTS, **dara_swift.DEFAULTS,
                                  **options)
    assert torch.equal(ours, expected.advantages)
    logged = trainer._metrics["train"]
    for i, name in enumerate(NAMES):
        assert logged[f"dara/density/{name}"] == [pytest.approx(float(expected.density[i]))]
        assert logged[f"dara/weight/{name}"] == [pytest.approx(float(expected.weights[i]))]
        assert logged[f"dara/energy/{name}"] == [pytest.approx(float(expected.energy[i]))]


def test_options_from_the_environment(monkeypatch):
    monkeypatch.setenv(dara_swift.METHOD_ENV, "static")
    monkeypatch.setenv(dara_swift.OPTIONS_ENV, '{"calibration": "positive"}')
    dara_swift.install()
    r = rewards(3)
    expected = dk.fused_advantage(r, group_size=G, method="static", reward_weights=WEIGHTS, calibration="positive",
                                  **dara_swift.DEFAULTS)
    assert torch.equal(HFStandIn()._compute_advantages([], r, []), expected.advantages)


@pytest.mark.parametrize("method,options,match", [
    ("gdpo", {"calibration": "positive"}, "calibration applies to"),
    ("dara", {"group_size": 4}, "may not set"),
    ("dara", {"alpah": 1.0}, "not fused_advantage keywords"),
    ("no-such-method", {}, "method"),
])
def test_bad_settings_stop_at_configure(method, options, match):
    with pytest.raises((ValueError, TypeError), match=match):
        dara_swift.configure(method, **options)


def test_bad_environment_json(monkeypatch):
    monkeypatch.setenv(dara_swift.OPTIONS_ENV, "alpha=1")
    with pytest.raises(ValueError, match="JSON object"):
        dara_swift.install()


@pytest.mark.parametrize("attribute,match", [("advantage_estimator", "advantage_estimator='rloo'"),
                                             ("dynamic_num_samples", "request-aware")])
def test_what_the_op_does_not_take_stops(attribute, match):
    trainer = HFStandIn()
    setattr(trainer, attribute, "rloo" if attribute == "advantage_estimator" else True)
    with pytest.raises(ValueError, match=match):
        samples = [SimpleNamespace(prompt_id=f"p{i // G}", request_id=f"r{i}") for i in range(24)]
        trainer._compute_advantages(samples, rewards(0), [])


def test_kl_in_reward_stops():
    with pytest.raises(ValueError, match="kl_in_reward"):
        dara_swift.compute_advantages(rewards(0), WEIGHTS, G, kl_in_reward=True, beta=0.04,
                                      kl_values=torch.zeros(24))


@pytest.mark.parametrize("method,settings,status", drift.setting_cases("swift"))
def test_grpo_arguments_honoured_or_refused(method, settings, status, monkeypatch):
    """Every ms-swift GRPO argument of drift.SETTINGS, through GRPOTrainer._compute_advantages with the trainer's
    attributes of the same names: DARA_SWIFT_METHOD=grpo / gdpo (no options) equals ms-swift's own
    compute_advantages under them; or the check that follows the trainer's _prepare_algorithm_params (where its
    constructor reads the arguments) stops with the argument named."""
    ours, theirs = drift.framework_settings("swift", method, settings, status)
    r = torch.tensor(drift.components())

    def trainer(values):
        t = HFStandIn(weights=drift.WEIGHTS)
        for name, value in values.items():
            setattr(t, name, value)
        return t

    dara_swift.configure(method)
    if status == drift.REFUSED:  # the check install() adds after the constructor's _prepare_algorithm_params
        assert patching.is_patched(hf.GRPOTrainer, "_prepare_algorithm_params")
        with pytest.raises(ValueError, match=drift.refusal(settings)):
            dara_swift._checked(lambda self: None)(trainer(ours))
        return
    got = trainer(ours)._compute_advantages([], r, [])
    with monkeypatch.context() as m:
        m.setattr(hf, "compute_advantages", advantage.compute_advantages)
        expected = trainer(theirs)._compute_advantages([], r, [])
    drift.assert_same(got, expected, f"{method} under {ours} against ms-swift under {theirs}")


def constant_sum_batch() -> torch.Tensor:
    """Three groups of 4: the weighted sum varies in group 0; in group 1 accuracy and format trade off
    (1*a + 0.5*f constant) while both vary; group 2 varies in nothing."""
    accuracy = [1, 0, 1, 0, 0, 1, 0, 1, 1, 1, 1, 1]
    fmt = [0, 0, 1, 1, 2, 0, 2, 0, 0, 0, 0, 0]
    length = [0.0] * 12
    r = torch.tensor([accuracy, fmt, length], dtype=torch.float32).T
    sums = (r * WEIGHTS).sum(1).view(3, G)
    assert sums[1].std() == 0 and sums[0].std() > 0 and r[8:].std(0).max() == 0
    return r


def test_dynamic_sample_keeps_a_group_where_only_the_components_vary():
    r = constant_sum_batch()
    trainer = HFStandIn(generation_batch_size=8)
    theirs = hf.GRPOTrainer.compute_std.__wrapped__(trainer, [], r)
    assert (theirs.view(3, G)[:, 0] > 0).tolist() == [True, False, False]  # ms-swift drops group 1
    samples = [f"sample-{i}" for i in range(12)]
    kept, kept_rewards = trainer._dynamic_sampling(samples, r)
    assert kept == samples[:8]
    assert torch.equal(kept_rewards, r[:8])
    # one round: 2 of 3 groups kept, 1 whose rewards trade off at a constant sum, 12 responses for 8 trained on
    assert {k: v for k, v in trainer._metrics["train"].items() if k.startswith("dara/sampling/")} == {
        "dara/sampling/rounds": [1], "dara/sampling/acceptance_rate": [2 / 3],
        "dara/sampling/generation_overhead": [1.5], "dara/sampling/informative_groups_discarded": [0],
        "dara/sampling/reverse_conflict_rate": [1 / 3]}


@pytest.mark.parametrize("method", dk.METHODS)
def test_every_method_through_the_method_setting(method, monkeypatch):
    monkeypatch.setenv(dara_swift.METHOD_ENV, method)
    dara_swift.install()
    r = rewards(6)
    defaults = dara_swift.GRPO_DEFAULTS if method == "grpo" else dara_swift.DEFAULTS
    expected = dk.fused_advantage(r, group_size=G, method=method, reward_weights=WEIGHTS, **defaults)
    trainer = HFStandIn()
    assert torch.equal(trainer._compute_advantages([], r, []), expected.advantages)
    assert trainer._metrics["train"]["dara/batch_std"] == [pytest.approx(float(expected.batch_std))]


@pytest.mark.parametrize("criterion", ["any", "sum"])
def test_drift_batch_through_advantages_and_dynamic_sample(criterion, monkeypatch):
    """drift's non-default active_tol and nan_policy reach both; ms-swift has no response masks, so one-live is a
    full group here."""
    monkeypatch.setenv(dara_swift.OPTIONS_ENV, json.dumps(drift.OPTIONS))
    monkeypatch.setenv(dara_swift.SIGNAL_ENV, criterion)
    dara_swift.install()
    r = torch.tensor(drift.components())
    trainer = HFStandIn(weights=drift.WEIGHTS)
    assert torch.equal(trainer._compute_advantages([], r, []), drift.expected(**dara_swift.DEFAULTS).advantages)
    keep = trainer.compute_std([], r).view(-1, G)[:, 0] > 0
    assert {name for name, k in zip(drift.GROUPS, keep) if k} == drift.kept(criterion, False, masked=False)


def test_a_group_of_one_is_dropped_as_ms_swift_drops_it():
    r = torch.tensor(drift.components())
    trainer = HFStandIn(num_generations=1, weights=drift.WEIGHTS)
    assert hf.GRPOTrainer.compute_std.__wrapped__(trainer, [], r).abs().max() == 0  # ms-swift's own
    assert trainer.compute_std([], r).abs().max() == 0


class DriverStandIn:
    """What the Ray driver's GRPOTrainer methods read; one resampling round returns `replacement`."""
    compute_advantages = driver.GRPOTrainer.compute_advantages
    _dynamic_sampling = driver.GRPOTrainer._dynamic_sampling
    _build_grpo_log_metrics = driver.GRPOTrainer._build_grpo_log_metrics

    def __init__(self, replacement=None):
        self.num_generations = G
        self.reward_weights = WEIGHTS
        self.reward_func_names = NAMES
        self.advantage_estimator, self.scale_rewards = "grpo", "group"
        self.kl_in_reward, self.beta = False, 0.0
        self.max_resample_times, self.truncation_strategy = 1, "raise"
        self._resample_iter = iter([["prompt"]])
        self._replacement = replacement

    def expand_for_generation(self, prompts):
        return [f"resampled-{i}" for i in range(G)]

    def _generate(self, samples):
        return None

    def _postprocess_rollout(self, samples, completions):
        return samples

    def score_completions(self, samples):
        return self._replacement


def test_ray_driver_dynamic_sample_and_metrics(monkeypatch):
    r = constant_sum_batch()[:8]
    replacement = constant_sum_batch()[:4]
    samples = [f"sample-{i}" for i in range(8)]
    with monkeypatch.context() as m:
        m.setattr(driver, "compute_std_for_dynamic_sampling", grpo_algorithm.compute_std_for_dynamic_sampling)
        kept, _ = DriverStandIn(replacement)._dynamic_sampling(samples, r)
    assert kept == samples[:4] + [f"resampled-{i}" for i in range(G)]  # ms-swift resampled for group 1
    trainer = DriverStandIn(replacement)
    kept, kept_rewards = trainer._dynamic_sampling(samples, r)
    assert kept == samples and torch.equal(kept_rewards, r)
    advantages, weighted = trainer.compute_advantages(rewards(5))
    expected = dk.fused_advantage(rewards(5), group_size=G, method="dara", reward_weights=WEIGHTS,
                                  **dara_swift.DEFAULTS)
    assert torch.equal(advantages, expected.advantages)
    metrics = trainer._build_grpo_log_metrics(weighted, advantages, rewards(5))
    assert metrics["dara/sampling/reverse_conflict_rate"] == 0.5 and metrics["dara/sampling/rounds"] == 1
    assert metrics["dara/density/accuracy"] == pytest.approx(float(expected.density[0]))
    assert "reward" in metrics  # ms-swift's own
    assert "dara/density/accuracy" not in trainer._build_grpo_log_metrics(weighted, advantages, rewards(5))


PLUGIN = '''
from swift.rewards import ORM, orms

from dara_kernels.integrations import swift

swift.install()


class LeadingDigit(ORM):
    def __call__(self, completions, **kwargs):
        return [float(c[:1].isdigit()) for c in completions]


class DigitShare(ORM):
    def __call__(self, completions, **kwargs):  # None ("cannot score") for an empty completion
        return [sum(ch.isdigit() for ch in c) / len(c) if c else None for c in completions]


class HasPlus(ORM):
    def __call__(self, completions, **kwargs):
        return [float("+" in c) for c in completions]


orms.update(leading_digit=LeadingDigit, digit_share=DigitShare, has_plus=HasPlus)
'''


def tiny_model(path):
    """A one-layer Qwen2 and a character-level tokenizer with Qwen's chat tokens, built here (no download). No
    unknown token, no white space and no character of a special token's name: ms-swift decodes completions and
    encodes them again, which must give the same tokens."""
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast, Qwen2Config, Qwen2ForCausalLM

    special = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
    vocab = {t: i for i, t in enumerate(special + list("0123456789+=#abcdefghij"))}
    tok = Tokenizer(models.WordLevel(vocab=vocab))
    tok.pre_tokenizer = pre_tokenizers.Split(pattern="", behavior="isolated")
    fast = PreTrainedTokenizerFast(tokenizer_object=tok, eos_token="<|im_end|>", pad_token="<|endoftext|>",
                                   additional_special_tokens=special[1:])
    fast.chat_template = ("{% for m in messages %}<|im_start|>{{ m['role'] }}\n{{ m['content'] }}<|im_end|>\n"
                          "{% endfor %}{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}")
    torch.manual_seed(0)
    config = Qwen2Config(vocab_size=len(vocab), hidden_size=32, intermediate_size=64, num_hidden_layers=1,
                         num_attention_heads=2, num_key_value_heads=1, max_position_embeddings=256,
                         tie_word_embeddings=True, eos_token_id=vocab["<|im_end|>"],
                         pad_token_id=vocab["<|endoftext|>"])
    Qwen2ForCausalLM(config).save_pretrained(path)
    fast.save_pretrained(path)


def test_swift_rlhf_grpo_runs_on_cpu_with_the_plugin(tmp_path):
    """`swift rlhf --rlhf_type grpo` itself, 3 steps on CPU with --dynamic_sample: the plugin's metrics are in
    ms-swift's logging.jsonl for every step that computed advantages."""
    import json
    import os
    import subprocess
    import sys

    tiny_model(tmp_path / "model")
    (tmp_path / "plugin.py").write_text(PLUGIN)
    with open(tmp_path / "data.jsonl", "w") as f:
        for a in range(4):
            for b in range(4):
                f.write(json.dumps({"messages": [{"role": "user", "content": f"{a}+{b}="}]}) + "\n")
    repo = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    env = dict(os.environ, PYTHONPATH=repo, CUDA_VISIBLE_DEVICES="", USE_HF="1", HF_HUB_OFFLINE="1",
               DARA_SWIFT_METHOD="dara", DARA_SWIFT_OPTIONS='{"calibration": "symmetric"}')
    args = ["--rlhf_type", "grpo", "--model", str(tmp_path / "model"), "--model_type", "qwen2",
            "--template", "qwen2_5", "--dataset", str(tmp_path / "data.jsonl"),
            "--external_plugins", str(tmp_path / "plugin.py"),
            "--reward_funcs", "leading_digit", "digit_share", "has_plus", "--reward_weights", "1.0", "0.5", "2.0",
            "--num_generations", "4", "--per_device_train_batch_size", "4", "--generation_batch_size", "8",
            "--dynamic_sample", "true", "--max_resample_times", "2", "--max_steps", "3",
            "--max_completion_length", "8", "--use_vllm", "false", "--report_to", "none",
            "--output_dir", str(tmp_path / "out"), "--logging_steps", "1", "--save_strategy", "no",
            "--torch_dtype", "float32", "--learning_rate", "1e-2", "--dataloader_num_workers", "0",
            "--split_dataset_ratio", "0", "--seed", "0"]
    run = subprocess.run([sys.executable, "-m", "swift.cli.rlhf", *args], env=env, cwd=tmp_path, timeout=900,
                         capture_output=True, text=True)
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
    (log,) = (tmp_path / "out").glob("*/logging.jsonl")
    steps = [json.loads(line) for line in log.read_text().splitlines()]
    logged = [s for s in steps if "dara/density/LeadingDigit" in s]
    assert logged, f"no dara metrics in ms-swift's log: {steps[0]}"
    for step in logged:
        for name in ("LeadingDigit", "DigitShare", "HasPlus"):
            assert 0.0 <= step[f"dara/density/{name}"] <= 1.0
            assert step[f"dara/energy/{name}"] >= 0.0
    assert any(step["dara/density/LeadingDigit"] > 0 for step in logged), "no reward varied: nothing was tested"
    assert all(0.0 <= step["dara/sampling/acceptance_rate"] <= 1.0 for step in logged)
