"""The drafter's architecture: a frozen dataclass, derived from the target's HF config.

Pure Python (no torch), so configs, exports and the operator's checks can share it.
The export's `config.json` is built from it in `model/export.py`.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

FULL_ATTENTION = "full_attention"
SLIDING_ATTENTION = "sliding_attention"
LAYER_TYPES = (FULL_ATTENTION, SLIDING_ATTENTION)

# Mask tokens used by the published drafters: the first unused row of each family's
# embedding table (a real id the tokenizer never emits). Keyed by the target's vocab size.
KNOWN_MASK_TOKEN_IDS = {151936: 151669, 248320: 248070}
# Below 5 target layers "1 to L-3" is empty or a single layer: tap the middle one.
MIN_TARGET_LAYERS_FOR_SPREAD = 5


class DrafterConfigError(ValueError):
    """A drafter setting that cannot work with this target; the message names the field."""


@dataclass(frozen=True)
class DFlash2Settings:
    """DFlash2's knobs: the in-block convolutions and the candidate selector.

    Defaults are speculators 0.9.0's (`DFlash2Args`); vLLM reads the first four from
    `dflash_config` without defaults, so an export must always write them.
    """

    conv_kernel_size: int = 2  # causal taps per convolution (the token itself and 1 back)
    conv_group_size: int = 16  # channels sharing one token-dependent kernel delta
    selector_rank: int = 256  # r of the predecessor/successor codebooks [V, r]
    selector_top_k: int = 16  # unary candidates the selector reranks
    selector_loss_weight: float = 1.0  # weight of the K-way selector CE next to the unary loss


@dataclass(frozen=True)
class DrafterConfig:
    """Everything needed to build the drafter and to write its servable `config.json`."""

    hidden_size: int
    intermediate_size: int
    num_hidden_layers: int
    num_attention_heads: int
    num_key_value_heads: int
    head_dim: int
    vocab_size: int
    num_target_layers: int
    target_layer_ids: tuple[int, ...]
    mask_token_id: int
    block_size: int = 16
    rms_norm_eps: float = 1e-6
    rope_theta: float = 1_000_000.0
    max_position_embeddings: int = 40960
    layer_types: tuple[str, ...] = field(default_factory=tuple)
    sliding_window: int | None = None
    # None is plain DFlash; a value makes the drafter DFlash2 (model/dflash2_*.py).
    dflash2: DFlash2Settings | None = None

    def __post_init__(self) -> None:
        if not self.layer_types:
            object.__setattr__(self, "layer_types", (FULL_ATTENTION,) * self.num_hidden_layers)
        check_drafter_config(self)

    @property
    def num_taps(self) -> int:
        return len(self.target_layer_ids)

    def to_dict(self) -> dict[str, Any]:
        out = asdict(self)
        out["target_layer_ids"] = list(self.target_layer_ids)
        out["layer_types"] = list(self.layer_types)
        if self.dflash2 is None:
            # A DFlash config's dict (checkpoints, digests) stays exactly what it was.
            del out["dflash2"]
        return out

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> DrafterConfig:
        values = dict(data)
        values["target_layer_ids"] = tuple(values["target_layer_ids"])
        values["layer_types"] = tuple(values.get("layer_types") or ())
        if values.get("dflash2") is not None:
            values["dflash2"] = DFlash2Settings(**values["dflash2"])
        return cls(**values)


def check_drafter_config(cfg: DrafterConfig) -> None:
    """Raise `DrafterConfigError` naming the first inconsistent field."""
    if cfg.num_hidden_layers < 1:
        raise DrafterConfigError(
            f"drafter.num_layers={cfg.num_hidden_layers} is invalid; accepted: 1 or more"
        )
    if cfg.block_size < 2:
        raise DrafterConfigError(
            f"drafter.block_size={cfg.block_size} is invalid; accepted: 2 or more"
        )
    if cfg.num_attention_heads % cfg.num_key_value_heads:
        raise DrafterConfigError(
            f"drafter.num_key_value_heads={cfg.num_key_value_heads} must divide "
            f"num_attention_heads={cfg.num_attention_heads}"
        )
    if not cfg.target_layer_ids:
        raise DrafterConfigError("drafter.target_layer_ids is empty; accepted: 1 or more layer ids")
    for layer_id in cfg.target_layer_ids:
        if not 0 <= layer_id < cfg.num_target_layers:
            raise DrafterConfigError(
                f"drafter.target_layer_ids contains {layer_id}; accepted: 0..."
                f"{cfg.num_target_layers - 1} (the target has {cfg.num_target_layers} layers)"
            )
    if len(set(cfg.target_layer_ids)) != len(cfg.target_layer_ids):
        raise DrafterConfigError(
            f"drafter.target_layer_ids={list(cfg.target_layer_ids)} repeats a layer"
        )
    if not 0 <= cfg.mask_token_id < cfg.vocab_size:
        raise DrafterConfigError(
            f"drafter.mask_token_id={cfg.mask_token_id} is outside the target vocabulary "
            f"(0..{cfg.vocab_size - 1})"
        )
    if len(cfg.layer_types) != cfg.num_hidden_layers:
        raise DrafterConfigError(
            f"drafter.layer_types has {len(cfg.layer_types)} entries; "
            f"expected one per layer ({cfg.num_hidden_layers})"
        )
    for kind in cfg.layer_types:
        if kind not in LAYER_TYPES:
            raise DrafterConfigError(
                f"drafter.layer_types contains {kind!r}; accepted: {', '.join(LAYER_TYPES)}"
            )
    if SLIDING_ATTENTION in cfg.layer_types and not (cfg.sliding_window or 0) > cfg.block_size:
        raise DrafterConfigError(
            f"drafter.sliding_window={cfg.sliding_window} is invalid for sliding layers; "
            f"accepted: an integer larger than block_size ({cfg.block_size})"
        )
    if cfg.dflash2 is not None:
        check_dflash2_settings(cfg.dflash2, cfg)


def check_dflash2_settings(knobs: DFlash2Settings, cfg: DrafterConfig) -> None:
    """Raise `DrafterConfigError` for DFlash2 knobs this drafter's shape cannot take."""
    if not 1 <= knobs.conv_kernel_size <= cfg.block_size:
        raise DrafterConfigError(
            f"drafter.dflash2.conv_kernel_size={knobs.conv_kernel_size} is invalid; "
            f"accepted: 1..block_size ({cfg.block_size})"
        )
    if knobs.conv_group_size < 1 or cfg.hidden_size % knobs.conv_group_size:
        raise DrafterConfigError(
            f"drafter.dflash2.conv_group_size={knobs.conv_group_size} is invalid; "
            f"accepted: a divisor of hidden_size ({cfg.hidden_size})"
        )
    if knobs.selector_rank < 1:
        raise DrafterConfigError(
            f"drafter.dflash2.selector_rank={knobs.selector_rank} is invalid; accepted: 1 or more"
        )
    if not 1 <= knobs.selector_top_k <= cfg.vocab_size:
        raise DrafterConfigError(
            f"drafter.dflash2.selector_top_k={knobs.selector_top_k} is invalid; "
            f"accepted: 1..vocab_size ({cfg.vocab_size})"
        )
    if not knobs.selector_loss_weight >= 0.0:
        raise DrafterConfigError(
            f"drafter.dflash2.selector_loss_weight={knobs.selector_loss_weight} is invalid; "
            "accepted: 0 or more"
        )


