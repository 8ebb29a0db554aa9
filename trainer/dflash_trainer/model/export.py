"""The servable drafter folder (z-lab / vLLM / SGLang format), written to and read from `final/`.

config.json        architectures ["DFlashDraftModel"] (DFlash2: ["DFlash2DraftModel"]), model_type
                   qwen3, block_size, dflash_config {mask_token_id, target_layer_ids; DFlash2 also
                   conv_kernel_size, conv_group_size, selector_rank, selector_top_k}, shapes, rope,
                   layer_types (never no_rope_layers: vLLM routes such a DFlash2 elsewhere)
model.safetensors  layers.{i}.self_attn.{q,k,v,o}_proj.weight, layers.{i}.self_attn.{q,k}_norm.weight,
                   layers.{i}.mlp.{gate,up,down}_proj.weight,
                   layers.{i}.{input,post_attention}_layernorm.weight, fc.weight, hidden_norm.weight,
                   norm.weight  (no embed_tokens, no lm_head: the target's are used); DFlash2 adds
                   layers.{i}.{attention_conv,mlp_conv}.{base_kernel,kernel_projection.weight}
                   and candidate_selector.{predecessor_codebook,successor_codebook,
                   hidden_projection.weight}
README.md          model card: target, data, steps, acceptance length
dflash_meta.json   what the model card is rendered from (the evaluation adds acceptance)
speculators/       the same drafter in the speculators format (`model/export_speculators.py`)
"""

from __future__ import annotations

import json
import tempfile
from pathlib import Path
from typing import Any

import torch
from safetensors.torch import load_file, save_file

from dflash_trainer.model.config import SLIDING_ATTENTION, DFlash2Settings, DrafterConfig
from dflash_trainer.model.dflash2_drafter import DFlash2Drafter
from dflash_trainer.model.drafter import DFlashDrafter
from dflash_trainer.model.export_speculators import build_speculators_config
from dflash_trainer.storage import StorageError, join_uri, read_json, store_for, write_json

ARCHITECTURE = "DFlashDraftModel"
DFLASH2_ARCHITECTURE = "DFlash2DraftModel"
# vLLM reads these from dflash_config as `int(draft_config[key])`, with no default.
DFLASH2_CONFIG_KEYS = ("conv_kernel_size", "conv_group_size", "selector_rank", "selector_top_k")
SPECULATORS_FOLDER = "speculators"
CONFIG_FILE = "config.json"
WEIGHTS_FILE = "model.safetensors"
CARD_FILE = "README.md"
META_FILE = "dflash_meta.json"
EXPORT_DTYPES = {"bfloat16": torch.bfloat16, "float16": torch.float16, "float32": torch.float32}


def architecture_of(cfg: DrafterConfig) -> str:
    return ARCHITECTURE if cfg.dflash2 is None else DFLASH2_ARCHITECTURE


def build_dflash_config(cfg: DrafterConfig) -> dict[str, Any]:
    """`dflash_config`: the DFlash keys, and for DFlash2 the four keys vLLM requires."""
    out: dict[str, Any] = {
        "mask_token_id": cfg.mask_token_id,
        "target_layer_ids": list(cfg.target_layer_ids),
    }
    if cfg.dflash2 is not None:
        out |= {key: getattr(cfg.dflash2, key) for key in DFLASH2_CONFIG_KEYS}
    return out


def build_export_config(cfg: DrafterConfig, dtype: str = "bfloat16") -> dict[str, Any]:
    """The `config.json` a DFlash or DFlash2 server loads (the z-lab field names)."""
    sliding = SLIDING_ATTENTION in cfg.layer_types
    config: dict[str, Any] = {
        "architectures": [architecture_of(cfg)],
        "model_type": "qwen3",
        "attention_bias": False,
        "attention_dropout": 0.0,
        "block_size": cfg.block_size,
        "dflash_config": build_dflash_config(cfg),
        "dtype": dtype,
        "head_dim": cfg.head_dim,
        "hidden_act": "silu",
        "hidden_size": cfg.hidden_size,
        "initializer_range": 0.02,
        "intermediate_size": cfg.intermediate_size,
        "layer_types": list(cfg.layer_types),
        "max_position_embeddings": cfg.max_position_embeddings,
        "num_attention_heads": cfg.num_attention_heads,
        "num_hidden_layers": cfg.num_hidden_layers,
        "num_key_value_heads": cfg.num_key_value_heads,
        "num_target_layers": cfg.num_target_layers,
        "rms_norm_eps": cfg.rms_norm_eps,
        "rope_scaling": None,
        "rope_theta": cfg.rope_theta,
        "sliding_window": cfg.sliding_window if sliding else None,
        "tie_word_embeddings": False,
        "use_cache": True,
        "use_sliding_window": sliding,
        "vocab_size": cfg.vocab_size,
    }
    if sliding:
        # Servers default sliding layers to causal attention; ours are bidirectional in the
        # block, so say so explicitly (vLLM reads dflash_config.causal, z-lab is_causal).
        config["dflash_config"]["causal"] = False
        config["is_causal"] = False
    return config


