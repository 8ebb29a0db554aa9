"""`spec.target` (the frozen model to accelerate) and `spec.drafter` (the drafter's shape).

Both define the pipeline, so the CRD makes them immutable once the run exists (see spec.py).
"""

from __future__ import annotations

import itertools
from enum import StrEnum
from typing import Annotated

from pydantic import Field

from dflash_operator.api.base import ApiModel, ModelUri, Revision, Rule

# The paper's block size for Qwen3 targets (10 for Llama-3.1): 1 bonus token + 15 drafted.
DEFAULT_BLOCK_SIZE = 16
# A block needs the bonus token plus at least one drafted token.
MIN_BLOCK_SIZE = 2
MAX_BLOCK_SIZE = 64
# 5 draft layers, as the published DFlash drafters (8 for Qwen3-Coder).
DEFAULT_DRAFT_LAYERS = 5
MAX_DRAFT_LAYERS = 32
# Deepest targets we know have < 128 layers; 1024 leaves room without allowing nonsense.
MAX_LAYER_ID = 1023
MAX_TAPS = 64
MAX_CHAT_TEMPLATE_LENGTH = 65_536
DEFAULT_SLIDING_WINDOW = 2048


class Dtype(StrEnum):
    """Precision the target is loaded in (and the drafter trained in)."""

    BFLOAT16 = "bfloat16"
    FLOAT16 = "float16"
    FLOAT32 = "float32"


class TargetSpec(ApiModel):
    """The target model: the large model whose generations the drafter learns to predict."""

    model: ModelUri = Field(
        description=(
            "The target model: a Hugging Face id (e.g. Qwen/Qwen3.6-27B), an S3 folder "
            "(s3://bucket/path) or a folder on a PersistentVolumeClaim (pvc://claim/path) "
            "holding config.json, the tokenizer and safetensors weights."
        )
    )
    revision: Revision | None = Field(
        default=None,
        description=(
            "Hugging Face revision (branch, tag or commit) of `model`. Pin a commit for "
            "reproducible runs. Unset: the repository's default branch."
        ),
    )
    dtype: Dtype = Field(
        default=Dtype.BFLOAT16,
        description="Precision of the target's weights: bfloat16 on GPUs, float32 on CPU.",
    )
    thinking: bool = Field(
        default=True,
        description=(
            "Render prompts with `enable_thinking` on, for regeneration and tokenization. "
            "Train with the mode you serve: a drafter trained on thinking traces collapses "
            "when served without thinking, and the reverse."
        ),
    )
    chat_template: str | None = Field(
        default=None,
        min_length=1,
        max_length=MAX_CHAT_TEMPLATE_LENGTH,
        description=(
            "A Jinja chat template that replaces the tokenizer's own, for regeneration and "
            "tokenization. Unset: the tokenizer's template."
        ),
    )


class SlidingWindowSpec(ApiModel):
    """Sliding-window attention for the first draft layers (long-context drafters)."""

    size: int = Field(
        default=DEFAULT_SLIDING_WINDOW,
        ge=MIN_BLOCK_SIZE + 1,
        le=1_048_576,
        description="Window, in tokens, of the sliding-window layers. Must exceed blockSize.",
    )
    layers: int = Field(
        ge=1,
        le=MAX_DRAFT_LAYERS,
        description=(
            "How many draft layers use sliding-window attention; they come first, the rest "
            "use full attention (the published Qwen3.6-27B drafter: 4 of 5)."
        ),
    )


class DrafterArchitecture(StrEnum):
    DFLASH = "dflash"
    DFLASH2 = "dflash2"


class DFlash2Spec(ApiModel):
    """DFlash2's knobs (speculators 0.9.0's defaults; vLLM reads the first four from the
    exported config without defaults, so the export always writes them)."""

    conv_kernel_size: int = Field(
        default=2,
        ge=1,
        le=MAX_BLOCK_SIZE,
        description="Causal taps of each in-block convolution (the token and t-1 back); at most "
        "blockSize.",
    )
    conv_group_size: int = Field(
        default=16,
        ge=1,
        le=4096,
        description="Channels sharing one token-dependent kernel delta; must divide the "
        "target's hidden size (the trainer checks it against the target).",
    )
    selector_rank: int = Field(
        default=256,
        ge=1,
        le=4096,
        description="Rank r of the candidate selector's two [vocabulary, r] codebooks.",
    )
    selector_top_k: int = Field(
        default=16,
        ge=2,
        le=1024,
        description="Unary candidates (top-K of the shared LM head) the selector reranks.",
    )
    selector_loss_weight: float = Field(
        default=1.0,
        ge=0.0,
        le=100.0,
        description="Weight of the selector's K-way cross-entropy next to the unary loss.",
    )


def _distinct_ascending(ids: list[int]) -> bool:
    return all(a < b for a, b in itertools.pairwise(ids))