def build_target_layer_ids(num_target_layers: int, num_draft_layers: int) -> tuple[int, ...]:
    """One tap per draft layer, uniform from layer 1 to L-3: `round(1 + i*(L-4)/(n-1))`.

    With one draft layer the middle layer `L//2` (the reference's rule). Layer id i means
    "output of decoder layer i" (HF `hidden_states[i + 1]`). Taps that coincide on a
    shallow target are merged.
    """
    if num_draft_layers == 1 or num_target_layers < MIN_TARGET_LAYERS_FOR_SPREAD:
        return (num_target_layers // 2,)
    span = num_target_layers - 4
    ids = (round(1 + i * span / (num_draft_layers - 1)) for i in range(num_draft_layers))
    return tuple(sorted(set(ids)))


def text_config_of(target_config: Any) -> Any:
    """The language-model part of a target config (`text_config` of VLM wrappers like qwen3_5)."""
    return getattr(target_config, "text_config", None) or target_config


def default_mask_token_id(vocab_size: int) -> int:
    """The published drafters' mask token for known vocabularies, else the last vocab row."""
    return KNOWN_MASK_TOKEN_IDS.get(vocab_size, vocab_size - 1)


def build_drafter_config(
    target_config: Any,
    *,
    num_layers: int,
    block_size: int,
    target_layer_ids: list[int] | None = None,
    mask_token_id: int | None = None,
    intermediate_size: int | None = None,
    num_attention_heads: int | None = None,
    num_key_value_heads: int | None = None,
    head_dim: int | None = None,
    layer_types: list[str] | None = None,
    sliding_window: int | None = None,
    rope_theta: float | None = None,
    dflash2: DFlash2Settings | None = None,
) -> DrafterConfig:
    """Derive the drafter's shape from the target: same hidden size and vocabulary.

    RoPE is always full 1-D rotary with the target's theta: a target's
    `partial_rotary_factor` (Qwen3.5) is deliberately not copied.
    """
    text = text_config_of(target_config)
    num_target_layers = int(text.num_hidden_layers)
    heads = num_attention_heads or int(text.num_attention_heads)
    kv_heads = num_key_value_heads or int(getattr(text, "num_key_value_heads", heads) or heads)
    dim = head_dim or int(getattr(text, "head_dim", None) or text.hidden_size // heads)
    theta = rope_theta or _rope_theta_of(text)
    return DrafterConfig(
        hidden_size=int(text.hidden_size),
        intermediate_size=intermediate_size or int(text.intermediate_size),
        num_hidden_layers=num_layers,
        num_attention_heads=heads,
        num_key_value_heads=kv_heads,
        head_dim=dim,
        vocab_size=int(text.vocab_size),
        num_target_layers=num_target_layers,
        target_layer_ids=tuple(
            target_layer_ids
            if target_layer_ids
            else build_target_layer_ids(num_target_layers, num_layers)
        ),
        mask_token_id=(
            mask_token_id if mask_token_id is not None else default_mask_token_id(text.vocab_size)
        ),
        block_size=block_size,
        rms_norm_eps=float(getattr(text, "rms_norm_eps", 1e-6)),
        rope_theta=theta,
        max_position_embeddings=int(getattr(text, "max_position_embeddings", 40960)),
        layer_types=tuple(layer_types or ()),
        sliding_window=sliding_window,
        dflash2=dflash2,
    )


def _rope_theta_of(text_config: Any) -> float:
    params = getattr(text_config, "rope_parameters", None) or {}
    theta = params.get("rope_theta") if isinstance(params, dict) else None
    return float(theta or getattr(text_config, "rope_theta", None) or 1_000_000.0)
