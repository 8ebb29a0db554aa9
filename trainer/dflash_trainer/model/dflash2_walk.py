"""DFlash2's walk: pick each drafted token given the previous pick, left to right.

The edge scores come from `CandidateSelector.edge_scores` (`model/dflash2_selector.py`).
Greedy is the plain argmax of the row (vLLM's `gumbel_noised_argmax` at temperature 0); sampled
is a Gumbel argmax over the same K scores divided by the temperature, and the draft
distribution rejection sampling needs is the softmax of that row over the K candidates
(vLLM hands its rejection sampler those K scores, -inf elsewhere, in float32).
"""

from __future__ import annotations

import torch


def walk_greedy(edge_scores: torch.Tensor, candidate_ids: torch.Tensor) -> torch.Tensor:
    """`edge_scores [b, steps, K, K]`, `candidate_ids [b, steps, K]` -> tokens `[b, steps]`.

    Step 0 reads row 0 (all its rows share the anchor as predecessor); step s reads the row
    of the candidate picked at step s-1. Ties go to the better unary rank (the lower index).
    """
    return walk_sampled(edge_scores, candidate_ids, 0.0, None)[0]


def gumbel_noise(shape: torch.Size, generator: torch.Generator | None) -> torch.Tensor:
    # Drawn where the generator lives (a CUDA generator cannot fill a CPU tensor).
    device = generator.device if generator is not None else torch.device("cpu")
    uniform = torch.rand(shape, generator=generator, dtype=torch.float64, device=device)
    tiny = torch.finfo(torch.float64).tiny
    exponential = -torch.log(uniform.clamp(min=tiny))
    return -torch.log(exponential.clamp(min=tiny))


def walk_sampled(
    edge_scores: torch.Tensor,
    candidate_ids: torch.Tensor,
    temperature: float,
    generator: torch.Generator | None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """The walk at `temperature` (0: greedy) -> `(tokens [b, steps], draft_log_probs
    [b, steps, K])`: each step's log-softmax over its K candidates of the row it read (at
    temperature 0, of the raw row; unused by greedy verification)."""
    bsz, steps, _ = candidate_ids.shape
    rows = torch.arange(bsz, device=candidate_ids.device)
    previous = torch.zeros(bsz, dtype=torch.long, device=candidate_ids.device)
    picks, log_probs = [], []
    for step in range(steps):
        row = edge_scores[rows, step, previous].float()
        if temperature > 0:
            row = row / temperature
            noise = gumbel_noise(row.shape, generator).to(row.device, row.dtype)
            index = (row + noise).argmax(-1)
        else:
            index = row.argmax(-1)
        picks.append(candidate_ids[rows, step, index])
        log_probs.append(torch.log_softmax(row, dim=-1))
        previous = index
    return torch.stack(picks, dim=1), torch.stack(log_probs, dim=1)


def scatter_draft_probs(
    log_probs: torch.Tensor, candidate_ids: torch.Tensor, vocab_size: int
) -> torch.Tensor:
    """`[..., K]` log-probabilities on their candidates -> probabilities `[..., V]`, zero off
    the candidate set (the K-candidate draft distribution of rejection sampling)."""
    out = torch.zeros(*log_probs.shape[:-1], vocab_size, dtype=torch.float32)
    return out.to(log_probs.device).scatter_(-1, candidate_ids, log_probs.float().exp())
