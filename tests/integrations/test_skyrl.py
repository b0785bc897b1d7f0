"""SkyRL 0.4.0's own trainer steps with dara_kernels.integrations.skyrl: a DaraRayPPOTrainer (no models: its
worker dispatch is a stand-in that reports a data-parallel size, so SkyRL pads the batch) runs SkyRL's
`postprocess_generator_output`, `convert_to_training_input` and `compute_advantages_and_returns` on a
synthetic generator output whose environments report three reward components, and its
`handle_dynamic_sampling` and zero-variance filter on a batch where one group's weighted sum is constant while
its rewards vary. Runs where SkyRL is installed (CI: the SkyRL virtual environment of scripts/run.sh)."""
from types import SimpleNamespace

import numpy as np
import pytest
import torch

pytest.importorskip("skyrl")
import drift  # noqa: E402
from skyrl.backends.skyrl_train.utils import ppo_utils  # noqa: E402
from skyrl.train.config import SkyRLTrainConfig  # noqa: E402
from skyrl.train.entrypoints import main_base  # noqa: E402
from skyrl.train.trainer import RayPPOTrainer  # noqa: E402

import dara_kernels as dk  # noqa: E402
import dara_kernels.integrations.skyrl as dara_skyrl  # noqa: E402

dara_skyrl.install()  # what main() does before SkyRL builds its config and trainer
KEYS = ["accuracy", "format", "length"]
WEIGHTS = [1.0, 0.5, 2.0]


def config(estimator="dara", options=None, keys=KEYS, weights=WEIGHTS, prompts=3, **algorithm):
    """`prompts` per training batch (SkyRL checks that a batch has exactly that many)."""
    overrides = {"trainer.algorithm.advantage_estimator": estimator, "trainer.algorithm.dara_reward_keys": keys,
                 "trainer.algorithm.dara_reward_weights": weights, "trainer.algorithm.dara_options": options or {},
                 "trainer.train_batch_size": prompts, "trainer.policy_mini_batch_size": prompts,
                 "generator.n_samples_per_prompt": 4,
                 "generator.inference_engine.enable_ray_prometheus_stats": False}
    overrides.update({f"trainer.algorithm.{k}": v for k, v in algorithm.items()})
    return dara_skyrl.DaraSkyRLConfig.from_cli_overrides(overrides)


def trainer(cfg, cls=dara_skyrl.DaraRayPPOTrainer, dp_size=5):
    t = cls(cfg=cfg, tracker=None, tokenizer=SimpleNamespace(pad_token_id=0), train_dataset=None,
            inference_engine_client=None, generator=None)
    t.dispatch = SimpleNamespace(get_lcm_dp_size=lambda: dp_size)
    return t


def generator_output(components: np.ndarray, seed: int = 0, weights=WEIGHTS) -> dict:
    """One response per row of components [N, K]; the scalar reward is their weighted sum, as an environment
    that reports components would give."""
    rng = np.random.default_rng(seed)
    n = len(components)
    lengths = rng.integers(1, 6, n)
    return {
        "prompt_token_ids": [[5, 6, 7] for _ in range(n)],
        "response_ids": [list(rng.integers(10, 50, k)) for k in lengths],
        "rewards": [float(np.nansum(c * weights)) for c in components],
        "loss_masks": [[1] * k for k in lengths],
        "stop_reasons": ["stop"] * n,
        "rollout_logprobs": None,
        "env_metrics": [{k: (None if np.isnan(v) else float(v)) for k, v in zip(KEYS, c)} for c in components],
    }


def random_batch(seed: int):
    """3 prompts x 4 responses (SkyRL's layout: contiguous groups of n_samples_per_prompt); 12 rows, so a
    data-parallel size of 5 pads 3."""
    rng = np.random.default_rng(seed)
    uids = [f"prompt-{i // 4}" for i in range(12)]
    n = len(uids)
    components = np.stack([(rng.random(n) < 0.5), (rng.random(n) < 0.2), rng.normal(0, 1, n)], 1).astype(float)
    components[rng.random(n) < 0.1, 1] = np.nan
    return generator_output(components, seed), uids, components


