"""The DFlash drafter: Qwen3-style layers with KV injection of fused target features.

Target features (the tapped layers, concatenated) go through `fc` and `hidden_norm` once;
every draft layer projects them with its own k/v projections and prepends them to the
block's keys/values. The drafter owns no embedding and no LM head: those are the target's
(frozen) and are applied by the caller. Parameter names match the z-lab/vLLM/SGLang format.
"""

from __future__ import annotations

import torch
from torch import nn
from torch.nn import functional
from torch.utils.checkpoint import checkpoint

from dflash_trainer.model.block_attention import (
    DEFAULT_CHUNK_QUERIES,
    Backend,
    BlockLayout,
    block_attention,
)
from dflash_trainer.model.config import SLIDING_ATTENTION, DrafterConfig

# The usual Qwen3 initialisation for a model trained from scratch.
INIT_STD = 0.02


class RMSNorm(nn.Module):
    """Qwen3's RMSNorm: normalise and scale in float32, return the input dtype."""

    def __init__(self, dim: int, eps: float) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.ones(dim))
        self.eps = eps

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        dtype = x.dtype
        x32 = x.float()
        x32 = x32 * torch.rsqrt(x32.pow(2).mean(-1, keepdim=True) + self.eps)
        return (self.weight * x32).to(dtype)


