"""verl's two trainers. Legacy (`trainer.use_v1=false`): `gdpo_fused` through
verl's own dispatcher equals verl's `gdpo` through it, on batches with
shuffled uids, uneven groups and a singleton group; `dara` runs through it and
reports its diagnostics. v1 (verl's default): verl's own
`PPOTrainer._compute_advantage`, on rows put into TransferQueue the way verl's
agent loop or colocated reward model puts them, gives what the legacy
dispatcher gives on the same rows, and the diagnostics land in the step's
metrics; a Ray run of verl's `run_ppo` with the documented overrides shows the
setup hook installs the estimators in the TaskRunner. Runs where verl is
installed (CI: the verl virtual environment of .ci/run, with transferqueue)."""
import copy
import faulthandler
import sys
from types import SimpleNamespace

import numpy as np
import pytest
import torch

verl = pytest.importorskip("verl")
import drift  # noqa: E402
import transfer_queue  # noqa: E402
from hydra import compose, initialize_config_module  # noqa: E402
from omegaconf import open_dict  # noqa: E402
from transfer_queue_standin import TransferQueueStandIn  # noqa: E402
from verl import DataProto  # noqa: E402
from verl.trainer.config import AlgoConfig  # noqa: E402
from verl.trainer.ppo import ray_trainer  # noqa: E402
from verl.trainer.ppo.padding_utils import upsample_batch_to_divisible_size  # noqa: E402
from verl.trainer.ppo.v1 import PPOTrainerSync  # noqa: E402
from verl.trainer.ppo.v1.utils import MetricsAggregator  # noqa: E402
from verl.utils import tensordict_utils as tu  # noqa: E402

import dara_kernels as dk  # noqa: E402
import dara_kernels.integrations.verl as dara_verl  # noqa: E402
from dara_kernels.integrations import verl_dapo  # noqa: E402

dara_verl.install()  # what Ray's worker_process_setup_hook runs in each worker
KEYS = ["accuracy", "format", "length"]


def make_batch(seed: int) -> DataProto:
    rng = np.random.default_rng(seed)
    sizes = [1, 5, 3, 8, 2, 7, 4]  # uneven groups and a singleton
    uids = np.concatenate([[f"prompt-{seed}-{g}"] * s for g, s in enumerate(sizes)]).astype(object)
    n = len(uids)
    order = rng.permutation(n)
    uids = uids[order]
    prompt_len, resp_len = 6, 9
    lengths = rng.integers(1, resp_len + 1, n)
    response_mask = (np.arange(resp_len)[None, :] < lengths[:, None]).astype(np.float32)
    attention = np.concatenate([np.ones((n, prompt_len), np.float32), response_mask], 1)
    components = {
        "accuracy": (rng.random(n) < 0.5).astype(np.float32),
        "format": (rng.random(n) < 0.1).astype(np.float32),
        "length": rng.normal(0.3, 1.0, n).astype(np.float32),
    }
    tensors = {
        "prompts": torch.zeros(n, prompt_len, dtype=torch.long),
        "attention_mask": torch.from_numpy(attention).long(),
        "response_mask": torch.from_numpy(response_mask),
        "token_level_rewards": torch.zeros(n, resp_len),
    }
    return DataProto.from_dict(tensors=tensors, non_tensors={"uid": uids, **components})


@pytest.mark.parametrize("seed", range(5))
def test_gdpo_fused_equals_verl_gdpo(seed):
    config = AlgoConfig(gdpo_reward_keys=KEYS, gdpo_reward_weights=[1.0, 0.5, 2.0])
    data = make_batch(seed)
    theirs = ray_trainer.compute_advantage(copy.deepcopy(data), adv_estimator="gdpo", config=config)
    ours = ray_trainer.compute_advantage(copy.deepcopy(data), adv_estimator="gdpo_fused", config=config)
    a, b = theirs.batch["advantages"], ours.batch["advantages"]
    scale = max(1.0, a.abs().max().item())
    err = (a - b).abs().max().item() / scale
    print(f"seed {seed}: largest difference {err:.2e} (relative to max |A| = {scale:.2f})")
    assert err < 1e-5
    assert torch.equal(theirs.batch["returns"], a)