def advantage_step(t, output, uids):
    """SkyRL's steps from a generator output to advantages, as its training loop runs them."""
    output, uids = t.postprocess_generator_output(output, uids)
    batch = t.convert_to_training_input(output, uids)
    batch["values"] = None  # no critic: what fwd_logprobs_values_reward leaves
    return t.compute_advantages_and_returns(batch)


@pytest.mark.parametrize("seed", range(3))
def test_gdpo_fused_through_compute_advantages_and_returns_with_padding(seed):
    output, uids, components = random_batch(seed)
    t = trainer(config("gdpo_fused"))
    data = advantage_step(t, output, uids)
    assert data.metadata["pad_size"] == 3 and len(data) == 15
    real = len(uids)
    expected = dk.fused_advantage(torch.tensor(components, dtype=torch.float32), method="gdpo",
                                  group_index=dara_skyrl.group_ids(uids), reward_weights=WEIGHTS,
                                  response_mask=data["response_mask"][:real], **dara_skyrl.DEFAULTS)
    assert torch.equal(data["advantages"][:real], expected.token_advantages)
    assert data["advantages"][real:].abs().max() == 0, "padding rows got advantages"
    assert torch.equal(data["returns"], data["advantages"])
    assert t.all_metrics["dara/density/format"] == pytest.approx(float(expected.density[1]))
    assert "loss/avg_raw_advantages" in t.all_metrics  # SkyRL's own metrics, from the unpadded rows


def test_padding_rows_are_left_out_of_the_densities():
    """Counted, the 3 pad rows (uids pad0, pad1, pad2) would be 3 more groups in every density."""
    output, uids, components = random_batch(1)
    padded = trainer(config("dara"), dp_size=5)
    unpadded = trainer(config("dara"), dp_size=1)
    a = advantage_step(padded, generator_output(components, 1), list(uids))
    b = advantage_step(unpadded, output, uids)
    assert a.metadata["pad_size"] == 3 and b.metadata["pad_size"] == 0
    assert torch.equal(a["advantages"][:len(uids)], b["advantages"])
    for key in KEYS:
        assert padded.all_metrics[f"dara/density/{key}"] == unpadded.all_metrics[f"dara/density/{key}"]


def test_one_component_grpo_equals_skyrl_grpo():
    """The dara estimator with method grpo and no other option (SkyRL's rule for a group of one, mean 0 and std 1,
    is the default) on one component, against SkyRL's own grpo estimator on the same scalar reward, both through
    compute_advantages_and_returns (real rows: SkyRL's gives its pad rows, singletons of their own, r / (1 + eps))."""
    output, uids, components = random_batch(2)
    ours = advantage_step(trainer(config("dara", {"method": "grpo"}, keys=["length"],
                                         weights=None)), output, uids)
    output["rewards"] = [m["length"] for m in output["env_metrics"]]
    theirs = advantage_step(trainer(config("grpo", keys=["length"], weights=None), cls=RayPPOTrainer),
                            output, uids)
    real = len(uids)
    err = (ours["advantages"][:real] - theirs["advantages"][:real]).abs().max().item()
    print(f"largest difference against SkyRL's grpo: {err:.2e}")
    assert err < 1e-5


@pytest.mark.parametrize("options,method", [({}, "dara"), ({"calibration": "symmetric", "alpha": 1.0}, "dara"),
                                            ({"method": "static", "calibration": "positive"}, "static")],
                         ids=["dara-asym", "dara-sym-alpha-1", "static-asym"])
def test_options_reach_the_op(options, method):
    output, uids, components = random_batch(4)
    data = advantage_step(trainer(config("dara", options)), output, uids)
    rest = {k: v for k, v in options.items() if k != "method"}
    expected = dk.fused_advantage(torch.tensor(components, dtype=torch.float32), method=method,
                                  group_index=dara_skyrl.group_ids(uids), reward_weights=WEIGHTS,
                                  response_mask=data["response_mask"][:len(uids)], **dara_skyrl.DEFAULTS, **rest)
    assert torch.equal(data["advantages"][:len(uids)], expected.token_advantages)


