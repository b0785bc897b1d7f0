"""Dynamic sampling (docs/trainer.md): the round sizing, each round's own prompts, the groups a step keeps (by
fused_advantage's flags, whole groups, in order), a step without signal that makes no update, and runs on the
toy preset (HF) and on two ranks. The math preset's run with vLLM is in test_trainer_vllm.py."""
import random
from types import SimpleNamespace

import pytest
import torch

import dara_kernels as dk
from dara_train.config import TrainConfig
from dara_train.sampling import check_sampling, first_round_groups, next_round_groups, round_rng

G = 2
UNIFORM, VARIES, CONFLICT = [[1, 1], [1, 1]], [[1, 0], [0, 0]], [[1, 0], [0, 1]]   # CONFLICT: the sum is constant


def test_round_sizing():
    # deficit / observed acceptance * 1.25, rounded up to a multiple of the ranks
    assert next_round_groups(deficit=147, accepted=357, candidates=500, cap=768, world=8) == 264
    assert next_round_groups(deficit=1, accepted=3, candidates=6, cap=6, world=1) == 3
    assert next_round_groups(deficit=1, accepted=3, candidates=6, cap=6, world=2) == 4
    # at least one group per rank, at most the first round's size, which is also asked for while none passed
    assert next_round_groups(deficit=1, accepted=100, candidates=100, cap=64, world=4) == 4
    assert next_round_groups(deficit=50, accepted=1, candidates=64, cap=64, world=4) == 64
    assert next_round_groups(deficit=8, accepted=0, candidates=12, cap=12, world=2) == 12
    assert next_round_groups(deficit=0, accepted=4, candidates=6, cap=6, world=2) == 2


def rollout(**values):
    ro = TrainConfig().rollout
    for key, value in values.items():
        setattr(ro, key, value)
    return ro


def test_settings_are_checked():
    assert check_sampling(rollout(dynamic_sampling=False), 1) == "off"   # YAML's bare `off`
    assert check_sampling(rollout(dynamic_sampling="sum", candidate_groups=24), 2) == "sum"
    with pytest.raises(ValueError, match="is not one of off, any, sum"):
        check_sampling(rollout(dynamic_sampling="all"), 1)
    with pytest.raises(ValueError, match="candidate_groups=9 must be a positive multiple of the 2 ranks"):
        check_sampling(rollout(dynamic_sampling="any", candidate_groups=9), 2)
    with pytest.raises(ValueError, match="max_rounds=0"):
        check_sampling(rollout(dynamic_sampling="any", max_rounds=0), 1)
    with pytest.raises(ValueError, match="prompts_per_step=15 must be divisible by the 2 ranks"):
        check_sampling(rollout(prompts_per_step=15), 2)
    # a first round of one group and a single round are allowed; no group, or fewer, is not (-2: a multiple of 2)
    assert check_sampling(rollout(dynamic_sampling="any", candidate_groups=1, max_rounds=1), 1) == "any"
    with pytest.raises(ValueError, match="candidate_groups=-2 must be a positive multiple of the 2 ranks"):
        check_sampling(rollout(dynamic_sampling="any", candidate_groups=-2), 2)
    with pytest.raises(ValueError, match="candidate_groups=0 must be a positive multiple of the 1 ranks"):
        check_sampling(rollout(dynamic_sampling="any", prompts_per_step=0), 1)
    # without dynamic sampling its settings are not read
    assert check_sampling(rollout(candidate_groups=9, max_rounds=0), 2) == "off"
    # candidate_groups 0: the first round is prompts_per_step
    assert first_round_groups(rollout(prompts_per_step=12)) == 12
    assert first_round_groups(rollout(prompts_per_step=12, candidate_groups=18)) == 18


class ScriptedTask:
    """Each round's prompts are (round, index); each round's rewards come from the script."""

    def __init__(self, rounds):
        self.rounds, self.sizes = list(rounds), []

    def set_step(self, step):
        pass

    def sample(self, rng, count):
        from dara_train.tasks import Prompt

        self.sizes.append(count)
        return [Prompt([], (len(self.sizes) - 1, i)) for i in range(count)]

    def score(self, names, prompts, responses):
        return torch.tensor(self.rounds.pop(0), dtype=torch.float32).reshape(len(prompts), len(names))


class DrawingTask(ScriptedTask):
    """As ScriptedTask, but each prompt is drawn from the round's generator: its answer is the draw."""

    def __init__(self, rounds):
        super().__init__(rounds)
        self.drawn = []

    def sample(self, rng, count):
        from dara_train.tasks import Prompt

        self.sizes.append(count)
        self.drawn.append([rng.randrange(2 ** 62) for _ in range(count)])
        return [Prompt([], answer) for answer in self.drawn[-1]]