def test_dara_through_dispatcher_reports_metrics():
    dara_verl.configure(alpha=0.5)
    config = AlgoConfig(gdpo_reward_keys=KEYS)
    data = ray_trainer.compute_advantage(make_batch(7), adv_estimator="dara", config=config)
    metrics = data.meta_info["dara_metrics"]
    for key in KEYS:
        assert 0.0 <= metrics[f"dara/density/{key}"] <= 1.0
        assert f"dara/weight/{key}" in metrics and f"dara/energy/{key}" in metrics
    adv = data.batch["advantages"]
    assert torch.isfinite(adv).all() and (adv * (1 - data.batch["response_mask"])).abs().max() == 0


def test_data_metrics_carry_the_diagnostics():
    """verl's legacy trainer logs what compute_data_metrics returns: ours joins its own."""
    dara_verl.configure(alpha=0.5)
    data = ray_trainer.compute_advantage(make_batch(8), adv_estimator="dara",
                                         config=AlgoConfig(gdpo_reward_keys=KEYS))
    data.batch["token_level_scores"] = data.batch["token_level_rewards"]
    data.batch["responses"] = torch.zeros_like(data.batch["response_mask"], dtype=torch.long)
    metrics = ray_trainer.compute_data_metrics(data, use_critic=False)
    assert "critic/advantages/mean" in metrics
    assert {k: metrics[k] for k in data.meta_info["dara_metrics"]} == data.meta_info["dara_metrics"]


@pytest.mark.parametrize("options,weights,expected", [
    ({}, None, dict(method="dara")),
    ({"calibration": "symmetric", "max_weight": 2.0}, None,
     dict(method="dara", calibration="symmetric", max_weight=2.0)),
    ({"method": "static", "calibration": "positive"}, [1.0, 1.0, 5.0],
     dict(method="static", calibration="positive", reward_weights=[1.0, 1.0, 5.0])),
], ids=["dara-asym", "dara-sym-capped-at-2", "static-asym"])
def test_dara_options_reach_the_op(options, weights, expected):
    """The paper's arms through algorithm.dara_options: the same advantages as the op called directly."""
    dara_verl.configure()
    config = AlgoConfig(gdpo_reward_keys=KEYS, gdpo_reward_weights=weights)
    config.dara_options = options
    batch = make_batch(4)
    data = ray_trainer.compute_advantage(copy.deepcopy(batch), adv_estimator="dara", config=config)
    rewards = torch.from_numpy(np.stack([batch.non_tensor_batch[k].astype(np.float32) for k in KEYS], 1))
    direct = dk.fused_advantage(rewards, group_index=dara_verl.group_ids(batch.non_tensor_batch["uid"]),
                                preset="verl", response_mask=batch.batch["response_mask"], **expected)
    assert torch.equal(data.batch["advantages"], direct.token_advantages)


@pytest.mark.parametrize("method", dk.METHODS)
def test_every_method_through_dara_options(method):
    """Every method of the op through the one route, algorithm.dara_options.method (the authors' RVPO
    baseline as they run it: token whitening over the mask)."""
    dara_verl.configure()
    config = AlgoConfig(gdpo_reward_keys=KEYS)
    config.dara_options = {"method": method}
    batch = make_batch(5)
    data = ray_trainer.compute_advantage(copy.deepcopy(batch), adv_estimator="dara", config=config)
    rewards = torch.from_numpy(np.stack([batch.non_tensor_batch[k].astype(np.float32) for k in KEYS], 1))
    defaults = dara_verl.GRPO_DEFAULTS if method == "grpo" else dara_verl.DEFAULTS
    direct = dk.fused_advantage(rewards, group_index=dara_verl.group_ids(batch.non_tensor_batch["uid"]),
                                method=method, response_mask=batch.batch["response_mask"], **defaults)
    assert torch.equal(data.batch["advantages"], direct.token_advantages)


def test_gdpo_fused_takes_no_method():
    config = AlgoConfig(gdpo_reward_keys=KEYS)
    config.dara_options = {"method": "dara"}
    with pytest.raises(ValueError, match="dara_options.method is for the dara estimator"):
        ray_trainer.compute_advantage(make_batch(4), adv_estimator="gdpo_fused", config=config)