def test_config_route():
    cfg = dara_skyrl.DaraSkyRLConfig.from_cli_overrides([
        "trainer.algorithm.advantage_estimator=dara", "trainer.algorithm.dara_reward_keys=[accuracy,format]",
        "trainer.algorithm.dara_reward_weights=[1.0,0.5]", "trainer.algorithm.dara_options.alpha=0.25",
        "trainer.algorithm.dara_options.calibration=symmetric"])
    algorithm = cfg.trainer.algorithm
    assert algorithm.dara_reward_keys == ["accuracy", "format"] and algorithm.dara_reward_weights == [1.0, 0.5]
    assert dict(algorithm.dara_options) == {"alpha": 0.25, "calibration": "symmetric"}
    assert dara_skyrl.settings(algorithm).run.settings.options == {
        "reward_names": ("accuracy", "format"), "singleton": "verl", "scale_by_std": True, "alpha": 0.25,
        "calibration": "symmetric"}
    with pytest.raises(ValueError, match="Invalid fields"):
        SkyRLTrainConfig.from_cli_overrides(["trainer.algorithm.dara_reward_keys=[accuracy]"])
    for name in dara_skyrl.ESTIMATORS:
        assert name in ppo_utils.AdvantageEstimatorRegistry.list_available()


def test_skyrl_main_dispatches_to_ours(monkeypatch):
    """SkyRL's main_base hands `trainer.override_entrypoint=...` to our main, which parses with our config."""
    seen = {}

    def entrypoint(cfg):
        seen["cfg"] = cfg

    monkeypatch.setattr(dara_skyrl, "_entrypoint", SimpleNamespace(remote=entrypoint))
    monkeypatch.setattr("skyrl.train.utils.utils.initialize_ray", lambda cfg: None)
    monkeypatch.setattr("skyrl.train.utils.validate_cfg", lambda cfg: None)
    monkeypatch.setattr(dara_skyrl.ray, "get", lambda x: x)
    monkeypatch.setattr("sys.argv", ["main_base", "trainer.override_entrypoint=dara_kernels.integrations.skyrl",
                                     "trainer.algorithm.advantage_estimator=dara",
                                     "trainer.algorithm.dara_reward_keys=[accuracy]"])
    main_base.main()
    assert seen["cfg"].trainer.algorithm.dara_reward_keys == ["accuracy"]


@pytest.mark.parametrize("overrides,match", [
    (dict(keys=[]), "dara_reward_keys"),
    (dict(weights=[1.0]), "1 reward weights for the 3 trainer.algorithm.dara_reward_keys"),
    (dict(options={"calibration": "positive", "method": "gdpo"}), "calibration applies to"),
    (dict(options={"group_index": 1}), "may not set"),
    (dict(use_kl_in_reward=True, use_kl_loss=False), "use_kl_in_reward"),
])
def test_bad_settings_stop_before_training(overrides, match):
    with pytest.raises(ValueError, match=match):
        trainer(config("dara", **overrides))


def test_missing_component_is_named():
    output, uids, _ = random_batch(0)
    del output["env_metrics"][3]["format"]
    with pytest.raises(ValueError, match=r"\['format'\] not in every response's env_metrics"):
        advantage_step(trainer(config("dara")), output, uids)


def constant_sum_batch():
    """Three groups of 4: the weighted sum varies in group 0; in group 1 accuracy and format trade off
    (1*a + 0.5*f constant) while both vary; group 2 varies in nothing."""
    accuracy = [1, 0, 1, 0, 0, 1, 0, 1, 1, 1, 1, 1]
    fmt = [0, 0, 1, 1, 2, 0, 2, 0, 0, 0, 0, 0]
    components = np.array([accuracy, fmt, [0.0] * 12], dtype=float).T
    uids = [f"prompt-{i // 4}" for i in range(12)]
    sums = (components * WEIGHTS).sum(1).reshape(3, 4)
    assert sums[1].std() == 0 and sums[0].std() > 0 and components[8:].std(0).max() == 0
    return generator_output(components), uids


