"""Target and drafter shapes, and their parameter counts, from a HF `config.json` or a small
table of known targets. The drafter follows the trainer's defaults
(`dflash_trainer/model/config.py::build_drafter_config`): the target's hidden size, MLP width,
heads and vocabulary, one tap per draft layer.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

FULL_ATTENTION = "full_attention"
LINEAR_ATTENTION = "linear_attention"
# Below 5 target layers the taps collapse to the middle layer (the trainer's rule).
MIN_TARGET_LAYERS_FOR_SPREAD = 5
SUPPORTED_MODEL_TYPES = ("qwen3", "qwen3_5", "qwen3_5_text")
QWEN3_5_FULL_ATTENTION_INTERVAL = 4


class ShapeError(ValueError):
    """A target config the plan cannot read; the message names the key."""


@dataclass(frozen=True)
class DFlash2Shape:
    """DFlash2's additions (`drafter.dflash2` of train.yaml): four in-block convolutions per
    layer and the candidate selector's two `[V, r]` codebooks with its `[r, H]` projection."""

    conv_kernel_size: int = 2
    conv_group_size: int = 16
    selector_rank: int = 256
    selector_top_k: int = 16

    def layer_params(self, hidden_size: int) -> int:
        """`attention_conv` and `mlp_conv`: `base_kernel [2, taps, H]` and
        `kernel_projection [2 * taps * H / group, H]` each."""
        taps, groups = self.conv_kernel_size, hidden_size // self.conv_group_size
        return 2 * (2 * taps * hidden_size + 2 * taps * groups * hidden_size)

    def selector_params(self, hidden_size: int, vocab_size: int) -> int:
        return 2 * vocab_size * self.selector_rank + self.selector_rank * hidden_size


@dataclass(frozen=True)
class TargetShape:
    """The dimensions of a frozen target that decide its memory and the drafter's."""

    name: str
    model_type: str
    hidden_size: int
    intermediate_size: int
    num_layers: int
    num_attention_heads: int
    num_key_value_heads: int
    head_dim: int
    vocab_size: int
    tie_word_embeddings: bool
    # One entry per layer: full_attention, or linear_attention (Qwen3.5 Gated DeltaNet).
    layer_types: tuple[str, ...]
    linear_num_key_heads: int = 0
    linear_num_value_heads: int = 0
    linear_key_head_dim: int = 0
    linear_value_head_dim: int = 0
    linear_conv_kernel_dim: int = 0

    @property
    def attention_gate(self) -> bool:
        """Qwen3.5's full-attention q_proj also emits an output gate (twice the width)."""
        return self.model_type.startswith("qwen3_5")

    def count_params(self) -> int:
        """Every weight of the text model (embedding, layers, final norm, LM head)."""
        h = self.hidden_size
        embed = self.vocab_size * h
        head = 0 if self.tie_word_embeddings else self.vocab_size * h
        mlp = 3 * h * self.intermediate_size
        norms = 2 * h
        total = embed + head + h
        for kind in self.layer_types:
            mixer = self._linear_attention_params() if kind == LINEAR_ATTENTION else None
            total += mlp + norms + (mixer if mixer is not None else self._attention_params())
        return total

    def _attention_params(self) -> int:
        h, d = self.hidden_size, self.head_dim
        q_width = self.num_attention_heads * d * (2 if self.attention_gate else 1)
        kv_width = self.num_key_value_heads * d
        return h * q_width + 2 * h * kv_width + self.num_attention_heads * d * h + 2 * d

    def _linear_attention_params(self) -> int:
        """transformers' Qwen3.5 GatedDeltaNet: in_proj_qkv/z/b/a, depthwise conv, out_proj."""
        h = self.hidden_size
        keys = self.linear_num_key_heads * self.linear_key_head_dim
        values = self.linear_num_value_heads * self.linear_value_head_dim
        conv_channels = 2 * keys + values
        heads = self.linear_num_value_heads
        projections = h * conv_channels + h * values + 2 * h * heads + values * h
        return (
            projections
            + conv_channels * self.linear_conv_kernel_dim
            + 2 * heads
            + self.linear_value_head_dim
        )


@dataclass(frozen=True)
class DrafterShape:
    """The drafter the trainer builds for a target (same hidden size and vocabulary)."""

    hidden_size: int
    intermediate_size: int
    num_layers: int
    num_attention_heads: int
    num_key_value_heads: int
    head_dim: int
    num_taps: int
    block_size: int
    vocab_size: int
    dflash2: DFlash2Shape | None = None  # None: plain DFlash

    def layer_params(self) -> int:
        h, d = self.hidden_size, self.head_dim
        q_width = self.num_attention_heads * d
        kv_width = self.num_key_value_heads * d
        attention = 2 * h * q_width + 2 * h * kv_width + 2 * d
        convolutions = 0 if self.dflash2 is None else self.dflash2.layer_params(h)
        return attention + 3 * h * self.intermediate_size + 2 * h + convolutions

    def root_params(self) -> int:
        """Parameters outside the layers: `fc` (taps x H -> H), `hidden_norm`, `norm`, and
        DFlash2's selector (two `[V, r]` codebooks, ~127M parameters at V = 248K, r = 256)."""
        selector = (
            0
            if self.dflash2 is None
            else self.dflash2.selector_params(self.hidden_size, self.vocab_size)
        )
        return self.num_taps * self.hidden_size**2 + 2 * self.hidden_size + selector

    def count_params(self) -> int:
        return self.num_layers * self.layer_params() + self.root_params()