def drafter_config_from_export(config: dict[str, Any]) -> DrafterConfig:
    """Inverse of `build_export_config`; a clear error for a folder that is not a DFlash or
    DFlash2 drafter."""
    architectures = config.get("architectures")
    if architectures not in ([ARCHITECTURE], [DFLASH2_ARCHITECTURE]):
        raise ValueError(
            f"config.json architectures={architectures}; expected [{ARCHITECTURE!r}] or "
            f"[{DFLASH2_ARCHITECTURE!r}]"
        )
    dflash = config.get("dflash_config") or {}
    knobs = None
    if architectures == [DFLASH2_ARCHITECTURE]:
        missing = [key for key in DFLASH2_CONFIG_KEYS if key not in dflash]
        if missing:
            raise ValueError(
                f"config.json dflash_config lacks {', '.join(missing)}; a DFlash2DraftModel "
                f"needs all of {', '.join(DFLASH2_CONFIG_KEYS)}"
            )
        knobs = DFlash2Settings(**{key: int(dflash[key]) for key in DFLASH2_CONFIG_KEYS})
    return DrafterConfig(
        hidden_size=config["hidden_size"],
        intermediate_size=config["intermediate_size"],
        num_hidden_layers=config["num_hidden_layers"],
        num_attention_heads=config["num_attention_heads"],
        num_key_value_heads=config["num_key_value_heads"],
        head_dim=config["head_dim"],
        vocab_size=config["vocab_size"],
        num_target_layers=config["num_target_layers"],
        target_layer_ids=tuple(dflash["target_layer_ids"]),
        mask_token_id=dflash["mask_token_id"],
        block_size=config.get("block_size") or dflash.get("block_size", 16),
        rms_norm_eps=config["rms_norm_eps"],
        rope_theta=config.get("rope_theta") or config["rope_parameters"]["rope_theta"],
        max_position_embeddings=config["max_position_embeddings"],
        layer_types=tuple(config.get("layer_types") or ()),
        sliding_window=config.get("sliding_window"),
        dflash2=knobs,
    )


def build_model_card(meta: dict[str, Any]) -> str:
    """A short README for the exported drafter, rendered from `dflash_meta.json`."""
    acceptance = meta.get("acceptanceLength")
    acc_line = (
        f"{acceptance:.3f} (pooled mean over {meta.get('evalPrompts', '?')} held-out prompts, "
        f"greedy, block size {meta['blockSize']})"
        if isinstance(acceptance, int | float)
        else "not measured yet (the evaluation stage fills this in)"
    )
    name = "DFlash2" if meta.get("architecture") == DFLASH2_ARCHITECTURE else "DFlash"
    return "\n".join(
        [
            f"# {name} drafter for {meta['target']}",
            "",
            f"A block-diffusion speculative-decoding drafter ({name}), trained by DFlash Operator.",
            "",
            "| | |",
            "|---|---|",
            f"| Target | `{meta['target']}` |",
            f"| Target layers tapped | {meta['targetLayerIds']} |",
            f"| Draft layers / block size | {meta['numLayers']} / {meta['blockSize']} |",
            f"| Training data | `{meta['data']}` |",
            f"| Training steps | {meta['steps']} (final loss {meta.get('loss', float('nan')):.4f}) |",
            f"| Mean acceptance length | {acc_line} |",
            "",
            *serving_lines(meta),
        ]
    )


def mixes_sliding_and_full(layer_types: list[str]) -> bool:
    sliding = sum(t == SLIDING_ATTENTION for t in layer_types)
    return 0 < sliding < len(layer_types)


def vllm_serve_command(meta: dict[str, Any]) -> str:
    """The exact vLLM command for this drafter. A drafter that mixes sliding and full layers
    needs vLLM's V2 model runner, which vLLM 0.33.0 uses by default (config/vllm.py
    `use_v2_model_runner`; checked against the wheel in tests/integration/images/
    test_vllm_dflash_serving.py), so the command is the same for every drafter."""
    return (
        f"vllm serve {meta['target']} --speculative-config "
        f'\'{{"method":"dflash","model":"<this folder>",'
        f'"num_speculative_tokens":{meta["blockSize"] - 1}}}\' --attention-backend flash_attn'
    )


