"""The regeneration's sampling settings as the likelihood check reads them (`SamplingRule`),
without torch: the gates judge stored scores and must not pay torch's ~500 MB import. The
support and NLL arithmetic on them lives in `rule.py`.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

# K: how many of a position's highest log-probabilities the scorers read. vLLM returns at most
# its engine's `max_logprobs` (20 by default) prompt log-probabilities per position; the support
# of the default sampling (top-k 20) lies inside it, so the rule is exact there.
DEFAULT_LOGPROBS = 20


@dataclass(frozen=True)
class SamplingRule:
    """The regeneration's sampling settings (spec.regeneration), as the check reads them."""

    temperature: float = 0.6
    top_p: float = 0.95
    top_k: int = 20
    min_p: float = 0.0
    # A repetition or presence penalty moves tokens into the support that the unpenalised
    # logits would not admit: the support test cannot be reproduced, only the NLL is reported.
    penalized: bool = False
    # k of the top-k share when sampling has no top-k (audit.likelihood.topK).
    default_k: int = DEFAULT_LOGPROBS

    @property
    def greedy(self) -> bool:
        return self.temperature <= 0

    @property
    def share_k(self) -> int:
        """k of the reported top-k share: 1 when greedy, else top-k, else the default."""
        if self.greedy:
            return 1
        return self.top_k if self.top_k > 0 else self.default_k

    @property
    def logprobs(self) -> int:
        """How many top log-probabilities a scorer should read per position."""
        return max(self.share_k, self.top_k, 1)

    def to_json(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> SamplingRule:
        known = {k: v for k, v in data.items() if k in cls.__dataclass_fields__}
        return cls(**known)