def drift_batch(present=None) -> DataProto:
    """drift's batch as a legacy DataProto; `present` [N] bool: the rows that exist."""
    comps, uids = drift.components(), np.array(drift.uids(), dtype=object)
    keep = np.ones(len(uids), bool) if present is None else present
    n, width = int(keep.sum()), 3
    mask = torch.ones(n, width)
    return DataProto.from_dict(
        tensors={"prompts": torch.zeros(n, 2, dtype=torch.long), "attention_mask": torch.ones(n, 2 + width).long(),
                 "response_mask": mask, "token_level_rewards": torch.zeros(n, width)},
        non_tensors={"uid": uids[keep], **{k: comps[keep, i] for i, k in enumerate(drift.KEYS)}})


@pytest.mark.parametrize("estimator,method", [("dara", "dara"), ("gdpo_fused", "gdpo")])
def test_drift_batch_gives_the_ops_advantages(estimator, method):
    """drift's non-default active_tol and nan_policy reach the estimators."""
    dara_verl.configure()
    config = AlgoConfig(gdpo_reward_keys=drift.KEYS, gdpo_reward_weights=drift.WEIGHTS)
    config.dara_options = dict(drift.OPTIONS)
    data = ray_trainer.compute_advantage(drift_batch(), adv_estimator=estimator, config=config)
    expected = drift.expected(method, preset="verl", response_mask=data.batch["response_mask"])
    assert torch.equal(data.batch["advantages"], expected.token_advantages)


def settings_batch() -> DataProto:
    """drift's batch (a missing entry scored 0: verl's rewards are never missing) with the weighted sum of the
    components as the response's token-level reward on its last token, where verl's reward path puts it."""
    data = drift_batch()
    comps = drift.components(missing=0.0)
    data.non_tensor_batch.update({k: comps[:, i] for i, k in enumerate(drift.KEYS)})
    data.batch["token_level_rewards"][:, -1] = torch.from_numpy(comps @ np.array(drift.WEIGHTS, np.float32))
    return data


@pytest.mark.parametrize("method,settings,status", drift.setting_cases("verl"))
def test_algorithm_settings_honoured_or_refused(method, settings, status):
    """Every algorithm.* setting of drift.SETTINGS, through verl's dispatcher as verl's trainers call it (with
    norm_adv_by_std_in_grpo): `dara` with method grpo equals verl's grpo, `gdpo_fused` verl's gdpo function
    given the flag (verl's dispatcher hands it to grpo only), or the launch stops with the setting named."""
    dara_verl.configure()
    ours, theirs = drift.framework_settings("verl", method, settings, status)
    estimator = "gdpo_fused" if method == "gdpo" else "dara"
    config = AlgoConfig(gdpo_reward_keys=drift.KEYS, gdpo_reward_weights=drift.WEIGHTS, adv_estimator=estimator,
                        **{k: v for k, v in ours.items() if k != "adv_estimator"})
    config.dara_options = {} if method == "gdpo" else {"method": "grpo"}
    if status == drift.REFUSED:
        with pytest.raises(ValueError, match=drift.refusal(settings)):
            dara_verl.check_at_launch(config)
        return
    norm = config.norm_adv_by_std_in_grpo
    got = ray_trainer.compute_advantage(settings_batch(), adv_estimator=estimator, norm_adv_by_std_in_grpo=norm,
                                        config=config).batch["advantages"]
    data = settings_batch()
    if theirs["adv_estimator"] == "grpo":
        expected = ray_trainer.compute_advantage(data, adv_estimator="grpo", norm_adv_by_std_in_grpo=norm,
                                                 config=config).batch["advantages"]
    else:
        expected, _ = verl.trainer.ppo.core_algos.compute_gdpo_outcome_advantage(
            data.batch["token_level_rewards"], data.batch["response_mask"], data.non_tensor_batch["uid"],
            norm_adv_by_std_in_grpo=norm, config=config, non_tensor_batch=data.non_tensor_batch, batch=data.batch)
    drift.assert_same(got, expected, f"{method} under {ours} against verl's {theirs}")


