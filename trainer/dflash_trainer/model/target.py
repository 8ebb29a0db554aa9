"""Load the frozen target once per rank, and find its decoder layers, embedding and LM head.

Works for Qwen3 / Llama-style causal LMs and for Gated-DeltaNet hybrids (`qwen3_5`,
`qwen3_next`): transformers picks fla kernels on GPU when installed and its pure-torch
fallback on CPU. A target is a HF model folder (local or `s3://`, fetched once into a
cache folder) or an inline config with random weights (tests, the debug run).
"""

from __future__ import annotations

import logging
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from torch import nn

from dflash_trainer.storage import is_s3_uri

log = logging.getLogger(__name__)


class TargetError(ValueError):
    """The target cannot be loaded or used; the message names the setting and value."""


@dataclass(frozen=True)
class TargetParts:
    """The pieces of a loaded target that training and decoding use."""

    model: nn.Module
    decoder: nn.Module
    layers: nn.ModuleList
    embed: nn.Embedding
    lm_head: nn.Module
    config: Any

    @property
    def num_layers(self) -> int:
        return len(self.layers)

    @property
    def lm_head_weight(self) -> torch.Tensor:
        weight = getattr(self.lm_head, "weight", None)
        if not isinstance(weight, torch.Tensor):
            raise TargetError(f"the target's LM head {type(self.lm_head).__name__} has no weight")
        return weight


def resolve_dtype(name: str, device: torch.device) -> torch.dtype:
    """`auto` is bf16 on GPU and float32 on CPU (bf16 matmuls are slow on most CPUs)."""
    if name == "auto":
        return torch.bfloat16 if device.type == "cuda" else torch.float32
    dtypes = {"bfloat16": torch.bfloat16, "float16": torch.float16, "float32": torch.float32}
    if name not in dtypes:
        raise TargetError(f"target.dtype={name!r} is unknown; accepted: auto, {', '.join(dtypes)}")
    return dtypes[name]


def build_random_target(config: dict[str, Any], seed: int, dtype: torch.dtype) -> nn.Module:
    """A target with random weights from an inline HF config (`model_type` required)."""
    from transformers import AutoConfig, AutoModelForCausalLM

    values = dict(config)
    model_type = values.pop("model_type", None)
    if not model_type:
        raise TargetError("target.config needs a model_type (e.g. qwen3 or qwen3_5_text)")
    try:
        hf_config = AutoConfig.for_model(model_type, **values)
    except (ValueError, TypeError, KeyError) as exc:
        raise TargetError(
            f"target.config is invalid for model_type {model_type!r}: {exc}"
        ) from None
    # Same seed -> same weights on every rank, without disturbing the caller's RNG stream.
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        model: nn.Module = AutoModelForCausalLM.from_config(  # type: ignore[no-untyped-call]
            hf_config, dtype=dtype
        )
    return model


def fetch_model_folder(uri: str, cache_dir: Path) -> Path:
    """A local folder with the model at `uri`: an `s3://` prefix is fetched into the node's
    model cache (`model.local_cache`: once per node, parallel ranged GETs, verified against the
    model stage's manifest); `cache_dir` is the cache root unless $DFLASH_MODEL_CACHE is set."""
    from dflash_trainer.model.local_cache import ModelCacheError, materialize

    try:
        return materialize(uri, include_weights=True, cache_root=cache_dir)
    except ModelCacheError as exc:
        if exc.user_fixable:
            raise TargetError(f"target.path={uri}: {exc}") from None
        raise


def load_pretrained_target(
    path: str,
    dtype: torch.dtype,
    cache_dir: Path,
    device: torch.device,
    revision: str | None = None,
) -> nn.Module:
    from transformers import AutoModelForCausalLM

    folder = fetch_model_folder(path, cache_dir)
    looks_local = path.startswith(("/", ".", "~")) or os.environ.get("HF_HUB_OFFLINE") == "1"
    if not is_s3_uri(path) and looks_local and not folder.exists():
        raise TargetError(
            f"target.path={path} does not exist; accepted: a HF model folder (local or s3://)"
            + ("" if path.startswith(("/", ".", "~")) else " or a Hub id when online")
        )
    try:
        # Straight onto the GPU: 8 ranks of a node staging a 27B target in host RAM would not fit.
        device_map = {"": device} if device.type == "cuda" else None
        loaded: Any = AutoModelForCausalLM.from_pretrained(
            str(folder),
            dtype=dtype,
            device_map=device_map,
            revision=revision,
            output_loading_info=True,
        )
    except (OSError, ValueError) as exc:
        first_line = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise TargetError(f"target.path={path} could not be loaded: {first_line}") from None
    model: nn.Module = loaded[0]
    check_loading_info(path, loaded[1])
    return model