def serving_lines(meta: dict[str, Any]) -> list[str]:
    lines = ["Serve with vLLM (0.33.0 or newer):", "```", vllm_serve_command(meta), "```"]
    if meta.get("architecture") == DFLASH2_ARCHITECTURE:
        lines.append(
            "vLLM serves DFlash2 with the `dflash` method: `architectures: "
            '["DFlash2DraftModel"]` selects it. Keep `num_speculative_tokens` at block size - 1: '
            "vLLM sizes the in-block convolution from it."
        )
    lines.append(
        f"The `{SPECULATORS_FOLDER}/` folder holds the same weights in the speculators format."
    )
    if mixes_sliding_and_full(meta.get("layerTypes") or []):
        lines.append(
            "This drafter mixes sliding-window and full-attention layers: vLLM serves it on its "
            "V2 model runner, its default since 0.33.0. Where vLLM falls back to the V1 runner "
            "(`VLLM_USE_V2_MODEL_RUNNER=0`, no Triton, or a feature V2 lacks, which vLLM logs) "
            "it refuses the drafter."
        )
    return [*lines, ""]


def export_drafter(
    drafter: DFlashDrafter, uri: str, meta: dict[str, Any], dtype: str = "bfloat16"
) -> list[str]:
    """Write the servable folder to `uri` (local path or `s3://`); returns the written URIs."""
    if dtype not in EXPORT_DTYPES:
        raise ValueError(f"export.dtype={dtype!r} is unknown; accepted: {', '.join(EXPORT_DTYPES)}")
    tensors = {
        name: tensor.detach().to("cpu", EXPORT_DTYPES[dtype]).contiguous()
        for name, tensor in drafter.state_dict().items()
    }
    store = store_for(uri)
    with tempfile.TemporaryDirectory(prefix="dflash-export-") as tmp:
        weights = Path(tmp) / WEIGHTS_FILE
        save_file(tensors, str(weights), metadata={"format": "pt"})
        store.upload_file(weights, join_uri(uri, WEIGHTS_FILE))
        speculators = join_uri(uri, SPECULATORS_FOLDER)
        store.upload_file(weights, join_uri(speculators, WEIGHTS_FILE))
    config = build_export_config(drafter.config, dtype)
    write_json(join_uri(uri, CONFIG_FILE), config)
    write_json(
        join_uri(speculators, CONFIG_FILE),
        build_speculators_config(drafter.config, config, str(meta["target"])),
    )
    write_json(join_uri(uri, META_FILE), meta)
    store.write_bytes(join_uri(uri, CARD_FILE), build_model_card(meta).encode())
    names = (WEIGHTS_FILE, CONFIG_FILE, META_FILE, CARD_FILE)
    copies = [join_uri(speculators, name) for name in (WEIGHTS_FILE, CONFIG_FILE)]
    return [join_uri(uri, name) for name in names] + copies


def update_model_card(uri: str, **updates: Any) -> None:
    """Merge `updates` into `dflash_meta.json` and re-render the README (used by evaluation)."""
    meta = read_json(join_uri(uri, META_FILE))
    meta.update(updates)
    write_json(join_uri(uri, META_FILE), meta)
    store_for(uri).write_bytes(join_uri(uri, CARD_FILE), build_model_card(meta).encode())


def load_exported_drafter(uri: str, device: torch.device | str = "cpu") -> DFlashDrafter:
    """Build a `DFlashDrafter` (a `DFlash2Drafter` for a DFlash2 folder) from an exported folder
    (float32 weights on `device`)."""
    try:
        config = json.loads(store_for(uri).read_bytes(join_uri(uri, CONFIG_FILE)))
    except (StorageError, json.JSONDecodeError) as exc:
        raise ValueError(f"{join_uri(uri, CONFIG_FILE)} cannot be read: {exc}") from None
    drafter_cfg = drafter_config_from_export(config)
    drafter = (DFlashDrafter if drafter_cfg.dflash2 is None else DFlash2Drafter)(drafter_cfg)
    with tempfile.TemporaryDirectory(prefix="dflash-load-") as tmp:
        local = Path(tmp) / WEIGHTS_FILE
        store_for(uri).download_file(join_uri(uri, WEIGHTS_FILE), local)
        state = load_file(str(local))
    drafter.load_state_dict({k: v.float() for k, v in state.items()}, strict=True)
    return drafter.to(device)
