"""DFlash2's candidate selector: rerank the LM head's top-K with a low-rank transition score.

`score(p -> c) = unary[c] + <A[p] * (W h), B[c]>`, A and B the predecessor and successor
codebooks `[V, r]`, W the hidden projection `[r, H]`. The walk that uses these scores at
serving time is in `model/dflash2_walk.py`; the selector's training loss in `train/selector_loss.py`.
"""

from __future__ import annotations

import torch
from torch import nn

# speculators initialises the codebooks and the projection like the rest of a Qwen3 model.
SELECTOR_INIT_STD = 0.02


def top_candidates(unary_logits: torch.Tensor, top_k: int) -> tuple[torch.Tensor, torch.Tensor]:
    """`unary_logits [..., V]` -> `(candidate_ids, unary_scores)`, each `[..., K]`, best first."""
    values, ids = unary_logits.topk(top_k, dim=-1)
    return ids, values


class CandidateSelector(nn.Module):
    """The codebooks and the hidden projection, named as vLLM's `candidate_selector` loads them."""

    def __init__(self, vocab_size: int, hidden_size: int, rank: int, top_k: int) -> None:
        super().__init__()
        self.top_k = top_k
        self.predecessor_codebook = nn.Parameter(torch.empty(vocab_size, rank))
        self.successor_codebook = nn.Parameter(torch.empty(vocab_size, rank))
        self.hidden_projection = nn.Linear(hidden_size, rank, bias=False)
        self.reset_parameters()

    def reset_parameters(self) -> None:
        for weight in (
            self.predecessor_codebook,
            self.successor_codebook,
            self.hidden_projection.weight,
        ):
            nn.init.normal_(weight, std=SELECTOR_INIT_STD)

    def forward(
        self, hidden: torch.Tensor, predecessor_ids: torch.Tensor, candidate_ids: torch.Tensor
    ) -> torch.Tensor:
        """`transition_scores`, as a module call: FSDP2 gathers the codebooks around it."""
        return self.transition_scores(hidden, predecessor_ids, candidate_ids)

    def transition_scores(
        self, hidden: torch.Tensor, predecessor_ids: torch.Tensor, candidate_ids: torch.Tensor
    ) -> torch.Tensor:
        """`hidden [..., H]`, `predecessor_ids [...]`, `candidate_ids [..., K]` -> `[..., K]`."""
        context = self.predecessor_codebook[predecessor_ids] * self.hidden_projection(hidden)
        successors = self.successor_codebook[candidate_ids]
        scores: torch.Tensor = (context.unsqueeze(-2) * successors).sum(-1)
        return scores

    def score_candidates(
        self,
        unary_scores: torch.Tensor,
        hidden: torch.Tensor,
        predecessor_ids: torch.Tensor,
        candidate_ids: torch.Tensor,
    ) -> torch.Tensor:
        """Unary logit of each candidate `[..., K]` plus its transition score from one
        predecessor per row (teacher forcing in training)."""
        transition = self.transition_scores(hidden, predecessor_ids, candidate_ids)
        return unary_scores.float() + transition.float()

    def edge_scores(
        self,
        unary_scores: torch.Tensor,
        hidden: torch.Tensor,
        candidate_ids: torch.Tensor,
        anchor_ids: torch.Tensor,
    ) -> torch.Tensor:
        """Every edge of a drafted block, for the walk.

        `unary_scores`, `candidate_ids [b, steps, K]`, `hidden [b, steps, H]`, `anchor_ids [b]`
        -> `[b, steps, K (predecessor), K (candidate)]`. Step 0's predecessor is the anchor
        token (every row the same); step s > 0 has each of step s-1's candidates.
        """
        top_k = candidate_ids.shape[-1]
        first = anchor_ids.view(-1, 1, 1).expand(-1, 1, top_k)
        predecessor_ids = torch.cat([first, candidate_ids[:, :-1]], dim=1)
        context = self.predecessor_codebook[predecessor_ids] * self.hidden_projection(
            hidden
        ).unsqueeze(-2)
        successors = self.successor_codebook[candidate_ids]
        edges = torch.einsum("bspr,bscr->bspc", context, successors)
        return unary_scores.float().unsqueeze(-2) + edges.float()
