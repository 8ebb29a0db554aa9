"""An independent DFlash2 drafter, written for the parity test from vLLM 0.34.0's code, not ours.

It follows `vllm/model_executor/models/qwen3_dflash2.py` (`_grouped_conv`'s pure-torch branch,
`DFlashGroupedConv.prepare`/`finish`, `DFlash2Qwen3DecoderLayer.forward`,
`_score_edges_reference`) and the walk of `v1/worker/gpu/spec_decode/dflash2/speculator.py`
(`_selector_walk_kernel` at temperature 0), on one request's flat rows, reading a checkpoint's
weights by name. The DFlash backbone (KV injection, one block per request, non-causal) is
written from reference/dflash.md. Test fixture only: never imported by the package.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F  # noqa: N812 (vLLM's spelling, kept to ease the comparison)

Weights = dict[str, torch.Tensor]


def rms_norm(x: torch.Tensor, weight: torch.Tensor, eps: float) -> torch.Tensor:
    x32 = x.float()
    return weight * (x32 * torch.rsqrt(x32.pow(2).mean(-1, keepdim=True) + eps))


def grouped_conv(
    hidden_states: torch.Tensor,
    delta: torch.Tensor,
    base: torch.Tensor,
    block_size: int,
    num_groups: int,
    group_size: int,
    taps: int,
) -> torch.Tensor:
    """vLLM's `_grouped_conv` CPU branch: rows `[n, H]`, `delta [n, taps, G]`, `base [taps, H]`."""
    blocks = hidden_states.unflatten(-1, (num_groups, group_size))
    coefficients = base.view(1, taps, num_groups, group_size) + delta.unsqueeze(-1)
    output = coefficients[:, 0] * blocks
    position = torch.arange(hidden_states.shape[0]) % block_size
    for tap in range(1, taps):
        shifted = F.pad(blocks[:-tap], (0, 0, 0, 0, tap, 0))
        output += coefficients[:, tap] * shifted * (position >= tap).view(-1, 1, 1)
    return output.flatten(-2)


