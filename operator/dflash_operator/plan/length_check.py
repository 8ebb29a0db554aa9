"""regeneration.maxNewTokens against tokenization.maxSeqLen, once, when a run is admitted.

An answer longer than maxSeqLen can never be trained whole: tokenization truncates the sample
at maxSeqLen, so the GPU time spent generating past it is lost. It is not refused: with
thinking on, a long limit lets answers finish (a row cut at maxNewTokens is dropped by
tokenization.truncatedAnswers: drop), and its first maxSeqLen tokens are still trained. So the
run gets one Warning event saying what it costs and what to change.
"""

from __future__ import annotations

from dflash_operator.api.constants import Reason
from dflash_operator.api.spec import DFlashRunSpec
from dflash_operator.plan.draft import Draft


def untrainable_generation_warning(spec: DFlashRunSpec) -> str | None:
    max_new_tokens = spec.regeneration.max_new_tokens
    max_seq_len = spec.tokenization.max_seq_len
    if not spec.regeneration.enabled or max_new_tokens <= max_seq_len:
        return None
    if spec.target.thinking:
        advice = (
            "With thinking on this can be intended (long traces finish instead of being cut and "
            "dropped, and their first tokens are trained); otherwise lower maxNewTokens to at "
            f"most {max_seq_len}, or raise maxSeqLen (check the memory plan)."
        )
    else:
        advice = (
            f"Lower regeneration.maxNewTokens to at most {max_seq_len}, or raise "
            "tokenization.maxSeqLen (check the memory plan: activations grow with it)."
        )
    return Reason.GENERATION_LONGER_THAN_TRAINING.message(
        max_new_tokens=max_new_tokens, max_seq_len=max_seq_len, advice=advice
    )


def warn_untrainable_generation(spec: DFlashRunSpec, draft: Draft) -> None:
    message = untrainable_generation_warning(spec)
    if message is not None:
        draft.event(Reason.GENERATION_LONGER_THAN_TRAINING, message)
