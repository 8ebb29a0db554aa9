"""Greedy DFlash speculative decoding and its acceptance statistics.

Each round drafts one block `[last token, MASK x (B-1)]` at anchor = position of the last
token, with the target features of every earlier position as context; the target then
verifies the block in one forward, and the longest prefix matching its greedy choices is
accepted plus one bonus token. The target runs without a KV cache (a hybrid Gated-DeltaNet
cache cannot be rolled back), so this measures acceptance, not speed. Acceptance length is
pooled: generated tokens / rounds over all prompts (as vLLM and SGLang report it).
A DFlash2 drafter proposes as vLLM's DFlash2 speculator does: the LM head's top-K per slot,
reranked by the selector's walk (greedy, or Gumbel-sampled with its K-candidate distribution
as the draft distribution of rejection sampling).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import torch

from dflash_trainer.model.block_attention import BlockLayout
from dflash_trainer.model.dflash2_selector import CandidateSelector, top_candidates
from dflash_trainer.model.dflash2_walk import scatter_draft_probs, walk_sampled
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
    temperature: float = 0.0,
    generator: torch.Generator | None = None,
) -> SpecOutput:
    """Speculative decoding of one prompt. Greedy (temperature 0): the output equals plain
    greedy decoding. Sampled (temperature > 0): standard speculative sampling (accept draft
    token x with probability min(1, p(x)/q(x)), else resample from max(0, p - q)), so the
    output follows the target's own distribution at that temperature."""
    cfg = drafter.config
    device = target.embed.weight.device
    stops = stop_token_ids or set()
    drafter_dtype = drafter.fc.weight.dtype
    features, logits = taps.features_and_logits(torch.tensor([prompt], device=device))
    ids = [*prompt, _pick(logits[0, -1], temperature, generator)]
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
        draft_logits = target.lm_head(hidden[0, 1:].to(target.embed.weight.dtype))
        selector = getattr(drafter, "candidate_selector", None)
        if isinstance(selector, CandidateSelector):
            draft, q = propose_with_selector(
                selector, hidden[0, 1:], draft_logits, ids[-1], temperature, generator
            )
        elif temperature > 0:
            q = torch.softmax(draft_logits.float() / temperature, dim=-1)
            draft = [_sample(q[j], generator) for j in range(q.shape[0])]
        else:
            draft = draft_logits.argmax(-1).tolist()
        features, logits = taps.features_and_logits(torch.tensor([ids + draft], device=device))
        if temperature > 0:
            p = torch.softmax(logits[0, anchor:].float() / temperature, dim=-1)
            accepted, last = _verify_sampled(draft, p, q, generator)
        else:
            choice = logits[0, anchor:].argmax(-1).tolist()  # choice[j]: the token at anchor+1+j
            accepted = 0
            while accepted < len(draft) and draft[accepted] == choice[accepted]:
                accepted += 1
            last = choice[accepted]
        new = [*draft[:accepted], last][: max_new_tokens - generated]
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


def propose_with_selector(
    selector: CandidateSelector,
    hidden: torch.Tensor,
    draft_logits: torch.Tensor,
    anchor_token: int,
    temperature: float,
    generator: torch.Generator | None,
) -> tuple[list[int], torch.Tensor]:
    """DFlash2's block: `hidden [B-1, H]`, `draft_logits [B-1, V]` (the shared LM head's) ->
    the walk's tokens and the draft distribution `[B-1, V]` (zero off each step's K)."""
    ids, unary = top_candidates(draft_logits.float(), selector.top_k)
    anchor = torch.tensor([anchor_token], device=ids.device)
    edges = selector.edge_scores(unary[None], hidden[None].to(unary.dtype), ids[None], anchor)
    tokens, log_probs = walk_sampled(edges, ids[None], temperature, generator)
    q = scatter_draft_probs(log_probs[0], ids, draft_logits.shape[-1])
    return tokens[0].tolist(), q


def _sample(probs: torch.Tensor, generator: torch.Generator | None) -> int:
    return int(torch.multinomial(probs, 1, generator=generator))


def _pick(logits: torch.Tensor, temperature: float, generator: torch.Generator | None) -> int:
    if temperature <= 0:
        return int(logits.argmax())
    return _sample(torch.softmax(logits.float() / temperature, dim=-1), generator)


def _verify_sampled(
    draft: list[int], p: torch.Tensor, q: torch.Tensor, generator: torch.Generator | None
) -> tuple[int, int]:
    """(drafts accepted, the token after them): p[j] and q[j] are the target's and the
    drafter's distributions of the token at slot j+1; p[len(draft)] gives the bonus token."""
    for j, token in enumerate(draft):
        ratio = float(p[j, token]) / max(float(q[j, token]), 1e-30)
        draw = float(torch.rand((), generator=generator, device=p.device))
        if draw < min(1.0, ratio):
            continue
        residual = (p[j] - q[j]).clamp(min=0)
        total = float(residual.sum())
        return j, _sample(residual / total if total > 0 else p[j], generator)
    return len(draft), _sample(p[len(draft)], generator)