@pytest.mark.parametrize("strategy", ["filter", "replace"])
def test_dynamic_sampling_keeps_a_group_where_only_the_components_vary(strategy):
    output, uids = constant_sum_batch()
    cfg = config("dara", prompts=2, dynamic_sampling={"type": strategy, "min_replace_ratio": 0.3})
    theirs = trainer(cfg, cls=RayPPOTrainer)
    kept, kept_uids, again = theirs.handle_dynamic_sampling(generator_output_copy(output), list(uids))
    if strategy == "filter":
        assert again, "SkyRL's filter kept 2 prompts"  # it kept prompt-0 only and samples again
    else:
        assert "prompt-1" not in kept_uids  # replaced
    ours = trainer(cfg)
    kept, kept_uids, again = ours.handle_dynamic_sampling(generator_output_copy(output), list(uids))
    assert not again
    assert "prompt-1" in kept_uids and "prompt-0" in kept_uids
    rows = [i for i, u in enumerate(uids) if u in ("prompt-0", "prompt-1")]
    if strategy == "filter":
        assert kept["rewards"] == [output["rewards"][i] for i in rows]
        assert kept["env_metrics"] == [output["env_metrics"][i] for i in rows]
    assert "dara_rewards" not in kept
    # one round: prompt-0 and prompt-1 of 3 kept, prompt-1's rewards trade off at a constant sum
    assert {k: v for k, v in ours.all_metrics.items() if k.startswith("dara/sampling/")} == {
        "dara/sampling/rounds": 1, "dara/sampling/acceptance_rate": 2 / 3,
        "dara/sampling/generation_overhead": 12 / len(kept_uids), "dara/sampling/informative_groups_discarded": 0,
        "dara/sampling/reverse_conflict_rate": 1 / 3}


def generator_output_copy(output):
    return {k: (list(v) if isinstance(v, list) else v) for k, v in output.items()}


def test_zero_variance_filter_keeps_a_group_where_only_the_components_vary():
    output, uids = constant_sum_batch()
    cfg = config("dara", zero_variance_filter=True)
    theirs, _ = trainer(cfg, cls=RayPPOTrainer).postprocess_generator_output(generator_output_copy(output), uids)
    live = [sum(m) > 0 for m in theirs["loss_masks"]]
    assert live == [True] * 4 + [False] * 8  # SkyRL masks prompt-1 and prompt-2
    t = trainer(cfg)
    ours, _ = t.postprocess_generator_output(generator_output_copy(output), uids)
    assert [sum(m) > 0 for m in ours["loss_masks"]] == [True] * 8 + [False] * 4
    assert t.all_metrics["dara/zero_variance_filter/reverse_conflict_rate"] == 1 / 3
    assert t.all_metrics["dara/zero_variance_filter/generation_overhead"] == 12 / 8
    assert t.all_metrics["reward/num_zero_variance_filtered"] == 1


@pytest.mark.parametrize("method", dk.METHODS)
def test_every_method_through_dara_options(method):
    output, uids, components = random_batch(3)
    data = advantage_step(trainer(config("dara", {"method": method})), output, uids)
    expected = dk.fused_advantage(torch.tensor(components, dtype=torch.float32), method=method,
                                  group_index=dara_skyrl.group_ids(uids), reward_weights=WEIGHTS,
                                  response_mask=data["response_mask"][:len(uids)], **dara_skyrl.DEFAULTS)
    assert torch.equal(data["advantages"][:len(uids)], expected.token_advantages)


