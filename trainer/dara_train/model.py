"""Policy models and tokenizers: any local Hugging Face causal LM, or the
tiny from-scratch model of the embedded default with a character tokenizer."""
from __future__ import annotations

import json
from pathlib import Path
from typing import Protocol

import torch

from .config import ModelConfig

TOY_CHARACTERS = list("0123456789+=#xyz ")
ASCII_CHARACTERS = [chr(c) for c in range(32, 127)] + ["\n"]
VOCABULARIES = {"toy": TOY_CHARACTERS, "ascii": ASCII_CHARACTERS}
THINK = "<think>"   # the math and toolcall formats' reasoning block


class Tokenizer(Protocol):
    eos_token_id: int
    pad_token_id: int
    stop_token_ids: list[int]   # any of them ends a response
    reply_prefix: str           # the start of the reply that the chat template's generation prompt writes

    def encode(self, text: str) -> list[int]: ...
    def encode_prompt(self, messages: list[dict]) -> list[int]: ...
    def decode(self, ids: list[int]) -> str: ...                # a response's text, special tokens dropped
    def decode_as_seen(self, ids: list[int]) -> str: ...        # special tokens included


def plain_text(messages: list[dict]) -> str:
    """A prompt for a model without a chat template: the messages' contents, one per line."""
    return "\n".join(m["content"] for m in messages)


class CharTokenizer:
    """One token per character; ids 0-2 are <pad>, <bos>, <eos>."""

    pad_token_id, bos_token_id, eos_token_id = 0, 1, 2
    SPECIAL = ("<pad>", "<bos>", "<eos>")

    def __init__(self, characters=TOY_CHARACTERS):
        self.characters = list(characters)
        self.index = {c: i + 3 for i, c in enumerate(self.characters)}
        self.stop_token_ids = [self.eos_token_id]
        self.reply_prefix = ""

    @property
    def vocab_size(self) -> int:
        return len(self.characters) + 3

    def encode(self, text: str) -> list[int]:
        unknown = sorted({c for c in text if c not in self.index})
        if unknown:
            raise ValueError(f"characters {unknown!r} are not in the tiny model's vocabulary "
                             "(model.vocab=ascii covers printable ASCII)")
        return [self.bos_token_id] + [self.index[c] for c in text]

    def encode_prompt(self, messages: list[dict]) -> list[int]:
        return self.encode(plain_text(messages))

    def encode_reply(self, text: str) -> list[int]:
        """A reply's tokens, as the model generates them after the prompt (no BOS)."""
        return self.encode(text)[1:]

    def decode(self, ids) -> str:
        return "".join(self.characters[i - 3] for i in ids if i >= 3)

    def decode_as_seen(self, ids) -> str:
        return "".join(self.SPECIAL[i] if i < 3 else self.characters[i - 3] for i in ids)

    def save(self, directory: Path) -> None:
        (directory / "char_tokenizer.json").write_text(json.dumps({"characters": self.characters}))


def generation_stop_tokens(path: str) -> list[int]:
    """The model's own end-of-turn tokens: generation_config.json's eos_token_id (one id or a list)."""
    from transformers import GenerationConfig

    try:
        ids = GenerationConfig.from_pretrained(path).eos_token_id
    except OSError:  # no generation_config.json
        return []
    return [] if ids is None else [ids] if isinstance(ids, int) else list(ids)


class HFTokenizer:
    """Adapter over a transformers tokenizer loaded from a local path. Prompts go through its chat template
    (with the generation prompt) where it has one; a response ends at the tokenizer's EOS or any stop token
    of the model's generation config (Qwen's <|im_end|> and <|endoftext|>)."""

    def __init__(self, path: str):
        from transformers import AutoTokenizer

        self.inner = AutoTokenizer.from_pretrained(path)
        self.chat_template = bool(self.inner.chat_template)
        stops = generation_stop_tokens(path) + ([self.inner.eos_token_id] if self.inner.eos_token_id is not None
                                                else [])
        if not stops:
            raise ValueError(f"{path}: neither the tokenizer nor generation_config.json names an end token, so no "
                             "response could finish")
        self.stop_token_ids = list(dict.fromkeys(stops))
        self.eos_token_id = self.inner.eos_token_id if self.inner.eos_token_id is not None else stops[0]
        self.pad_token_id = self.inner.pad_token_id if self.inner.pad_token_id is not None else self.eos_token_id
        self.reply_prefix = self.opened_reasoning_block() if self.chat_template else ""

    def opened_reasoning_block(self) -> str:
        """DeepSeek-R1-Distill's templates end the generation prompt with "<think>\\n": the reply starts inside
        its reasoning block, and the rewards, which ask for the block, read that opening as the reply's."""
        probe = self.inner.apply_chat_template([{"role": "user", "content": "?"}], tokenize=False,
                                               add_generation_prompt=True)
        start = probe.rfind(THINK)
        return probe[start:] if start >= 0 and not probe[start + len(THINK):].strip() else ""

    def encode(self, text: str) -> list[int]:
        return self.inner.encode(text)

    def encode_prompt(self, messages: list[dict]) -> list[int]:
        if not self.chat_template:
            return self.inner.encode(plain_text(messages))
        # The template writes the special tokens (BOS included where it has one): none added twice.
        text = self.inner.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)
        return self.inner.encode(text, add_special_tokens=False)

    def decode(self, ids) -> str:
        return self.inner.decode(ids, skip_special_tokens=True)

    def decode_as_seen(self, ids) -> str:
        return self.inner.decode(ids, skip_special_tokens=False)


def tiny_config(cfg: ModelConfig, vocab_size: int):
    from transformers import LlamaConfig

    if cfg.hidden_size % cfg.heads or cfg.hidden_size // cfg.heads < 32:
        raise ValueError("model.hidden_size / model.heads must be an integer >= 32 (vLLM's smallest head_dim)")
    return LlamaConfig(
        vocab_size=vocab_size, hidden_size=cfg.hidden_size, intermediate_size=cfg.intermediate_size,
        num_hidden_layers=cfg.layers, num_attention_heads=cfg.heads, num_key_value_heads=cfg.heads,
        max_position_embeddings=cfg.max_positions, bos_token_id=1, eos_token_id=2, pad_token_id=0,
        tie_word_embeddings=False, torch_dtype="float32",
    )


def build_policy(cfg: ModelConfig, run_seed: int = 0):
    """(model, tokenizer). The tiny model is seeded (`model.seed`, else the
    run's seed) so every rank builds the same weights."""
    from transformers import AutoModelForCausalLM, LlamaForCausalLM

    if cfg.path:
        model = AutoModelForCausalLM.from_pretrained(cfg.path, torch_dtype=torch.float32)
        return model, HFTokenizer(cfg.path)
    if cfg.vocab not in VOCABULARIES:
        raise ValueError(f"model.vocab={cfg.vocab!r} is not one of {', '.join(VOCABULARIES)}")
    tokenizer = CharTokenizer(VOCABULARIES[cfg.vocab])
    with torch.random.fork_rng():
        torch.manual_seed(run_seed if cfg.seed is None else cfg.seed)
        model = LlamaForCausalLM(tiny_config(cfg, tokenizer.vocab_size))
    return model, tokenizer


def save_for_inference(model, tokenizer, directory: Path) -> Path:
    """Writes config and weights where a vLLM engine can load them."""
    directory.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(directory, safe_serialization=True)
    if isinstance(tokenizer, CharTokenizer):
        tokenizer.save(directory)
    return directory
