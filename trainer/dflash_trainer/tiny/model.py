"""Configs and random-weight models of the tiny target: Qwen3 (dense) or Qwen3.5 (GDN hybrid).

Sizes are chosen so that CPU generation of a few hundred samples takes seconds.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch
from transformers import PretrainedConfig, PreTrainedModel, Qwen3Config, Qwen3ForCausalLM

ARCHS = ("qwen3", "qwen3_5")
# DFlash taps 5 target layers from 1 to L-3 (`round(1 + i*(L-4)/4)`); 8 layers is the smallest
# depth where all 5 taps are distinct, so the trainer exercises its real layer selection.
DEFAULT_LAYERS = 8
DEFAULT_HIDDEN = 64
# Embedding rows are rounded up to a multiple of 64 (as Qwen pads 151669 tokens to 151936);
# the first padded row is the reserved id the drafter can use as its mask token.
VOCAB_ALIGN = 64
# Qwen3.5 repeats three Gated DeltaNet layers and one full-attention layer.
QWEN3_5_FULL_ATTENTION_INTERVAL = 4


@dataclass(frozen=True)
class TinySize:
    layers: int = DEFAULT_LAYERS
    hidden: int = DEFAULT_HIDDEN
    heads: int = 4
    kv_heads: int = 2
    max_positions: int = 4096


def padded_vocab_size(tokenizer_len: int) -> int:
    """Model vocabulary: the tokenizer plus at least one reserved row, aligned to 64."""
    return ((tokenizer_len + 1 + VOCAB_ALIGN - 1) // VOCAB_ALIGN) * VOCAB_ALIGN


def build_config(
    arch: str, vocab_size: int, eos_id: int, pad_id: int, size: TinySize
) -> PretrainedConfig:
    """A transformers config for the tiny target of family `arch`."""
    head_dim = size.hidden // size.heads
    common: dict[str, Any] = {
        "vocab_size": vocab_size,
        "hidden_size": size.hidden,
        "intermediate_size": size.hidden * 3,
        "num_hidden_layers": size.layers,
        "num_attention_heads": size.heads,
        "num_key_value_heads": size.kv_heads,
        "head_dim": head_dim,
        "max_position_embeddings": size.max_positions,
        "tie_word_embeddings": True,
        "eos_token_id": eos_id,
        "pad_token_id": pad_id,
        "bos_token_id": None,
    }
    if arch == "qwen3":
        return Qwen3Config(**common)
    if arch == "qwen3_5":
        from transformers import Qwen3_5TextConfig

        layer_types = [
            "full_attention"
            if (i + 1) % QWEN3_5_FULL_ATTENTION_INTERVAL == 0
            else "linear_attention"
            for i in range(size.layers)
        ]
        config: PretrainedConfig = Qwen3_5TextConfig(
            **common,
            layer_types=layer_types,
            linear_key_head_dim=head_dim,
            linear_value_head_dim=head_dim,
            linear_num_key_heads=size.kv_heads,
            linear_num_value_heads=size.heads,
        )
        return config
    raise ValueError(f"--arch {arch!r} is not supported; accepted: {', '.join(ARCHS)}")


def build_model(config: PretrainedConfig, seed: int) -> PreTrainedModel:
    """A causal LM with random weights drawn from `seed` (same seed, same bytes)."""
    torch.manual_seed(seed)
    model_class: Any = Qwen3ForCausalLM
    if not isinstance(config, Qwen3Config):
        from transformers import Qwen3_5ForCausalLM

        model_class = Qwen3_5ForCausalLM
    model: PreTrainedModel = model_class(config)
    model.train(False)
    return model
