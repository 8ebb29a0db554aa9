"""Shapes of known targets, for when no `config.json` can be read (the operator never reads
S3). Only the keys the plan uses, copied from each model's published `config.json`; add a
target here only with its source. Nothing is ever downloaded.
"""

from __future__ import annotations

from typing import Any

from dflash_memplan.shapes import TargetShape, target_shape_from_config

# Qwen3.5 / 3.6 hybrids: three Gated DeltaNet layers, then one full-attention layer.
_QWEN3_5_LAYER_TYPES = ["linear_attention"] * 3 + ["full_attention"]

# Qwen/Qwen3-8B config.json (also bench/bench_trainer_gpu.py's QWEN3_8B and the DFlash
# reference's taps [1,9,17,25,33] for 36 layers); untied embeddings.
_QWEN3_8B: dict[str, Any] = {
    "model_type": "qwen3",
    "hidden_size": 4096,
    "intermediate_size": 12288,
    "num_hidden_layers": 36,
    "num_attention_heads": 32,
    "num_key_value_heads": 8,
    "head_dim": 128,
    "vocab_size": 151936,
    "tie_word_embeddings": False,
}
# Qwen/Qwen3-32B config.json (hidden 5120, 64 layers, 64/8 heads of 128, MLP 25600).
_QWEN3_32B: dict[str, Any] = {
    **_QWEN3_8B,
    "hidden_size": 5120,
    "intermediate_size": 25600,
    "num_hidden_layers": 64,
    "num_attention_heads": 64,
}
# Qwen/Qwen3.6-27B config.json, text_config (revision 6a9e13bd, 2026-10); Qwen3.5-27B has the
# same text shapes (THUDM/slime scripts/models/qwen3.5-27B.sh: 64 layers, hidden 5120, 24/4
# heads of 256, MLP 17408, vocab 248320, untied). The DFlash reference taps [1,16,31,46,61].
_QWEN3_6_27B: dict[str, Any] = {
    "model_type": "qwen3_5",
    "text_config": {
        "hidden_size": 5120,
        "intermediate_size": 17408,
        "num_hidden_layers": 64,
        "num_attention_heads": 24,
        "num_key_value_heads": 4,
        "head_dim": 256,
        "vocab_size": 248320,
        "tie_word_embeddings": False,
        "layer_types": _QWEN3_5_LAYER_TYPES * 16,
        "linear_num_key_heads": 16,
        "linear_num_value_heads": 48,
        "linear_key_head_dim": 128,
        "linear_value_head_dim": 128,
        "linear_conv_kernel_dim": 4,
    },
}

KNOWN_TARGET_CONFIGS: dict[str, dict[str, Any]] = {
    "Qwen/Qwen3-8B": _QWEN3_8B,
    "Qwen/Qwen3-32B": _QWEN3_32B,
    "Qwen/Qwen3.5-27B": _QWEN3_6_27B,
    "Qwen/Qwen3.6-27B": _QWEN3_6_27B,
}


def known_target_shape(model: str) -> TargetShape | None:
    """The shape of a known Hub id (case-insensitive, a trailing `/` ignored); else None."""
    wanted = model.strip().rstrip("/").lower()
    for name, config in KNOWN_TARGET_CONFIGS.items():
        if name.lower() == wanted:
            return target_shape_from_config(config, name)
    return None


def known_target_names() -> str:
    return ", ".join(KNOWN_TARGET_CONFIGS)
