"""DFlash2's selector targets: the verifier's (target model's) argmax at every scored slot.

Slot k of the block at anchor a is the token at a+k, so its verifier prediction is the argmax
of the target's logits at a+k-1, read from the final hidden states of the full target forward
(`TargetTaps.features_and_hidden`). The unary loss keeps the data's labels (`train/anchors.py`).
"""

from __future__ import annotations

import torch
from torch.nn import functional


@torch.no_grad()
def build_verifier_argmax(
    final_hidden: torch.Tensor,
    lm_head_weight: torch.Tensor,
    anchors: torch.Tensor,
    labels: torch.Tensor,
    weights: torch.Tensor,
    *,
    block_size: int,
    chunk_tokens: int,
) -> torch.Tensor:
    """`final_hidden [b, S, H]` (final-normed), `anchors [b, N]`, `labels`/`weights [b, N*B]`
    -> `[b, N*B]`: the verifier's argmax where a slot is scored, the data's label elsewhere.
    Logits only for scored slots, `chunk_tokens` rows at a time, like the loss."""
    bsz, context_len, _ = final_hidden.shape
    offsets = torch.arange(block_size, device=anchors.device) - 1
    positions = (anchors[:, :, None] + offsets).clamp(0, context_len - 1).reshape(bsz, -1)
    targets = labels.clone()
    scored = weights.reshape(-1).nonzero().flatten()
    if scored.numel() == 0:
        return targets
    rows_of = torch.arange(bsz, device=anchors.device).repeat_interleave(positions.shape[1])
    hidden_rows = final_hidden[rows_of[scored], positions.reshape(-1)[scored]]
    picks = [
        functional.linear(hidden_rows[start : start + chunk_tokens], lm_head_weight).argmax(-1)
        for start in range(0, hidden_rows.shape[0], chunk_tokens)
    ]
    flat = targets.view(-1)
    flat[scored] = torch.cat(picks)
    return targets