def test_a_setting_and_an_option_that_disagree_stop():
    config = AlgoConfig(gdpo_reward_keys=KEYS, norm_adv_by_std_in_grpo=False, adv_estimator="dara")
    config.dara_options = {"scale_by_std": True}
    with pytest.raises(ValueError, match=r"algorithm\.norm_adv_by_std_in_grpo=False means scale_by_std=False, "
                                         r"but algorithm\.dara_options sets scale_by_std=True"):
        dara_verl.check_at_launch(config)


@pytest.mark.parametrize("trainer_class", ["v1", "legacy"])
def test_bad_settings_stop_the_trainers_construction(verl_config, trainer_class):
    """Before any worker, rollout or step: the v1 trainer checks in its constructor's _build_replay_buffer,
    the legacy one in its constructor."""
    config = copy.deepcopy(verl_config)
    config.algorithm.dara_options = {"calibration": "positive", "method": "gdpo"}
    with pytest.raises(ValueError, match=r"algorithm\.dara_options: calibration applies to"):
        if trainer_class == "v1":
            trainer = object.__new__(PPOTrainerSync)
            trainer.config = config
            trainer._build_replay_buffer()
        else:
            ray_trainer.RayPPOTrainer(config, tokenizer=None, role_worker_mapping={}, resource_pool_manager=None)


def test_install_is_idempotent_and_uninstall_restores():
    wrapped = ray_trainer.compute_advantage
    dara_verl.install()
    assert ray_trainer.compute_advantage is wrapped
    try:
        dara_verl.uninstall()
        assert ray_trainer.compute_advantage is wrapped.__wrapped__
        assert "dara" not in verl.trainer.ppo.core_algos.ADV_ESTIMATOR_REGISTRY
    finally:
        dara_verl.install()
    assert "dara" in verl.trainer.ppo.core_algos.ADV_ESTIMATOR_REGISTRY


@pytest.mark.parametrize("estimator", ["gdpo", "grpo", "rloo"])
def test_verl_estimators_untouched(estimator):
    """Through the wrapper, verl's own estimators give what the unwrapped dispatcher gives."""
    config = AlgoConfig(gdpo_reward_keys=KEYS)
    data = make_batch(3)
    data.batch["token_level_rewards"][:, -1] = torch.from_numpy(data.non_tensor_batch["accuracy"])
    unwrapped = ray_trainer.compute_advantage.__wrapped__(copy.deepcopy(data), adv_estimator=estimator,
                                                          config=config)
    wrapped = ray_trainer.compute_advantage(copy.deepcopy(data), adv_estimator=estimator, config=config)
    assert torch.equal(unwrapped.batch["advantages"], wrapped.batch["advantages"])


def test_group_ids_number_uids_by_first_appearance():
    ids = dara_verl.group_ids(np.array(["b", "a", "b", "c"], dtype=object))
    assert ids.dtype == torch.int64 and ids.tolist() == [0, 1, 0, 2]
    assert dara_verl.group_ids(np.array([7, 3, 7], dtype=np.int32)).tolist() == [7, 3, 7]


# ---------------------------------------------------------------- v1 trainer

# What docs/integration-verl.md tells a user to set, composed with verl's own Hydra config.
DOCUMENTED_OVERRIDES = [
    "+ray_kwargs.ray_init.runtime_env.worker_process_setup_hook=dara_kernels.integrations.verl.install",
    "algorithm.adv_estimator=dara",
    "+algorithm.gdpo_reward_keys=[accuracy,format,length]",
    "+algorithm.gdpo_reward_weights=[1.0,0.5,2.0]",
    "+algorithm.dara_options.alpha=0.5",
    "+algorithm.dara_options.density_floor=0.05",
]
PARTITION = "train"
EOS = 2


@pytest.fixture(scope="module")
def verl_config():
    with initialize_config_module("verl.trainer.config", version_base=None):
        config = compose("ppo_trainer", overrides=DOCUMENTED_OVERRIDES)
    assert config.trainer.use_v1, "verl's default trainer is no longer v1: revisit these tests"
    return config