class RotaryEmbedding(nn.Module):
    """Full 1-D RoPE over `head_dim` (never the target's partial rotary factor)."""

    inv_freq: torch.Tensor

    def __init__(self, head_dim: int, theta: float) -> None:
        super().__init__()
        inv_freq = 1.0 / (theta ** (torch.arange(0, head_dim, 2, dtype=torch.float32) / head_dim))
        self.register_buffer("inv_freq", inv_freq, persistent=False)

    def forward(self, positions: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """`positions [b, n]` -> `(cos, sin)`, each `[b, 1, n, head_dim]` in float32."""
        freqs = positions.float()[..., None] * self.inv_freq
        emb = torch.cat([freqs, freqs], dim=-1)[:, None]
        return emb.cos(), emb.sin()


def apply_rotary(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    half = x.shape[-1] // 2
    rotated = torch.cat([-x[..., half:], x[..., :half]], dim=-1)
    return (x * cos + rotated * sin).to(x.dtype)


class DraftAttention(nn.Module):
    """Queries from the block; keys/values from `[context | block]` (KV injection)."""

    def __init__(self, cfg: DrafterConfig, layer_idx: int) -> None:
        super().__init__()
        self.heads, self.kv_heads, self.head_dim = (
            cfg.num_attention_heads,
            cfg.num_key_value_heads,
            cfg.head_dim,
        )
        self.q_proj = nn.Linear(cfg.hidden_size, self.heads * self.head_dim, bias=False)
        self.k_proj = nn.Linear(cfg.hidden_size, self.kv_heads * self.head_dim, bias=False)
        self.v_proj = nn.Linear(cfg.hidden_size, self.kv_heads * self.head_dim, bias=False)
        self.o_proj = nn.Linear(self.heads * self.head_dim, cfg.hidden_size, bias=False)
        self.q_norm = RMSNorm(self.head_dim, cfg.rms_norm_eps)
        self.k_norm = RMSNorm(self.head_dim, cfg.rms_norm_eps)
        sliding = cfg.layer_types[layer_idx] == SLIDING_ATTENTION
        self.window = cfg.sliding_window if sliding else None

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
        bsz, n_q, _ = x.shape
        n_kv = context.shape[1] + n_q
        q = self.q_norm(self.q_proj(x).view(bsz, n_q, self.heads, self.head_dim)).transpose(1, 2)
        k = torch.cat([self.k_proj(context), self.k_proj(x)], dim=1)
        k = self.k_norm(k.view(bsz, n_kv, self.kv_heads, self.head_dim)).transpose(1, 2)
        v = torch.cat([self.v_proj(context), self.v_proj(x)], dim=1)
        v = v.view(bsz, n_kv, self.kv_heads, self.head_dim).transpose(1, 2)
        q = apply_rotary(q, *rope_q)
        k = apply_rotary(k, *rope_kv)
        out = block_attention(
            q, k, v, layout, backend=backend, window=self.window, chunk_queries=chunk_queries
        )
        merged = out.transpose(1, 2).reshape(bsz, n_q, self.heads * self.head_dim)
        projected: torch.Tensor = self.o_proj(merged)
        return projected


class DraftMLP(nn.Module):
    def __init__(self, cfg: DrafterConfig) -> None:
        super().__init__()
        self.gate_proj = nn.Linear(cfg.hidden_size, cfg.intermediate_size, bias=False)
        self.up_proj = nn.Linear(cfg.hidden_size, cfg.intermediate_size, bias=False)
        self.down_proj = nn.Linear(cfg.intermediate_size, cfg.hidden_size, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out: torch.Tensor = self.down_proj(functional.silu(self.gate_proj(x)) * self.up_proj(x))
        return out


class DraftLayer(nn.Module):
    def __init__(self, cfg: DrafterConfig, layer_idx: int) -> None:
        super().__init__()
        self.self_attn = DraftAttention(cfg, layer_idx)
        self.mlp = DraftMLP(cfg)
        self.input_layernorm = RMSNorm(cfg.hidden_size, cfg.rms_norm_eps)
        self.post_attention_layernorm = RMSNorm(cfg.hidden_size, cfg.rms_norm_eps)

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
        x = x + self.self_attn(
            self.input_layernorm(x), context, rope_q, rope_kv, layout, backend, chunk_queries
        )
        mlp_out: torch.Tensor = self.mlp(self.post_attention_layernorm(x))
        return x + mlp_out


class DFlashDrafter(nn.Module):
    """Drafts a whole block in one non-causal forward, conditioned on target features."""

    # The decoder layer; DFlash2 (model/dflash2_drafter.py) substitutes its own.
    layer_class: type[DraftLayer] = DraftLayer

    def __init__(self, cfg: DrafterConfig, checkpoint_layers: bool = False) -> None:
        super().__init__()
        self.config = cfg
        # Activation checkpointing: keep only each layer's input, recompute the layer in
        # backward (a training setting, not part of the exported architecture).
        self.checkpoint_layers = checkpoint_layers
        self.layers = nn.ModuleList(self.layer_class(cfg, i) for i in range(cfg.num_hidden_layers))
        self.fc = nn.Linear(cfg.num_taps * cfg.hidden_size, cfg.hidden_size, bias=False)
        self.hidden_norm = RMSNorm(cfg.hidden_size, cfg.rms_norm_eps)
        self.norm = RMSNorm(cfg.hidden_size, cfg.rms_norm_eps)
        self.rotary = RotaryEmbedding(cfg.head_dim, cfg.rope_theta)
        self.reset_parameters()

    def reset_parameters(self) -> None:
        for module in self.modules():
            if isinstance(module, nn.Linear):
                nn.init.normal_(module.weight, std=INIT_STD)
            elif isinstance(module, RMSNorm):
                nn.init.ones_(module.weight)

    def forward(
        self,
        block_embeds: torch.Tensor,
        target_features: torch.Tensor,
        layout: BlockLayout,
        *,
        backend: Backend = "auto",
        chunk_queries: int = DEFAULT_CHUNK_QUERIES,
    ) -> torch.Tensor:
        """`block_embeds [b, N*B, H]` (target embeddings of `[token, MASK...]` per block) and
        `target_features [b, S, taps*H]` -> final-normed hidden states `[b, N*B, H]`."""
        bsz, context_len = target_features.shape[:2]
        context = self.hidden_norm(self.fc(target_features))
        q_positions = layout.query_positions()
        ctx_positions = torch.arange(context_len, device=q_positions.device).expand(bsz, -1)
        rope_q = self.rotary(q_positions)
        rope_kv = self.rotary(torch.cat([ctx_positions, q_positions], dim=1))
        x = block_embeds
        recompute = self.checkpoint_layers and torch.is_grad_enabled()
        for layer in self.layers:
            args = (x, context, rope_q, rope_kv, layout, backend, chunk_queries)
            x = checkpoint(layer, *args, use_reentrant=False) if recompute else layer(*args)
        normed: torch.Tensor = self.norm(x)
        return normed
