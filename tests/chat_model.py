"""A tiny chat model as a user's `model.path` would hold one, built here in seconds: a Qwen2 config (GQA,
attention biases, tied embeddings; head_dim 32, vLLM's smallest) at random initialisation, and a byte-level
BPE tokenizer trained with the `tokenizers` library on the math and toolcall tasks' own prompts, with a
ChatML chat template. As in Qwen2.5 base models the tokenizer's EOS is <|endoftext|> and only the
generation config names <|im_end|>, the end of the assistant's turn; the generation config also carries
Qwen's sampling defaults, which the trainer's engines must not apply."""
from __future__ import annotations

from pathlib import Path

SPECIAL = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
CHATML = ("{% for message in messages %}{{ '<|im_start|>' + message['role'] + '\n' + message['content'] + "
          "'<|im_end|>\n' }}{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}")
VOCAB_SIZE = 512


def task_texts() -> list[str]:
    """Every message of the math and toolcall tasks' prompts, and the reply formats their rewards ask for."""
    from dara_train.config import TaskConfig
    from dara_train.tasks.math import MathTask
    from dara_train.tasks.toolcall import ToolCallTask

    prompts = MathTask(TaskConfig(name="math")).eval_prompts() + ToolCallTask(TaskConfig(name="toolcall")).prompts
    replies = ["<think>2 + 2 = 4</think><answer>4</answer>",
               '<think>call it</think><tool_call>{"name": "f", "arguments": {"x": 1}}</tool_call>']
    return [m["content"] for p in prompts for m in p.messages] + replies


def build_tokenizer():
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    bpe = Tokenizer(models.BPE())
    bpe.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    bpe.decoder = decoders.ByteLevel()
    bpe.train_from_iterator(task_texts(), trainers.BpeTrainer(
        vocab_size=VOCAB_SIZE, special_tokens=SPECIAL, initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False))
    return PreTrainedTokenizerFast(tokenizer_object=bpe, eos_token="<|endoftext|>", pad_token="<|endoftext|>",
                                   chat_template=CHATML)


def build_chat_model(directory: Path, seed: int = 0) -> Path:
    import torch
    from transformers import GenerationConfig, Qwen2Config, Qwen2ForCausalLM

    tokenizer = build_tokenizer()
    end_of_text, im_end = tokenizer.convert_tokens_to_ids(["<|endoftext|>", "<|im_end|>"])
    config = Qwen2Config(vocab_size=len(tokenizer), hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                         num_attention_heads=2, num_key_value_heads=1, max_position_embeddings=4096,
                         tie_word_embeddings=True, bos_token_id=end_of_text, eos_token_id=im_end,
                         pad_token_id=end_of_text, torch_dtype="float32")
    with torch.random.fork_rng():
        torch.manual_seed(seed)
        model = Qwen2ForCausalLM(config)
    model.generation_config = GenerationConfig(eos_token_id=[im_end, end_of_text], pad_token_id=end_of_text,
                                               do_sample=True, temperature=0.7, top_p=0.8, top_k=20,
                                               repetition_penalty=1.05)
    model.save_pretrained(directory)
    tokenizer.save_pretrained(directory)
    return directory