@pytest.fixture
def tq(monkeypatch):
    """verl's v1 modules call transfer_queue.kv_batch_* through the module: the stand-in replaces them."""
    standin = TransferQueueStandIn()
    monkeypatch.setattr(transfer_queue, "kv_batch_get", standin.kv_batch_get)
    monkeypatch.setattr(transfer_queue, "kv_batch_put", standin.kv_batch_put)
    return standin


def v1_rows(seed: int) -> list[dict]:
    """Responses of uneven prompt groups (a singleton among them) in shuffled order, keyed as verl's agent
    loop keys them ({uid}_{session}_{output}); tool tokens (mask 0) inside the longer responses."""
    rng = np.random.default_rng(seed)
    rows = []
    for g, size in enumerate([1, 5, 3, 8, 2, 7, 4]):
        uid = f"s{seed}p{g}"
        for session in range(size):
            length = int(rng.integers(1, 10))
            mask = torch.ones(length, dtype=torch.int64)
            if length >= 4:
                mask[1:3] = 0
            rows.append({"key": f"{uid}_{session}_0", "uid": uid, "mask": mask, "components": {
                "accuracy": float(rng.random() < 0.5), "format": float(rng.random() < 0.1),
                "length": float(rng.normal(0.3, 1.0))}})
    return [rows[i] for i in rng.permutation(len(rows))]


def put_rows(tq, rows, colocated: bool):
    """As verl writes them: the agent loop puts each row, with compute_score's dict in
    extra_fields["reward_extra_info"] when reward loop workers scored it; a colocated reward model instead
    writes rm_scores and its reward_extra_keys afterwards (trainer_base._compute_reward_colocate)."""
    keys = [r["key"] for r in rows]
    scores = [torch.zeros(len(r["mask"])).index_fill_(0, torch.tensor([len(r["mask"]) - 1]),
                                                       sum(r["components"].values())) for r in rows]
    tq.kv_batch_put(keys=keys, partition_id=PARTITION, tags=[{"status": "success"} for _ in rows],
                    fields=tu.list_of_dict_to_tensordict([{
                        "uid": r["uid"], "response_mask": r["mask"], "responses": torch.full_like(r["mask"], 7),
                        "prompts": torch.full((4,), 5), "rm_scores": s,
                        "extra_fields": {"reward_extra_info": {} if colocated else dict(r["components"]),
                                         "min_global_steps": 0}} for r, s in zip(rows, scores)]))
    if colocated:
        write_back = {"rm_scores": torch.nested.as_nested_tensor(scores, layout=torch.jagged)}
        for key in rows[0]["components"]:
            write_back[key] = np.array([r["components"][key] for r in rows])
        tq.kv_batch_put(keys=keys, partition_id=PARTITION, fields=tu.get_tensordict(write_back))
    return transfer_queue.KVBatchMeta(keys=keys, tags=[{"status": "success"} for _ in rows], partition_id=PARTITION)


def v1_trainer(config, colocated: bool):
    """verl's sync v1 trainer without its workers: _compute_advantage reads only the config, and the
    integration reads whether a reward loop worker or a colocated reward model scored the rows."""
    trainer = object.__new__(PPOTrainerSync)
    trainer.config = config
    trainer.reward_loop_manager = SimpleNamespace(reward_loop_worker_handles=None if colocated else [object()])
    trainer.replay_buffer = None  # no DAPO filter
    return trainer


def v1_advantages(tq, config, rows, estimator: str, colocated: bool = False, batch=None):
    config = copy.deepcopy(config)
    config.algorithm.adv_estimator = estimator
    batch = batch if batch is not None else put_rows(tq, rows, colocated)
    metrics: dict = {}
    v1_trainer(config, colocated)._compute_advantage(batch, metrics=metrics)
    advantages = tq.kv_batch_get(keys=batch.keys, partition_id=PARTITION, select_fields=["advantages"])
    return advantages["advantages"].to_padded_tensor(0.0), metrics


