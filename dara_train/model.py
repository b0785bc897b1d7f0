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


class Tokenizer(Protocol):
    eos_token_id: int
    pad_token_id: int

    def encode(self, text: str) -> list[int]: ...
    def decode(self, ids: list[int]) -> str: ...


class CharTokenizer:
    """One token per character; ids 0-2 are <pad>, <bos>, <eos>."""

    pad_token_id, bos_token_id, eos_token_id = 0, 1, 2

    def __init__(self, characters=TOY_CHARACTERS):
        self.characters = list(characters)
        self.index = {c: i + 3 for i, c in enumerate(self.characters)}

    @property
    def vocab_size(self) -> int:
        return len(self.characters) + 3

    def encode(self, text: str) -> list[int]:
        unknown = sorted({c for c in text if c not in self.index})
        if unknown:
            raise ValueError(f"characters {unknown!r} are not in the tiny model's vocabulary "
                             "(model.vocab=ascii covers printable ASCII)")
        return [self.bos_token_id] + [self.index[c] for c in text]

    def decode(self, ids) -> str:
        return "".join(self.characters[i - 3] for i in ids if i >= 3)

    def save(self, directory: Path) -> None:
        (directory / "char_tokenizer.json").write_text(json.dumps({"characters": self.characters}))


class HFTokenizer:
    """Adapter over a transformers tokenizer loaded from a local path."""

    def __init__(self, path: str):
        from transformers import AutoTokenizer

        self.inner = AutoTokenizer.from_pretrained(path)
        self.eos_token_id = self.inner.eos_token_id
        self.pad_token_id = self.inner.pad_token_id if self.inner.pad_token_id is not None else self.eos_token_id

    def encode(self, text: str) -> list[int]:
        return self.inner.encode(text)

    def decode(self, ids) -> str:
        return self.inner.decode(ids, skip_special_tokens=True)


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
