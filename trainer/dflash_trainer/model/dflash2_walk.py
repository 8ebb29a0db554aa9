"""DFlash2's greedy walk: pick each drafted token given the previous pick, left to right.

The edge scores come from `CandidateSelector.edge_scores` (`model/dflash2_selector.py`). The
sampled walk (Gumbel over the same row) belongs with the eval's sampling and is not here yet.
"""

from __future__ import annotations

import torch


def walk_greedy(edge_scores: torch.Tensor, candidate_ids: torch.Tensor) -> torch.Tensor:
    """`edge_scores [b, steps, K, K]`, `candidate_ids [b, steps, K]` -> tokens `[b, steps]`.

    Step 0 reads row 0 (all its rows share the anchor as predecessor); step s reads the row
    of the candidate picked at step s-1. Ties go to the better unary rank (the lower index).
    """
    bsz, steps, _ = candidate_ids.shape
    rows = torch.arange(bsz, device=candidate_ids.device)
    previous = torch.zeros(bsz, dtype=torch.long, device=candidate_ids.device)
    picks = []
    for step in range(steps):
        index = edge_scores[rows, step, previous].argmax(-1)
        picks.append(candidate_ids[rows, step, index])
        previous = index
    return torch.stack(picks, dim=1)