def legacy_advantages(config, rows, estimator: str):
    """The same rows through the legacy dispatcher, as a DataProto that carries the components."""
    width = max(len(r["mask"]) for r in rows)
    mask = torch.stack([torch.nn.functional.pad(r["mask"], (0, width - len(r["mask"]))) for r in rows]).float()
    lengths = torch.tensor([len(r["mask"]) for r in rows])
    attention = torch.cat([torch.ones(len(rows), 4), (torch.arange(width) < lengths[:, None]).float()], 1)
    components = {k: np.array([r["components"][k] for r in rows], dtype=np.float32) for k in rows[0]["components"]}
    data = DataProto.from_dict(
        tensors={"prompts": torch.zeros(len(rows), 4, dtype=torch.long), "attention_mask": attention.long(),
                 "response_mask": mask, "token_level_rewards": torch.zeros(len(rows), width)},
        non_tensors={"uid": np.array([r["uid"] for r in rows], dtype=object), **components})
    data = ray_trainer.compute_advantage(data, adv_estimator=estimator, config=config.algorithm)
    return data.batch["advantages"], data.meta_info.get("dara_metrics")


def relative_error(a, b) -> float:
    return (a - b).abs().max().item() / max(1.0, b.abs().max().item())


@pytest.mark.parametrize("colocated", [False, True], ids=["reward-workers", "colocated-reward-model"])
@pytest.mark.parametrize("seed", range(3))
def test_v1_gdpo_fused_equals_verl_gdpo(tq, verl_config, seed, colocated):
    rows = v1_rows(seed)
    ours, _ = v1_advantages(tq, verl_config, rows, "gdpo_fused", colocated)
    theirs, _ = legacy_advantages(verl_config, rows, "gdpo")
    err = relative_error(ours, theirs)
    print(f"seed {seed}: largest difference {err:.2e} of max |A| through the v1 trainer")
    assert err < 1e-5


def test_v1_dara_reports_metrics_into_the_step(tq, verl_config):
    rows = v1_rows(11)
    ours, metrics = v1_advantages(tq, verl_config, rows, "dara")
    theirs, legacy_metrics = legacy_advantages(verl_config, rows, "dara")
    assert relative_error(ours, theirs) < 1e-6
    assert metrics.keys() == legacy_metrics.keys()
    for key in ["accuracy", "format", "length"]:
        assert 0.0 < metrics[f"dara/density/{key}"] <= 1.0
        assert metrics[f"dara/density/{key}"] == pytest.approx(legacy_metrics[f"dara/density/{key}"])
        assert metrics[f"dara/weight/{key}"] == pytest.approx(legacy_metrics[f"dara/weight/{key}"])
    # PPOTrainer.step hands each iteration's dict to this aggregator; what survives it is logged.
    aggregator = MetricsAggregator()
    aggregator.add_step_metrics(metrics, sample_count=len(rows))
    assert aggregator.get_aggregated_metrics() == pytest.approx(metrics)


def test_v1_padding_rows_do_not_count(tq, verl_config):
    """verl pads a batch to a multiple of the data-parallel size with copies of its first row (here through
    verl's own upsample_batch_to_divisible_size): they get advantage 0 and change no statistic."""
    rows = v1_rows(5)
    batch = upsample_batch_to_divisible_size(put_rows(tq, rows, colocated=False), 8, EOS)
    assert len(batch) > len(rows) and batch.tags[-1]["is_padding"]
    ours, metrics = v1_advantages(tq, verl_config, rows, "dara", batch=batch)
    theirs, legacy_metrics = legacy_advantages(verl_config, rows, "dara")
    width = theirs.shape[1]
    assert relative_error(ours[:len(rows), :width], theirs) < 1e-6
    assert ours[len(rows):].abs().max() == 0
    assert metrics == pytest.approx(legacy_metrics)


@pytest.mark.parametrize("colocated", [False, True], ids=["reward-workers", "colocated-reward-model"])
def test_v1_missing_component_names_it(tq, verl_config, colocated):
    rows = v1_rows(2)
    for r in rows:
        del r["components"]["format"]
    with pytest.raises(ValueError, match=r"reward components \['format'\]"):
        v1_advantages(tq, verl_config, rows, "dara", colocated)


