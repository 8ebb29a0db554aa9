"""Greedy DFlash speculative decoding and its acceptance statistics.

Each round drafts one block `[last token, MASK x (B-1)]` at anchor = position of the last
token, with the target features of every earlier position as context; the target then
verifies the block in one forward, and the longest prefix matching its greedy choices is
accepted plus one bonus token. The target runs without a KV cache (a hybrid Gated-DeltaNet
cache cannot be rolled back), so this measures acceptance, not speed. Acceptance length is
pooled: generated tokens / rounds over all prompts (as vLLM and SGLang report it).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import torch

from dflash_trainer.model.block_attention import BlockLayout
from dflash_trainer.model.drafter import DFlashDrafter
from dflash_trainer.model.taps import TargetTaps
from dflash_trainer.model.target import TargetParts


@dataclass(frozen=True)
class SpecOutput:
    tokens: list[int]  # generated tokens (prompt excluded)
    accepted: list[int]  # drafts accepted in each round (0..B-1)
    produced: list[int]  # tokens each round added (accepted + bonus, cut at the budget)


@dataclass
class AcceptanceStats:
    """Pooled over prompts: `produced / rounds`; position k: share of rounds accepting >= k."""

    block_size: int
    rounds: int = 0
    produced: int = 0
    reached: list[int] = field(default_factory=list)

    def add(self, out: SpecOutput) -> None:
        if not self.reached:
            self.reached = [0] * (self.block_size - 1)
        self.rounds += len(out.accepted)
        self.produced += sum(out.produced)
        for accepted in out.accepted:
            for k in range(accepted):
                self.reached[k] += 1

    @property
    def acceptance_length(self) -> float:
        return self.produced / self.rounds if self.rounds else 0.0

    @property
    def per_position(self) -> list[float]:
        return [r / self.rounds if self.rounds else 0.0 for r in self.reached]


@torch.no_grad()
def speculative_generate(
    target: TargetParts,
    taps: TargetTaps,
    drafter: DFlashDrafter,
    prompt: list[int],
    max_new_tokens: int,
    stop_token_ids: set[int] | None = None,
) -> SpecOutput:
    """Greedy speculative decoding of one prompt; the output equals plain greedy decoding."""
    cfg = drafter.config
    device = target.embed.weight.device
    stops = stop_token_ids or set()
    drafter_dtype = drafter.fc.weight.dtype
    features, logits = taps.features_and_logits(torch.tensor([prompt], device=device))
    ids = [*prompt, int(logits[0, -1].argmax())]
    context = features  # features of every position before the current anchor
    generated = 1
    accepted_log: list[int] = []
    produced_log: list[int] = []
    while generated < max_new_tokens and ids[-1] not in stops:
        anchor = len(ids) - 1
        block = torch.tensor(
            [[ids[-1]] + [cfg.mask_token_id] * (cfg.block_size - 1)], device=device
        )
        layout = BlockLayout(
            anchors=torch.tensor([[anchor]], device=device),
            context_len=anchor,
            block_size=cfg.block_size,
        )
        hidden = drafter(
            target.embed(block).to(drafter_dtype),
            context[:, :anchor].to(drafter_dtype),
            layout,
            backend="dense",
        )
        draft = target.lm_head(hidden[0, 1:].to(target.embed.weight.dtype)).argmax(-1).tolist()
        features, logits = taps.features_and_logits(torch.tensor([ids + draft], device=device))
        choice = logits[0, anchor:].argmax(-1).tolist()  # choice[j]: the target's token anchor+1+j
        accepted = 0
        while accepted < len(draft) and draft[accepted] == choice[accepted]:
            accepted += 1
        new = [*draft[:accepted], choice[accepted]][: max_new_tokens - generated]
        for j, token in enumerate(new):
            if token in stops:
                new = new[: j + 1]
                break
        ids.extend(new)
        generated += len(new)
        accepted_log.append(accepted)
        produced_log.append(len(new))
        context = features
    return SpecOutput(ids[len(prompt) :], accepted_log, produced_log)
