"""The plan's vocabulary: a term (what holds memory, how much, how counted) and a phase (a
moment of the step and its terms). The arithmetic is in `estimate.py` and `dflash2.py`."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Term:
    """One line of the plan: what holds memory, how much, and how it was counted."""

    name: str
    bytes: int
    detail: str


@dataclass(frozen=True)
class Phase:
    """A moment of the step and what is alive then, on top of the persistent terms."""

    name: str
    terms: tuple[Term, ...]