TargetLayerIds = Annotated[
    list[Annotated[int, Field(ge=0, le=MAX_LAYER_ID)]],
    Field(min_length=1, max_length=MAX_TAPS),
    Rule(
        rule="self.isSorted() && self.all(x, self.indexOf(x) == self.lastIndexOf(x))",
        message="must be distinct layer ids in ascending order, e.g. [1, 16, 31, 46, 61]",
        check=_distinct_ascending,
        describe=lambda ids: (
            f"{ids} is not accepted: layer ids must be distinct and in ascending order, "
            "e.g. [1, 16, 31, 46, 61]"
        ),
    ),
]


class DrafterSpec(ApiModel):
    """The drafter's shape. Hidden size, heads and vocabulary follow the target."""

    rules = (
        Rule(
            rule="!has(self.dflash2) || (has(self.architecture) && self.architecture == 'dflash2')",
            message="dflash2 settings need architecture: dflash2",
            check=lambda d: d.dflash2 is None or d.architecture is DrafterArchitecture.DFLASH2,
            field_path=".dflash2",
            describe=lambda d: (
                f"dflash2 is set but architecture={d.architecture.value}: accepted with "
                "architecture: dflash2 only"
            ),
        ),
        Rule(
            rule="!has(self.dflash2) || self.dflash2.convKernelSize <= self.blockSize",
            message="dflash2.convKernelSize may not exceed blockSize",
            check=lambda d: d.dflash2 is None or d.dflash2.conv_kernel_size <= d.block_size,
            field_path=".dflash2.convKernelSize",
            describe=lambda d: (
                f"dflash2.convKernelSize={d.dflash2.conv_kernel_size} is not accepted: at most "
                f"blockSize ({d.block_size})"
            ),
        ),
        Rule(
            rule="!has(self.slidingWindow) || self.slidingWindow.layers <= self.numLayers",
            message="slidingWindow.layers may not exceed numLayers",
            check=lambda d: d.sliding_window is None or d.sliding_window.layers <= d.num_layers,
            field_path=".slidingWindow.layers",
            describe=lambda d: (
                f"slidingWindow.layers={d.sliding_window.layers} is not accepted: at most "
                f"numLayers ({d.num_layers})"
            ),
        ),
        Rule(
            rule="!has(self.slidingWindow) || self.slidingWindow.size > self.blockSize",
            message="slidingWindow.size must be larger than blockSize",
            check=lambda d: d.sliding_window is None or d.sliding_window.size > d.block_size,
            field_path=".slidingWindow.size",
            describe=lambda d: (
                f"slidingWindow.size={d.sliding_window.size} is not accepted: it must be "
                f"larger than blockSize ({d.block_size})"
            ),
        ),
    )

    block_size: int = Field(
        default=DEFAULT_BLOCK_SIZE,
        ge=MIN_BLOCK_SIZE,
        le=MAX_BLOCK_SIZE,
        description=(
            "Tokens per draft block: the last verified token plus blockSize-1 drafted "
            "tokens, all drafted in one forward pass. 16 for Qwen3 targets (serve with "
            "num_speculative_tokens = blockSize-1)."
        ),
    )
    num_layers: int = Field(
        default=DEFAULT_DRAFT_LAYERS,
        ge=1,
        le=MAX_DRAFT_LAYERS,
        description="Decoder layers of the drafter (5 for the published drafters).",
    )
    target_layer_ids: TargetLayerIds | None = Field(
        default=None,
        description=(
            "Target layers whose outputs feed the drafter, distinct and ascending. Layer id i "
            "is the output of decoder layer i (Hugging Face hidden_states[i+1]). Unset: one "
            "per draft layer, spread uniformly from layer 1 to L-3 (Qwen3-8B: [1, 9, 17, 25, "
            "33]; Qwen3.6-27B: [1, 16, 31, 46, 61])."
        ),
    )
    mask_token_id: int | None = Field(
        default=None,
        ge=0,
        description=(
            "Token id used for the drafted positions of a block: a real id of the target "
            "vocabulary that text never produces (Qwen3: 151669; Qwen3.5/3.6: 248070). Unset: "
            "those ids for the known vocabularies, else the last vocabulary id."
        ),
    )
    sliding_window: SlidingWindowSpec | None = Field(
        default=None,
        description="Sliding-window attention for the first layers. Unset: full attention.",
    )
    architecture: DrafterArchitecture = Field(
        default=DrafterArchitecture.DFLASH,
        description=(
            "dflash: the DFlash drafter. dflash2: DFlash's backbone with in-block convolutions "
            "and a candidate selector (what vLLM >= 0.28 serves as DFlash2DraftModel); its "
            "knobs are in dflash2. DFlash2 is usually trained with blockSize 8."
        ),
    )
    dflash2: DFlash2Spec | None = Field(
        default=None,
        description="DFlash2's knobs (architecture: dflash2 only). Unset: the defaults.",
    )