# Weights a checkpoint may hold that the causal LM does not use: the vision tower of the
# multimodal Qwen3.5/3.6 checkpoints and their multi-token-prediction head. Anything else that is
# unexpected, and anything missing, means the checkpoint and the architecture disagree.
UNUSED_WEIGHT_PREFIXES = ("visual.", "model.visual.", "mtp.", "model.mtp.")
SHOWN_KEYS = 5


def check_loading_info(path: str, info: dict[str, Any]) -> None:
    """Refuse a target whose checkpoint does not match its architecture: transformers only
    warns, and a missing layer would be trained against with random weights."""
    missing = sorted(info.get("missing_keys") or ())
    unexpected = sorted(
        key
        for key in info.get("unexpected_keys") or ()
        if not key.startswith(UNUSED_WEIGHT_PREFIXES)
    )
    mismatched = sorted(str(item[0]) for item in info.get("mismatched_keys") or ())
    problems = []
    for what, keys in (
        ("missing", missing),
        ("unexpected", unexpected),
        ("of the wrong shape", mismatched),
    ):
        if keys:
            shown = ", ".join(keys[:SHOWN_KEYS]) + (
                f" and {len(keys) - SHOWN_KEYS} more" if len(keys) > SHOWN_KEYS else ""
            )
            problems.append(f"{len(keys)} weight(s) {what}: {shown}")
    if problems:
        raise TargetError(
            f"target.path={path} does not match its config.json ({'; '.join(problems)}); "
            "accepted: a checkpoint whose weights are exactly those of its architecture "
            "(a vision tower or an MTP head may be extra)"
        )


def find_parts(model: nn.Module) -> TargetParts:
    """Locate the decoder (the module holding `layers` and `embed_tokens`) and the LM head."""
    config = getattr(model, "config", None)
    text_config = getattr(config, "text_config", None) or config
    expected = int(getattr(text_config, "num_hidden_layers", 0))
    for _name, module in model.named_modules():
        layers = getattr(module, "layers", None)
        embed = getattr(module, "embed_tokens", None)
        if isinstance(layers, nn.ModuleList) and isinstance(embed, nn.Embedding):
            if expected and len(layers) != expected:
                continue
            get_head = getattr(model, "get_output_embeddings", None)
            head = get_head() if callable(get_head) else None
            if head is None:
                raise TargetError(f"{type(model).__name__} has no LM head")
            return TargetParts(model, module, layers, embed, head, text_config)
    raise TargetError(
        f"{type(model).__name__} has no decoder with `layers` and `embed_tokens`; "
        "accepted: HF causal LMs such as Qwen3, Qwen3.5, Llama"
    )


def freeze(model: nn.Module) -> nn.Module:
    model.eval()
    for param in model.parameters():
        param.requires_grad_(False)
    return model


def load_target(
    *,
    path: str | None,
    config: dict[str, Any] | None,
    seed: int,
    dtype: str,
    device: torch.device,
    cache_dir: Path,
    revision: str | None = None,
) -> TargetParts:
    """Load (or build) the target, frozen, on `device`. Exactly one of `path`/`config`."""
    torch_dtype = resolve_dtype(dtype, device)
    if (path is None) == (config is None):
        raise TargetError("set exactly one of target.path and target.config")
    if path is not None:
        model = load_pretrained_target(path, torch_dtype, cache_dir, device, revision)
    else:
        assert config is not None
        model = build_random_target(config, seed, torch_dtype)
    model = freeze(model.to(device))
    parts = find_parts(model)
    log.info(
        "target: %s, %d layers, hidden %d, vocab %d, %s on %s",
        type(model).__name__,
        parts.num_layers,
        parts.config.hidden_size,
        parts.config.vocab_size,
        torch_dtype,
        device,
    )
    return parts