def one_rank_trainer(criterion, rounds, max_rounds=4, task=ScriptedTask):
    from dara_train.rollout import Generation
    from dara_train.train import Trainer

    trainer = Trainer.__new__(Trainer)
    trainer.cfg = TrainConfig()
    trainer.cfg.task.rewards = ["a", "b"]
    trainer.cfg.rollout = rollout(group_size=G, prompts_per_step=4, candidate_groups=6, max_rounds=max_rounds,
                                  dynamic_sampling=criterion)
    trainer.rank, trainer.world, trainer.step = 0, 1, 0
    trainer.criterion = check_sampling(trainer.cfg.rollout, 1)
    trainer.task = task(rounds)
    trainer.tokenizer = SimpleNamespace(encode_prompt=lambda messages: [1], decode=lambda tokens: "", reply_prefix="")
    trainer.engine = SimpleNamespace(generate=lambda prompts, n, *rest: [
        Generation(i, [5, 0], True, [0.0, 0.0]) for i in range(len(prompts)) for _ in range(n)])
    return trainer


def kept(sampled):
    for group in sampled.groups:
        assert len(group.generations) == G and group.rewards.shape == (G, 2)
    return [group.prompt.answer for group in sampled.groups]


def test_any_reward_keeps_constant_sum_groups_and_sizes_the_second_round():
    first = [UNIFORM, VARIES, UNIFORM, CONFLICT, [[0, 1], [0, 1]], [[0, 1], [0, 0]]]
    trainer = one_rank_trainer("any", [first, [UNIFORM, VARIES, VARIES]])
    sampled = trainer.sample({})
    # 3 of 6 accepted, 1 short: ceil(1 / 0.5 * 1.25) = 3 more; the first 4 accepted are kept, whole
    assert trainer.task.sizes == [6, 3]
    assert kept(sampled) == [(0, 1), (0, 3), (0, 5), (1, 1)]
    assert sampled.groups[1].rewards.tolist() == CONFLICT
    # 9 candidate groups generated for 4 trained on; `any` discards no group whose rewards vary
    assert sampled.stats == {"sampling/rounds": 2, "sampling/candidate_groups": 9, "sampling/accepted_groups": 5,
                             "sampling/acceptance_rate": 5 / 9, "sampling/informative_groups": 5,
                             "sampling/sum_informative_groups": 4, "sampling/conflict_groups": 1,
                             "sampling/generation_overhead": 9 / 4, "sampling/informative_groups_discarded": 0,
                             "sampling/reverse_conflict_rate": 1 / 9}
    assert sampled.candidate_rewards.shape == (9 * G, 2)


def test_summed_reward_drops_constant_sum_groups():
    first = [UNIFORM, VARIES, UNIFORM, CONFLICT, [[0, 1], [0, 1]], [[0, 1], [0, 0]]]
    second = [UNIFORM, VARIES, CONFLICT, VARIES, UNIFORM, VARIES]
    trainer = one_rank_trainer("sum", [first, second])
    sampled = trainer.sample({})
    # 2 of 6 accepted: ceil(2 / (1/3) * 1.25) = 8, capped at the first round's 6
    assert trainer.task.sizes == [6, 6]
    assert kept(sampled) == [(0, 1), (0, 5), (1, 1), (1, 3)]
    assert sampled.stats["sampling/accepted_groups"] == 5
    assert sampled.stats["sampling/conflict_groups"] == 2
    # the two constant-sum groups are the informative ones `sum` discards; 12 groups generated for 4 trained on
    assert sampled.stats["sampling/informative_groups_discarded"] == 2
    assert sampled.stats["sampling/generation_overhead"] == 3.0
    assert sampled.stats["sampling/reverse_conflict_rate"] == 2 / 12


def test_no_signal_within_the_cap_leaves_nothing_to_train():
    trainer = one_rank_trainer("any", [[UNIFORM] * 6, [UNIFORM] * 6], max_rounds=2)
    sampled = trainer.sample({})
    assert trainer.task.sizes == [6, 6] and sampled.groups == []
    assert sampled.stats["sampling/rounds"] == 2 and sampled.stats["sampling/acceptance_rate"] == 0
    assert sampled.signal.density.tolist() == [0.0, 0.0]