@pytest.mark.parametrize("method,settings,status", drift.setting_cases("skyrl"))
def test_algorithm_settings_honoured_or_refused(method, settings, status):
    """Every trainer.algorithm setting of drift.SETTINGS, through compute_advantages_and_returns: the dara
    estimator with method grpo (no other option) equals SkyRL's own grpo on the weighted summed reward;
    gdpo_fused, for which SkyRL has no estimator of its own, equals the op under the setting's mapping; or the
    trainer's construction stops with the setting named."""
    ours, theirs = drift.framework_settings("skyrl", method, settings, status)
    algorithm = {k: v for k, v in ours.items() if k != "advantage_estimator"}
    estimator, options = ("dara", {"method": "grpo"}) if method == "grpo" else ("gdpo_fused", {})

    def cfg(name, opts):
        return config(name, opts, keys=drift.KEYS, weights=drift.WEIGHTS, prompts=6, **algorithm)

    if status == drift.REFUSED:
        with pytest.raises(ValueError, match=drift.refusal(settings)):
            trainer(cfg(estimator, options))
        return
    output, uids = drift_output(masked=False)
    data = advantage_step(trainer(cfg(estimator, options), dp_size=1), output, uids)
    got = data["advantages"]
    if method == "grpo":
        output, uids = drift_output(masked=False)  # its rewards: the weighted sums of the components
        expected = advantage_step(trainer(cfg("grpo", {}), cls=RayPPOTrainer, dp_size=1), output, uids)["advantages"]
    else:
        expected = dk.fused_advantage(torch.tensor(drift.components()), method="gdpo", reward_weights=drift.WEIGHTS,
                                      group_index=dara_skyrl.group_ids(uids), response_mask=data["response_mask"],
                                      scale_by_std=settings.get("grpo_norm_by_std", True),
                                      **dara_skyrl.DEFAULTS).token_advantages
    drift.assert_same(got, expected, f"{method} under {ours} against {theirs or 'the op'}")


def test_skyrl_tolerance_is_the_ops():
    """SkyRL's own tolerance would decide the filter and not the advantages: it stops the launch."""
    with pytest.raises(ValueError, match=r"zero_variance_filter_tol=0.0 .* set trainer\.algorithm\.dara_options"
                                         r"\.active_tol"):
        trainer(config("dara", zero_variance_filter=True, zero_variance_filter_tol=0.0))


def drift_output(masked: bool):
    """drift's batch; `masked`: one-live down to one live row (loss masks of the others 0)."""
    output = generator_output(drift.components(), weights=drift.WEIGHTS)
    if masked:
        output["loss_masks"] = [m if live else [0] * len(m) for m, live in zip(output["loss_masks"], drift.live())]
    return output, drift.uids()


@pytest.mark.parametrize("criterion", ["any", "sum"])
def test_drift_batch_through_advantages_and_both_filters(criterion):
    """drift's non-default active_tol and nan_policy reach the advantages, the zero-variance filter (on live rows,
    a group of one live row kept, as SkyRL keeps it) and dynamic sampling (every row)."""
    def cfg(**algorithm):
        return config("dara", dict(drift.OPTIONS), weights=drift.WEIGHTS, prompts=6, dara_signal=criterion,
                      **algorithm)

    output, uids = drift_output(masked=False)
    data = advantage_step(trainer(cfg()), output, uids)
    expected = drift.expected(response_mask=data["response_mask"][:len(uids)], **dara_skyrl.DEFAULTS)
    assert torch.equal(data["advantages"][:len(uids)], expected.token_advantages)

    output, uids = drift_output(masked=True)
    t = trainer(cfg(zero_variance_filter=True))
    filtered, _ = t.postprocess_generator_output(output, uids)
    live_groups = {u for u, m in zip(uids, filtered["loss_masks"]) if sum(m) > 0}
    assert live_groups == drift.kept(criterion, keeps_singletons=True, masked=True)

    output, uids = drift_output(masked=False)
    t = trainer(cfg(dynamic_sampling={"type": "replace"}), dp_size=1)
    kept, kept_uids, again = t.handle_dynamic_sampling(output, list(uids))  # the groups without signal replaced
    assert not again and set(kept_uids) == drift.kept(criterion, keeps_singletons=False, masked=False)
    assert t.all_metrics["dara/sampling/informative_groups_discarded"] == {"any": 0, "sum": 1}[criterion]
