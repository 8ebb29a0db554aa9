"""The DFlash2 drafter: the DFlash backbone with convolutions around every attention and MLP,
and a candidate selector beside the (target's) LM head.

Not yet built by the trainer, the export or the eval (see docs/trainer.md, "DFlash2"). The
convolution is `model/dflash2_conv.py`, the selector `model/dflash2_selector.py`.
"""

from __future__ import annotations

import torch

from dflash_trainer.model.block_attention import Backend, BlockLayout
from dflash_trainer.model.config import DFlash2Settings, DrafterConfig, DrafterConfigError
from dflash_trainer.model.dflash2_conv import GroupedDynamicConv
from dflash_trainer.model.dflash2_selector import CandidateSelector
from dflash_trainer.model.drafter import DFlashDrafter, DraftLayer


def dflash2_settings_of(cfg: DrafterConfig) -> DFlash2Settings:
    if cfg.dflash2 is None:
        raise DrafterConfigError("drafter.dflash2 is not set; a DFlash2 drafter needs its knobs")
    return cfg.dflash2


class DFlash2Layer(DraftLayer):
    """A DFlash layer whose attention and MLP each sit between two in-block convolutions."""

    def __init__(self, cfg: DrafterConfig, layer_idx: int) -> None:
        super().__init__(cfg, layer_idx)
        knobs = dflash2_settings_of(cfg)
        shape = (cfg.hidden_size, knobs.conv_kernel_size, knobs.conv_group_size, cfg.block_size)
        self.attention_conv = GroupedDynamicConv(*shape)
        self.mlp_conv = GroupedDynamicConv(*shape)

    def forward(
        self,
        x: torch.Tensor,
        context: torch.Tensor,
        rope_q: tuple[torch.Tensor, torch.Tensor],
        rope_kv: tuple[torch.Tensor, torch.Tensor],
        layout: BlockLayout,
        backend: Backend,
        chunk_queries: int,
    ) -> torch.Tensor:
        # Only the block's own tokens are convolved; the injected context keys/values are not.
        h, delta = self.attention_conv.convolve_input(self.input_layernorm(x))
        h = self.self_attn(h, context, rope_q, rope_kv, layout, backend, chunk_queries)
        x = x + self.attention_conv.convolve_output(h, delta)
        h, delta = self.mlp_conv.convolve_input(self.post_attention_layernorm(x))
        out: torch.Tensor = x + self.mlp_conv.convolve_output(self.mlp(h), delta)
        return out


class DFlash2Drafter(DFlashDrafter):
    """`DFlashDrafter.forward` unchanged (the hidden states the LM head reads); the selector
    is applied by the caller to those hidden states and the LM head's top-K."""

    layer_class = DFlash2Layer

    def __init__(self, cfg: DrafterConfig, checkpoint_layers: bool = False) -> None:
        knobs = dflash2_settings_of(cfg)
        super().__init__(cfg, checkpoint_layers)  # builds DFlash2Layer, resets them
        self.candidate_selector = CandidateSelector(
            cfg.vocab_size, cfg.hidden_size, knobs.selector_rank, knobs.selector_top_k
        )

    def reset_parameters(self) -> None:
        """DFlash's initialisation, then the convolutions back to the identity (the base
        class's normal init would otherwise hit their kernel projections)."""
        super().reset_parameters()
        for module in self.modules():
            if isinstance(module, (GroupedDynamicConv, CandidateSelector)):
                module.reset_parameters()