def test_round_generators():
    """Round 0 draws from the step's seed itself, every later round from a stream of its own."""
    assert round_rng(7, 0).random() == random.Random(7).random()
    draws = {(seed, r): round_rng(seed, r).random() for seed in (7, 8) for r in range(4)}
    assert len(set(draws.values())) == len(draws)
    assert round_rng(7, 2).random() == draws[7, 2]


def drawn_rounds(step, seed=0, criterion="any", rounds=3, rank=0, world=1):
    """The prompts (their answers) each round of a step draws for all ranks, and the seeds this rank's
    generations were given. No group has signal, so under dynamic sampling every round runs at the first
    round's size (6 groups; 4 without)."""
    groups = 4 if criterion == "off" else 6
    trainer = one_rank_trainer(criterion, [[UNIFORM] * (groups // world)] * rounds, max_rounds=rounds,
                               task=DrawingTask)
    trainer.cfg.seed, trainer.step, trainer.rank, trainer.world = seed, step, rank, world
    trainer.gather_groups = lambda groups: groups   # no rank has signal: nothing to gather from the others
    seeds, generate = [], trainer.engine.generate
    trainer.engine.generate = lambda prompts, n, *rest: seeds.append(rest[-1]) or generate(prompts, n, *rest)
    trainer.sample({})
    return trainer.task.drawn, seeds


def test_each_round_draws_new_prompts_reproducibly(process_group):
    from dara_train.train import step_seed

    prompts, seeds = drawn_rounds(step=5)
    assert [len(r) for r in prompts] == [6, 6, 6]
    # every round new prompts and new generation seeds, not round 0's again
    assert len({answer for r in prompts for answer in r}) == 18 and len(set(seeds)) == 3
    # round 0 is the step without dynamic sampling: its prompts (4 of them: prompts_per_step) and its seed, both
    # the step's own seed, as before dynamic sampling (the committed runs' prompts)
    assert drawn_rounds(step=5, criterion="off", rounds=1) == ([prompts[0][:4]], seeds[:1])
    step_rng = random.Random(step_seed(0, 5, 0))
    assert prompts[0] == [step_rng.randrange(2 ** 62) for _ in range(6)] and seeds[0] == step_seed(0, 5, 0)
    # the same seed and step draw the same rounds; another step or another seed draws other prompts each round
    assert drawn_rounds(step=5) == (prompts, seeds)
    # every rank draws the same candidates (and keeps its share of them), with generation seeds of its own
    other_rank, other_seeds = drawn_rounds(step=5, rank=1, world=2)
    assert other_rank == prompts and not set(other_seeds) & set(seeds)
    for other in (drawn_rounds(step=6)[0], drawn_rounds(step=5, seed=1)[0]):
        assert all(not set(ours) & set(theirs) for ours, theirs in zip(prompts, other))


@pytest.fixture
def process_group():
    """train_step reduces its counts over the ranks: a one-process group (the stand-in says how many ranks)."""
    import torch.distributed as dist

    if dist.is_initialized():
        yield
        return
    dist.init_process_group("gloo", rank=0, world_size=1, store=dist.HashStore())
    yield
    dist.destroy_process_group()


def no_update(*args, **kwargs):
    raise AssertionError("a step without accepted groups to share reached the update")


def test_fewer_accepted_groups_than_ranks_make_no_update(process_group, monkeypatch, capsys):
    """Two ranks as rank 0 sees them: its half of the round (3 of 6 groups) has one group with signal, the
    other rank's half none. One group cannot be shared by two ranks: no rank trains."""
    trainer = one_rank_trainer("any", [[VARIES, UNIFORM, UNIFORM]], max_rounds=1)
    trainer.world = 2
    trainer.gather_groups = lambda groups: groups  # what all_gather_object returns when the other rank has none
    monkeypatch.setattr("dara_train.train.update", no_update)
    record = trainer.train_step()
    assert (record["sampling/accepted_groups"], record["sampling/trained_groups"], record["sampling/updated"]) == \
        (1, 0, 0)
    assert record["sampling/generation_overhead"] == float("inf") and "train/loss" not in record
    assert "step 1: 1 accepted groups for 2 ranks in 1 rounds (6 candidate groups): no policy update" in \
        capsys.readouterr().err


def test_step_without_update_logs_the_first_rounds_densities(process_group, monkeypatch):
    """Under `sum` round 1's groups trade off at a constant sum (both rewards vary in each: density 1) and round
    2's vary in nothing (density 0): the step logs round 1's."""
    trainer = one_rank_trainer("sum", [[CONFLICT] * 6, [UNIFORM] * 6], max_rounds=2)
    monkeypatch.setattr("dara_train.train.update", no_update)
    record = trainer.train_step()
    assert record["sampling/rounds"] == 2 and record["sampling/updated"] == 0
    assert (record["density/a"], record["density/b"]) == (1.0, 1.0)
    assert record["sampling/informative_groups_discarded"] == 6 and record["sampling/reverse_conflict_rate"] == 0.5


def test_no_signal_reaches_the_op_through_advantage_options():
    trainer = one_rank_trainer("off", [])
    # reward b varies in fewer groups than a: DARA weighs it up, and positive calibration shifts the batch mean
    rewards = torch.tensor(UNIFORM + VARIES + VARIES + [[0, 1], [0, 0]], dtype=torch.float32)
    lengths = torch.full((8,), 2)
    kept = trainer.advantages(rewards, lengths).advantages
    assert kept[:2].abs().min() > 0.01   # DARA-Asym's positive batch mean pushes the uniform group
    trainer.cfg.advantage.options = {"no_signal": "zero"}
    zeroed = trainer.advantages(rewards, lengths).advantages
    assert zeroed[:2].tolist() == [0.0, 0.0] and zeroed[2:].abs().min() > 0.01



def test_reward_gates_reach_the_op_by_reward_name():
    """advantage.options passes reward_gates on; the trainer names the columns after task.rewards."""
    trainer = one_rank_trainer("off", [])
    rewards = torch.tensor(VARIES + VARIES + CONFLICT + [[0, 1], [1, 1]], dtype=torch.float32)
    lengths = torch.full((8,), 2)
    trainer.cfg.advantage.options = {"reward_gates": {"b": "a"}}
    gated = trainer.advantages(rewards, lengths)
    by_hand = rewards.clone()
    by_hand[:, 1] *= rewards[:, 0]   # b counts only where a passes
    expected = dk.fused_advantage(by_hand, G, method="dara", response_lengths=lengths)
    assert torch.equal(gated.advantages, expected.advantages) and torch.equal(gated.density, expected.density)

pytest.importorskip("transformers")
from dara_train.metrics import read_metrics  # noqa: E402
from tests.test_trainer_toy import final_weights  # noqa: E402
from tests.trainer_helpers import run_train  # noqa: E402


@pytest.mark.parametrize("criterion, ranks", [("any", 1), ("sum", 2)])
def test_toy_run_trains_on_accepted_groups(tmp_path, criterion, ranks):
    out = tmp_path / "run"
    run_train("--preset", "toy", "--steps", "3", "--output-dir", str(out), "--set", "eval_every=0",
              "--set", f"rollout.dynamic_sampling={criterion}", "--set", "rollout.candidate_groups=8", ranks=ranks)
    flag = {"any": "sampling/informative_groups", "sum": "sampling/sum_informative_groups"}[criterion]
    steps = [r for r in read_metrics(out) if "sampling/rounds" in r]
    assert len(steps) == 3
    for r in steps:
        assert r["sampling/accepted_groups"] == r[flag]
        assert r["sampling/trained_groups"] == min(16, r["sampling/accepted_groups"] // ranks * ranks)
        assert r["sampling/responses"] == 8 * r["sampling/candidate_groups"]
        assert r["sampling/rounds"] >= 2 and r["sampling/candidate_groups"] % ranks == 0
        assert r["sampling/updated"] == 1 and "train/loss" in r


def test_step_without_signal_makes_no_update(tmp_path):
    # Greedy rollouts: a group's replies are all alike, so no reward varies in any group.
    common = ["--preset", "toy", "--set", "eval_every=0", "--set", "rollout.temperature=0"]
    run_train(*common, "--steps", "0", "--output-dir", str(tmp_path / "initial"), "--set", "report=false")
    result = run_train(*common, "--steps", "2", "--output-dir", str(tmp_path / "run"),
                       "--set", "rollout.dynamic_sampling=any", "--set", "rollout.max_rounds=2")
    # A line of its own, and off a terminal no empty line before it (that is for the progress bar's open line).
    assert "step 1: no informative group in 2 rounds (32 candidate groups): no policy update" in \
        result.stderr.splitlines()
    assert "\n\nstep 1: no informative" not in "\n" + result.stderr
    steps = [r for r in read_metrics(tmp_path / "run") if "sampling/rounds" in r]
    assert [(r["sampling/updated"], r["sampling/trained_groups"]) for r in steps] == [(0, 0), (0, 0)]
    assert not any("train/loss" in r for r in steps)
    initial, final = final_weights(tmp_path / "initial"), final_weights(tmp_path / "run")
    for name in initial:
        assert torch.equal(initial[name], final[name]), name
