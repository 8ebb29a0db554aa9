"""The rows a scorer reads and what it returns for each (numpy only: the vLLM environment
imports these without the trainer's other dependencies)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

# Prompt tokens kept before each row's answer: the context a reader needs to see a wrong prompt.
PROMPT_TAIL_TOKENS = 48


@dataclass(frozen=True)
class TokenizedRow:
    """A row as training sees it: its token ids and loss mask."""

    id: str
    source: str
    input_ids: Sequence[int]
    loss_mask: Sequence[int]

    @property
    def prompt_tail(self) -> np.ndarray:
        first = next((t for t, m in enumerate(self.loss_mask) if m), len(self.loss_mask))
        return np.asarray(self.input_ids[max(0, first - PROMPT_TAIL_TOKENS) : first])


@dataclass
class RowScores:
    """One row's supervised tokens and what the scorer measured at each."""

    id: str
    source: str
    prompt_tail: np.ndarray
    token_ids: np.ndarray
    lp: np.ndarray
    rank: np.ndarray
    gap: np.ndarray
    mu: np.ndarray
    var: np.ndarray
