"""Plain greedy decoding with the target: the reference speculative output must equal, and the
source of self-distillation data (the target's own continuations) for debug runs and tests.

No KV cache on purpose: every step recomputes the prefix, so the result cannot depend on
cache bookkeeping (hybrid Gated-DeltaNet caches cannot be rolled back). Meant for small
targets and short outputs.
"""

from __future__ import annotations

import torch
from torch import nn


@torch.no_grad()
def greedy_generate(
    model: nn.Module,
    prompt_ids: torch.Tensor,
    max_new_tokens: int,
    stop_token_ids: set[int] | None = None,
) -> torch.Tensor:
    """Greedy continuation of `prompt_ids [b, P]` (equal lengths) -> `[b, P + n]`.

    With `stop_token_ids`, a row's generation is complete once it emits one of them; the
    other rows continue (the row is padded with its stop token).
    """
    ids = prompt_ids
    done = torch.zeros(ids.shape[0], dtype=torch.bool, device=ids.device)
    for _ in range(max_new_tokens):
        logits = model(input_ids=ids, use_cache=False).logits[:, -1]
        nxt = logits.argmax(-1)
        if stop_token_ids:
            nxt = torch.where(done, ids[:, -1], nxt)
            done |= torch.isin(nxt, torch.tensor(sorted(stop_token_ids), device=ids.device))
        ids = torch.cat([ids, nxt[:, None]], dim=1)
        if stop_token_ids and bool(done.all()):
            break
    return ids


def build_random_prompts(
    num: int, length: int, vocab_size: int, seed: int, avoid: int | None = None
) -> torch.Tensor:
    """`[num, length]` uniformly random token ids (never `avoid`, e.g. the mask token)."""
    generator = torch.Generator().manual_seed(seed)
    prompts = torch.randint(0, vocab_size, (num, length), generator=generator)
    if avoid is not None:
        prompts[prompts == avoid] = (avoid + 1) % vocab_size
    return prompts


@torch.no_grad()
def build_self_distill_samples(
    model: nn.Module,
    *,
    samples: int,
    prompt_tokens: int,
    answer_tokens: int,
    vocab_size: int,
    seed: int,
    avoid: int | None = None,
    batch: int = 64,
) -> tuple[torch.Tensor, torch.Tensor]:
    """(`input_ids`, `loss_mask`), each `[samples, prompt + answer]`; the mask is 1 on answers."""
    prompts = build_random_prompts(samples, prompt_tokens, vocab_size, seed, avoid)
    device = next(model.parameters()).device
    rows = [
        greedy_generate(model, prompts[i : i + batch].to(device), answer_tokens).cpu()
        for i in range(0, samples, batch)
    ]
    input_ids = torch.cat(rows)
    loss_mask = torch.zeros_like(input_ids, dtype=torch.int8)
    loss_mask[:, prompt_tokens:] = 1
    return input_ids, loss_mask