class GroupedConv:
    """`DFlashGroupedConv`: `prepare` convolves the input, `finish` the output (side 0, 1)."""

    def __init__(self, w: Weights, prefix: str, group_size: int, block_size: int) -> None:
        self.base = w[f"{prefix}.base_kernel"]
        self.projection = w[f"{prefix}.kernel_projection.weight"]
        self.taps = self.base.shape[1]
        self.group_size = group_size
        self.num_groups = self.base.shape[2] // group_size
        self.block_size = block_size

    def _convolve(self, hidden: torch.Tensor, delta: torch.Tensor, side: int) -> torch.Tensor:
        return grouped_conv(
            hidden,
            delta,
            self.base[side],
            self.block_size,
            self.num_groups,
            self.group_size,
            self.taps,
        )

    def prepare(self, hidden: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        coefficients = (hidden @ self.projection.T).reshape(
            hidden.shape[0], 2, self.taps, self.num_groups
        )
        return self._convolve(hidden, coefficients[:, 0], 0), coefficients[:, 1]

    def finish(self, hidden: torch.Tensor, coefficients: torch.Tensor) -> torch.Tensor:
        return self._convolve(hidden, coefficients, 1)


def rope(x: torch.Tensor, positions: torch.Tensor, theta: float) -> torch.Tensor:
    """Neox-style rotary over the whole head: `x [heads, n, d]`."""
    d = x.shape[-1]
    inv_freq = 1.0 / (theta ** (torch.arange(0, d, 2).float() / d))
    angles = positions.float()[:, None] * inv_freq
    cos, sin = angles.cos().repeat(1, 2), angles.sin().repeat(1, 2)
    rotated = torch.cat([-x[..., d // 2 :], x[..., : d // 2]], dim=-1)
    return x * cos + rotated * sin


def attention(
    w: Weights, prefix: str, x: torch.Tensor, context: torch.Tensor, anchor: int, cfg: dict
) -> torch.Tensor:
    """KV injection: block queries attend to `[context | block]`, all of it (one block)."""
    heads, kv_heads, d = cfg["heads"], cfg["kv_heads"], cfg["head_dim"]
    n, s = x.shape[0], context.shape[0]
    eps = cfg["eps"]
    q = (x @ w[f"{prefix}.q_proj.weight"].T).view(n, heads, d)
    both = torch.cat([context, x])
    k = (both @ w[f"{prefix}.k_proj.weight"].T).view(s + n, kv_heads, d)
    v = (both @ w[f"{prefix}.v_proj.weight"].T).view(s + n, kv_heads, d)
    q = rms_norm(q, w[f"{prefix}.q_norm.weight"], eps).transpose(0, 1)
    k = rms_norm(k, w[f"{prefix}.k_norm.weight"], eps).transpose(0, 1)
    v = v.transpose(0, 1)
    q = rope(q, torch.arange(anchor, anchor + n), cfg["theta"])
    k = rope(k, torch.cat([torch.arange(s), torch.arange(anchor, anchor + n)]), cfg["theta"])
    k = k.repeat_interleave(heads // kv_heads, 0)
    v = v.repeat_interleave(heads // kv_heads, 0)
    probs = torch.softmax(q @ k.transpose(1, 2) / d**0.5, dim=-1)
    out = (probs @ v).transpose(0, 1).reshape(n, heads * d)
    return out @ w[f"{prefix}.o_proj.weight"].T


def mlp(w: Weights, prefix: str, x: torch.Tensor) -> torch.Tensor:
    gate = F.silu(x @ w[f"{prefix}.gate_proj.weight"].T)
    return (gate * (x @ w[f"{prefix}.up_proj.weight"].T)) @ w[f"{prefix}.down_proj.weight"].T


def draft_hidden(
    w: Weights, cfg: dict, block_embeds: torch.Tensor, features: torch.Tensor, anchor: int
) -> torch.Tensor:
    """One request's block `[B, H]` with the tapped features of positions `< anchor`."""
    eps = cfg["eps"]
    context = rms_norm(features @ w["fc.weight"].T, w["hidden_norm.weight"], eps)
    hidden = block_embeds
    for i in range(cfg["layers"]):
        p = f"layers.{i}"
        convs = [
            GroupedConv(w, f"{p}.{name}", cfg["group_size"], block_embeds.shape[0])
            for name in ("attention_conv", "mlp_conv")
        ]
        # DFlash2Qwen3DecoderLayer.forward, with the fused residual adds spelled out.
        residual = hidden
        h = rms_norm(hidden, w[f"{p}.input_layernorm.weight"], eps)
        h, coefficients = convs[0].prepare(h)
        h = attention(w, f"{p}.self_attn", h, context, anchor, cfg)
        h = convs[0].finish(h, coefficients)
        residual = residual + h
        h = rms_norm(residual, w[f"{p}.post_attention_layernorm.weight"], eps)
        h, coefficients = convs[1].prepare(h)
        h = mlp(w, f"{p}.mlp", h)
        hidden = residual + convs[1].finish(h, coefficients)
    return rms_norm(hidden, w["norm.weight"], eps)


def score_edges(
    w: Weights,
    candidate_ids: torch.Tensor,
    unary_logits: torch.Tensor,
    hidden_states: torch.Tensor,
    anchor_token_ids: torch.Tensor,
    top_k: int,
) -> torch.Tensor:
    """`CandidateSelector.forward` + `_score_edges_reference`: `[reqs, steps, K, K]`."""
    hidden = hidden_states @ w["candidate_selector.hidden_projection.weight"].T
    predecessor_table = w["candidate_selector.predecessor_codebook"]
    successors = w["candidate_selector.successor_codebook"][candidate_ids]
    predecessor_ids = torch.cat(
        (anchor_token_ids[:, None, None].expand(-1, 1, top_k), candidate_ids[:, :-1]), dim=1
    )
    predecessors = predecessor_table[predecessor_ids]
    return unary_logits.float()[:, :, None] + torch.einsum(
        "blpr,blcr->blpc", predecessors * hidden[:, :, None], successors
    )


def walk(scores: torch.Tensor, candidate_ids: torch.Tensor) -> list[list[int]]:
    """`_selector_walk_kernel` at temperature 0, one request per row."""
    tokens = []
    for row in range(scores.shape[0]):
        previous, picks = 0, []
        for step in range(scores.shape[1]):
            index = int(scores[row, step, previous].argmax())
            picks.append(int(candidate_ids[row, step, index]))
            previous = index
        tokens.append(picks)
    return tokens


def propose(
    w: Weights,
    cfg: dict,
    embed: torch.Tensor,
    lm_head: torch.Tensor,
    anchor_token: int,
    features: torch.Tensor,
) -> tuple[torch.Tensor, torch.Tensor, list[int]]:
    """What vLLM proposes for one request: (unary logits of the B-1 mask slots, edge scores,
    the walk's tokens). `features` are the taps of every position before the anchor."""
    block = torch.tensor([anchor_token] + [cfg["mask_token_id"]] * (cfg["block_size"] - 1))
    hidden = draft_hidden(w, cfg, embed[block], features, anchor=features.shape[0])[1:]
    logits = hidden @ lm_head.T
    values, ids = logits.topk(cfg["top_k"], dim=-1)
    scores = score_edges(
        w, ids[None], values[None], hidden[None], torch.tensor([anchor_token]), cfg["top_k"]
    )
    return logits, scores[0], walk(scores, ids[None])[0]