@pytest.mark.parametrize("estimator", ["grpo", "rloo", "reinforce_plus_plus"])
def test_v1_verl_estimators_untouched(tq, verl_config, estimator):
    """Other estimators: the wrapped method fetches nothing more and gives what verl's own method gives."""
    config = copy.deepcopy(verl_config)
    config.algorithm.adv_estimator = estimator
    rows = v1_rows(4)
    batch = put_rows(tq, rows, colocated=False)
    trainer = v1_trainer(config, colocated=False)
    fetched, advantages = [], []
    for method in (type(trainer)._compute_advantage.__wrapped__, type(trainer)._compute_advantage):
        tq.gets.clear()
        method(trainer, batch, metrics={})
        fetched.append(list(tq.gets))
        advantages.append(tq.kv_batch_get(keys=batch.keys, partition_id=PARTITION, select_fields=["advantages"]))
    assert fetched[0] == fetched[1]
    assert torch.equal(advantages[0]["advantages"].values(), advantages[1]["advantages"].values())


def test_v1_task_runner_gets_the_estimators_from_the_setup_hook(verl_config, tmp_path):
    """verl's own run_ppo, given the documented overrides, starts Ray with the setup hook and runs the
    TaskRunner as a Ray actor, a process that never imports this package otherwise (it gets the test's
    functions by value, none of which refers to it). There, on the real TransferQueue, verl's
    _compute_advantage runs "dara"; it must give what the legacy dispatcher gives here."""
    import ray
    from verl.trainer import main_ppo

    config = copy.deepcopy(verl_config)
    with open_dict(config):
        config.ray_kwargs.ray_init.num_cpus = 4  # the TaskRunner and TransferQueue's controller and storage
        config.transfer_queue.backend.SimpleStorage.num_data_storage_units = 1
    rows = v1_rows(9)
    result = tmp_path / "task_runner.pt"

    @ray.remote
    class TaskRunner:
        def __init__(self):
            self.installed_at_start = "dara_kernels.integrations.verl" in sys.modules

        def run(self, config):
            transfer_queue.init(config.transfer_queue)
            try:
                advantages, metrics = v1_advantages(transfer_queue, config, rows, "dara")
            finally:
                transfer_queue.close()
            torch.save({"installed_at_start": self.installed_at_start, "advantages": advantages,
                        "metrics": metrics}, result)

    ray.cloudpickle.register_pickle_by_value(sys.modules[__name__])
    # run_ppo waits on the TaskRunner without a timeout; an actor Ray cannot place would wait for ever.
    faulthandler.dump_traceback_later(300, exit=True)
    try:
        main_ppo.run_ppo(config, task_runner_class=TaskRunner)
    finally:
        faulthandler.cancel_dump_traceback_later()
        ray.shutdown()
        ray.cloudpickle.unregister_pickle_by_value(sys.modules[__name__])
    got = torch.load(result)
    theirs, legacy_metrics = legacy_advantages(verl_config, rows, "dara")
    assert got["installed_at_start"]
    assert relative_error(got["advantages"], theirs) < 1e-6
    assert got["metrics"] == pytest.approx(legacy_metrics)


def replay_buffer_with(tq, config, rows):
    """verl's real sync ReplayBuffer, built by the v1 trainer's own _build_replay_buffer, with `rows` finished."""
    trainer = object.__new__(PPOTrainerSync)
    trainer.config = config
    trainer.trainer_mode = "sync"
    trainer._add_prompts_to_generate = lambda *args, **kwargs: None
    buffer = trainer._build_replay_buffer()
    put_rows(tq, rows, colocated=False)
    for r in rows:
        buffer.partitions[PARTITION][r["key"]] = {"status": "success"}
    buffer.finished_keys[PARTITION] = {r["uid"] for r in rows}
    return buffer


def signal_rows() -> list[dict]:
    """Three groups of 4: components that vary while their sum is constant, all components constant, and
    one that varies in its sum."""
    def group(uid, components):
        return [{"key": f"{uid}_{i}_0", "uid": uid, "mask": torch.ones(3, dtype=torch.int64),
                 "components": dict(zip(KEYS, c))} for i, c in enumerate(components)]

    return (group("conflict", [(2.0, 0.0, 0.0), (0.0, 1.0, 1.0)] * 2) + group("uniform", [(1.0, 1.0, 1.0)] * 4)
            + group("varies", [(1.0, 0.0, 0.0), (0.0, 0.0, 0.0)] * 2))


