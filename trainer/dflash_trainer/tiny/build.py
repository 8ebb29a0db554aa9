"""Write a tiny target model directory that `AutoTokenizer`/`AutoModelForCausalLM` load offline.

Optionally teaches the random model the chat format for a few steps (`teach_steps`), so that
its generations look like `<think>...</think> answer<|im_end|>` and the demo's gates can pass.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import torch
from transformers import GenerationConfig, PreTrainedModel, PreTrainedTokenizerBase

from dflash_trainer.tiny.model import TinySize, build_config, build_model, padded_vocab_size
from dflash_trainer.tiny.prompts import build_conversations
from dflash_trainer.tiny.tokenizer import (
    ENDOFTEXT,
    IM_END,
    THINK_END,
    THINK_START,
    build_hf_tokenizer,
)

METADATA_FILE = "dflash_tiny.json"
# Format lesson: small batches of short conversations at a high learning rate are enough for a
# 64-wide model to learn "think block, answer, end of turn" in a few hundred CPU steps.
TEACH_BATCH = 16
TEACH_LR = 3e-3
TEACH_CONVERSATIONS = 256
# The model is so small that intra-op threads only add synchronisation: one thread is several
# times faster than two on a busy 2-core machine (measured), and the result is the same.
TEACH_THREADS = 1


@dataclass(frozen=True)
class TinyTarget:
    path: Path
    arch: str
    seed: int
    vocab_size: int
    tokenizer_size: int
    mask_token_id: int
    eos_token_id: int
    think_start_id: int
    think_end_id: int
    layers: int
    hidden: int
    teach_steps: int


def build_tiny_target(
    out: Path,
    arch: str = "qwen3",
    seed: int = 0,
    size: TinySize | None = None,
    teach_steps: int = 0,
) -> TinyTarget:
    """Build the tokenizer and model, optionally teach the chat format, and save both to `out`."""
    size = size or TinySize()
    tokenizer = build_hf_tokenizer(arch)
    eos_id = token_id(tokenizer, IM_END)
    pad_id = token_id(tokenizer, ENDOFTEXT)
    vocab_size = padded_vocab_size(len(tokenizer))
    config = build_config(arch, vocab_size, eos_id, pad_id, size)
    model = build_model(config, seed)
    if teach_steps > 0:
        teach_chat_format(model, tokenizer, teach_steps, seed)
    out.mkdir(parents=True, exist_ok=True)
    tokenizer.save_pretrained(out)
    model.save_pretrained(out)
    generation: Any = GenerationConfig
    generation(eos_token_id=eos_id, pad_token_id=pad_id, do_sample=False).save_pretrained(out)
    target = TinyTarget(
        path=out,
        arch=arch,
        seed=seed,
        vocab_size=vocab_size,
        tokenizer_size=len(tokenizer),
        mask_token_id=len(tokenizer),
        eos_token_id=eos_id,
        think_start_id=token_id(tokenizer, THINK_START),
        think_end_id=token_id(tokenizer, THINK_END),
        layers=size.layers,
        hidden=size.hidden,
        teach_steps=teach_steps,
    )
    (out / METADATA_FILE).write_text(json.dumps(build_metadata(target), indent=2) + "\n")
    return target


def token_id(tokenizer: PreTrainedTokenizerBase, token: str) -> int:
    """The id of one token (the tiny tokenizer always has it)."""
    value = tokenizer.convert_tokens_to_ids(token)
    if not isinstance(value, int):
        raise ValueError(f"{token!r} is not a single token of the tiny tokenizer")
    return value


def build_metadata(target: TinyTarget) -> dict[str, Any]:
    meta = asdict(target)
    meta["path"] = str(target.path)
    return meta


def teach_chat_format(
    model: PreTrainedModel,
    tokenizer: PreTrainedTokenizerBase,
    steps: int,
    seed: int,
    conversations: list[list[dict[str, Any]]] | None = None,
) -> None:
    """A few AdamW steps of next-token loss on rendered tiny conversations (thinking on);
    `conversations` replaces the built-in ones (tests teach a further lesson this way)."""
    torch.manual_seed(seed)
    texts = [
        tokenizer.apply_chat_template(conv, tokenize=False)
        for conv in conversations or build_conversations(TEACH_CONVERSATIONS, seed)
    ]
    encoded = [tokenizer(t, add_special_tokens=False)["input_ids"] for t in texts]
    pad_id = int(tokenizer.pad_token_id)
    optimizer = torch.optim.AdamW(model.parameters(), lr=TEACH_LR)
    generator = torch.Generator().manual_seed(seed)
    threads = torch.get_num_threads()
    torch.set_num_threads(TEACH_THREADS)
    model.train()
    try:
        _teach_steps(model, encoded, pad_id, optimizer, generator, steps)
    finally:
        torch.set_num_threads(threads)
        model.train(False)


def _teach_steps(
    model: PreTrainedModel,
    encoded: list[list[int]],
    pad_id: int,
    optimizer: torch.optim.Optimizer,
    generator: torch.Generator,
    steps: int,
) -> None:
    for _ in range(steps):
        pick = torch.randint(len(encoded), (TEACH_BATCH,), generator=generator).tolist()
        batch = [encoded[i] for i in pick]
        width = max(len(ids) for ids in batch)
        ids = torch.full((len(batch), width), pad_id, dtype=torch.long)
        labels = torch.full((len(batch), width), -100, dtype=torch.long)
        for row, seq in enumerate(batch):
            ids[row, : len(seq)] = torch.tensor(seq)
            labels[row, : len(seq)] = torch.tensor(seq)
        loss = model(input_ids=ids, attention_mask=(labels != -100).long(), labels=labels).loss
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
