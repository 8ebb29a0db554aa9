"""The speculators format of an exported drafter (vllm-project/speculators 0.9.0), for DFlash
and DFlash2: `config.json` as speculators saves it, the same `model.safetensors` names.

config.json  speculators_model_type "dflash" | "dflash2", architectures (the speculators class),
             transformer_layer_config (the draft backbone), mask_token_id, block_size,
             aux_hidden_state_layer_ids (= our target_layer_ids + 1: vLLM's `update_dflash`
             subtracts 1, vLLM PR #40727), draft_vocab_size, target_hidden_size, DFlash2's four
             knobs at the top level, speculators_config {algorithm, proposal_methods, verifier}.
The z-lab / vLLM-native format is `model/export.py`.
"""

from __future__ import annotations

from typing import Any

from dflash_trainer.model.config import DrafterConfig

SPECULATORS_VERSION = "0.9.0"
# Keys of the z-lab config that speculators carries outside `transformer_layer_config`.
_NOT_BACKBONE = ("architectures", "dflash_config", "block_size", "num_target_layers", "is_causal")


def speculators_model_type(cfg: DrafterConfig) -> str:
    return "dflash" if cfg.dflash2 is None else "dflash2"


def build_speculators_config(
    cfg: DrafterConfig, backbone: dict[str, Any], verifier: str
) -> dict[str, Any]:
    """`backbone` is the z-lab `config.json` (`build_export_config`); `verifier` the target."""
    kind = speculators_model_type(cfg)
    config: dict[str, Any] = {
        "architectures": ["DFlashDraftModel" if cfg.dflash2 is None else "DFlash2DraftModel"],
        "speculators_model_type": kind,
        "speculators_version": SPECULATORS_VERSION,
        "transformer_layer_config": {
            key: value for key, value in backbone.items() if key not in _NOT_BACKBONE
        },
        "mask_token_id": cfg.mask_token_id,
        "block_size": cfg.block_size,
        "aux_hidden_state_layer_ids": [i + 1 for i in cfg.target_layer_ids],
        "draft_vocab_size": cfg.vocab_size,
        "target_hidden_size": cfg.hidden_size,
        "speculators_config": {
            "algorithm": kind,
            "default_proposal_method": "greedy",
            "proposal_methods": [
                {"proposal_type": "greedy", "speculative_tokens": cfg.block_size - 1}
            ],
            "verifier": {"name_or_path": verifier, "architectures": []},
        },
    }
    for key in ("layer_types", "sliding_window", "use_sliding_window"):
        if key in backbone:
            config[key] = backbone[key]
    if cfg.dflash2 is not None:
        knobs = cfg.dflash2
        config |= {
            "conv_kernel_size": knobs.conv_kernel_size,
            "conv_group_size": knobs.conv_group_size,
            "selector_rank": knobs.selector_rank,
            "selector_top_k": knobs.selector_top_k,
            "selector_loss_alpha": knobs.selector_loss_weight,
        }
    return config