@pytest.mark.parametrize("metric,dropped", [
    ("dara_signal", {"uniform"}),                   # any component varies: the constant-sum group is kept
    ("dara_sum_signal", {"uniform", "conflict"}),   # the summed reward, as verl's own filter
    ("reward", {"uniform", "conflict"}),            # verl's own: rm_scores, the plain sum of the components
], ids=["dara_signal", "dara_sum_signal", "verl-reward"])
def test_v1_dapo_filter_sees_every_component(tq, verl_config, metric, dropped):
    config = copy.deepcopy(verl_config)
    config.algorithm.filter_groups.enable = True
    config.algorithm.filter_groups.metric = metric
    config.algorithm.gdpo_reward_weights = [1.0, 1.0, 1.0]
    buffer = replay_buffer_with(tq, config, signal_rows())
    assert buffer.filter_groups_metric == metric
    filtered, counts = buffer._dapo_filtered_keys(PARTITION)
    assert filtered == dropped
    assert counts[3.0] == 1  # the uniform group's shared summed reward, verl's diagnostic


def test_v1_dapo_filter_names_missing_components(tq, verl_config):
    config = copy.deepcopy(verl_config)
    config.algorithm.filter_groups.enable = True
    config.algorithm.filter_groups.metric = "dara_signal"
    config.algorithm.gdpo_reward_keys = ["accuracy", "no_such_reward"]
    config.algorithm.gdpo_reward_weights = None
    buffer = replay_buffer_with(tq, config, signal_rows())
    with pytest.raises(RuntimeError, match="no_such_reward"):
        buffer._dapo_filtered_keys(PARTITION)


def drift_rows() -> list[dict]:
    """drift's batch as v1 rows; one-live down to its one live trajectory."""
    comps, uids, live = drift.components(), drift.uids(), drift.live()
    return [{"key": f"{uid}_{i}_0", "uid": uid, "mask": torch.ones(3, dtype=torch.int64),
             "components": dict(zip(drift.KEYS, map(float, comps[i])))} for i, uid in enumerate(uids) if live[i]]


@pytest.mark.parametrize("metric,criterion", [("dara_signal", "any"), ("dara_sum_signal", "sum")])
def test_v1_dapo_filter_on_the_drift_batch(tq, verl_config, metric, criterion):
    """The filter decides with algorithm.dara_options (drift's non-default active_tol and nan_policy) and keeps a
    group of one trajectory, as verl's own filter does; the step's metrics get the sampling metrics."""
    config = copy.deepcopy(verl_config)
    config.algorithm.filter_groups.enable = True
    config.algorithm.filter_groups.metric = metric
    config.algorithm.gdpo_reward_keys, config.algorithm.gdpo_reward_weights = drift.KEYS, drift.WEIGHTS
    config.algorithm.dara_options = dict(drift.OPTIONS)
    rows = drift_rows()
    buffer = replay_buffer_with(tq, config, rows)
    filtered, _ = buffer._dapo_filtered_keys(PARTITION)
    kept = drift.kept(criterion, keeps_singletons=True, masked=True)
    assert set(drift.GROUPS) - filtered == kept
    trainer = v1_trainer(config, colocated=False)
    trainer.replay_buffer = buffer
    kept_rows = [r for r in rows if r["uid"] in kept]
    batch = transfer_queue.KVBatchMeta(keys=[r["key"] for r in kept_rows], tags=[{}] * len(kept_rows),
                                       partition_id=PARTITION)
    metrics: dict = {}
    trainer._compute_advantage(batch, metrics=metrics)
    assert {k: v for k, v in metrics.items() if k.startswith("dara/sampling/")} == {
        "dara/sampling/rounds": 1, "dara/sampling/acceptance_rate": len(kept) / 6,
        "dara/sampling/generation_overhead": len(rows) / len(kept_rows),
        "dara/sampling/informative_groups_discarded": {"any": 0, "sum": 1}[criterion],
        "dara/sampling/reverse_conflict_rate": 1 / 6}
    assert verl_dapo.sampling_metrics(buffer, len(kept_rows)) == {}  # counted once