def count_default_taps(num_target_layers: int, num_draft_layers: int) -> int:
    """How many distinct layers the trainer taps by default (`build_target_layer_ids`)."""
    if num_draft_layers == 1 or num_target_layers < MIN_TARGET_LAYERS_FOR_SPREAD:
        return 1
    span = num_target_layers - 4
    return len({round(1 + i * span / (num_draft_layers - 1)) for i in range(num_draft_layers)})


def build_drafter_shape(
    target: TargetShape,
    *,
    num_layers: int,
    block_size: int,
    target_layer_ids: list[int] | None = None,
    intermediate_size: int | None = None,
    num_attention_heads: int | None = None,
    num_key_value_heads: int | None = None,
    head_dim: int | None = None,
    dflash2: DFlash2Shape | None = None,
) -> DrafterShape:
    """The trainer's defaults for each unset field (the target's value)."""
    taps = (
        len(set(target_layer_ids))
        if target_layer_ids
        else count_default_taps(target.num_layers, num_layers)
    )
    return DrafterShape(
        hidden_size=target.hidden_size,
        intermediate_size=intermediate_size or target.intermediate_size,
        num_layers=num_layers,
        num_attention_heads=num_attention_heads or target.num_attention_heads,
        num_key_value_heads=num_key_value_heads or target.num_key_value_heads,
        head_dim=head_dim or target.head_dim,
        num_taps=taps,
        block_size=block_size,
        vocab_size=target.vocab_size,
        dflash2=dflash2,
    )


def _default_layer_types(model_type: str, layers: int, text: Mapping[str, Any]) -> list[str]:
    """transformers' default: Qwen3 is all full attention; Qwen3.5 puts a full-attention
    layer every `full_attention_interval` (4) layers and Gated DeltaNet in between."""
    if not model_type.startswith("qwen3_5"):
        return [FULL_ATTENTION] * layers
    interval = int(text.get("full_attention_interval") or QWEN3_5_FULL_ATTENTION_INTERVAL)
    return [FULL_ATTENTION if (i + 1) % interval == 0 else LINEAR_ATTENTION for i in range(layers)]


def _int(config: Mapping[str, Any], key: str, source: str) -> int:
    value = config.get(key)
    if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
        raise ShapeError(f"{source}: {key}={value!r} is missing or not a positive integer")
    return value


def target_shape_from_config(config: Mapping[str, Any], name: str = "config.json") -> TargetShape:
    """A Qwen3 (`qwen3`) or Qwen3.5/3.6 (`qwen3_5`, text part in `text_config`) config."""
    model_type = str(config.get("model_type", ""))
    if model_type not in SUPPORTED_MODEL_TYPES:
        raise ShapeError(
            f"{name}: model_type={model_type!r} is not supported by the memory plan; "
            f"accepted: {', '.join(SUPPORTED_MODEL_TYPES)}"
        )
    nested = config.get("text_config")
    text: Mapping[str, Any] = nested if isinstance(nested, Mapping) else config
    layers = _int(text, "num_hidden_layers", name)
    heads = _int(text, "num_attention_heads", name)
    hidden = _int(text, "hidden_size", name)
    kinds = text.get("layer_types") or _default_layer_types(model_type, layers, text)
    if len(kinds) != layers:
        raise ShapeError(f"{name}: layer_types has {len(kinds)} entries for {layers} layers")
    tie = text.get("tie_word_embeddings", config.get("tie_word_embeddings", False))
    linear = LINEAR_ATTENTION in kinds
    return TargetShape(
        name=name,
        model_type=model_type,
        hidden_size=hidden,
        intermediate_size=_int(text, "intermediate_size", name),
        num_layers=layers,
        num_attention_heads=heads,
        num_key_value_heads=int(text.get("num_key_value_heads") or heads),
        head_dim=int(text.get("head_dim") or hidden // heads),
        vocab_size=_int(text, "vocab_size", name),
        tie_word_embeddings=bool(tie),
        layer_types=tuple(str(kind) for kind in kinds),
        linear_num_key_heads=_int(text, "linear_num_key_heads", name) if linear else 0,
        linear_num_value_heads=_int(text, "linear_num_value_heads", name) if linear else 0,
        linear_key_head_dim=_int(text, "linear_key_head_dim", name) if linear else 0,
        linear_value_head_dim=_int(text, "linear_value_head_dim", name) if linear else 0,
        linear_conv_kernel_dim=int(text.get("linear_conv_kernel_dim") or 4) if linear else 0,
    )
