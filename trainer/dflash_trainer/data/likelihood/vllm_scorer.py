"""Score tokenized rows with vLLM's prompt log-probabilities, on the engine that generated them
(the canary's `LLM`) or a new one (the score stage): each row is one request of its whole
sequence with `max_tokens=1` and `prompt_logprobs=K`; position t's entry holds the K most likely
tokens and the row's own token, each with its log-probability (raw: before temperature and
truncation) and its rank.

Building the request and reading the answer are pure functions (checked against the real wheel
in tests/integration/images); vLLM itself is imported only by `VllmScorer`.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import torch

from dflash_trainer.data.likelihood.rule import SamplingRule, token_stats
from dflash_trainer.data.likelihood.types import RowScores, TokenizedRow

# vLLM refuses more prompt log-probabilities than its engine's `max_logprobs` (default 20).
VLLM_MAX_LOGPROBS = 20


def build_score_sampling_kwargs(logprobs: int) -> dict[str, Any]:
    """`SamplingParams(...)` of a scoring request: one greedy token (its prompt is what is
    scored), the prompt's top-`logprobs` log-probabilities, raw, no text."""
    return {
        "n": 1,
        "max_tokens": 1,
        "temperature": 0.0,
        "prompt_logprobs": logprobs,
        "detokenize": False,
    }


def read_position(
    entry: Mapping[int, Any] | None, token: int, k: int
) -> tuple[list[float], float, int]:
    """(top-k log-probabilities sorted, the token's log-probability, its 0-based rank) of one
    position's prompt log-probabilities (a mapping token id -> vLLM `Logprob`)."""
    if entry is None or token not in entry:
        raise ValueError(f"vLLM returned no prompt log-probability for token {token}")
    ranked = sorted(
        (float(lp.logprob) for tid, lp in entry.items() if lp.rank is not None and lp.rank <= k),
        reverse=True,
    )
    own = entry[token]
    rank = int(own.rank) - 1 if own.rank is not None else len(ranked)
    return ranked[:k], float(own.logprob), rank


def parse_prompt_logprobs(
    prompt_logprobs: Sequence[Mapping[int, Any] | None],
    input_ids: Sequence[int],
    loss_mask: Sequence[int],
    k: int,
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """(token ids, top [n, k], token log-probabilities [n], ranks [n]) of the supervised
    positions (position 0 has no log-probability and is never supervised after a prompt)."""
    tokens, tops, lps, ranks = [], [], [], []
    for t in range(1, len(input_ids)):
        if not loss_mask[t]:
            continue
        top, lp, rank = read_position(prompt_logprobs[t], int(input_ids[t]), k)
        if len(top) < k:  # fewer tokens than asked: a tiny vocabulary, pad as impossible
            top += [float("-inf")] * (k - len(top))
        tokens.append(int(input_ids[t]))
        tops.append(top)
        lps.append(lp)
        ranks.append(rank)
    return (
        np.asarray(tokens, dtype=np.int64),
        np.asarray(tops, dtype=np.float32).reshape(len(tokens), k),
        np.asarray(lps, dtype=np.float32),
        np.asarray(ranks, dtype=np.int64),
    )


def build_row_scores(
    row: TokenizedRow,
    prompt_logprobs: Sequence[Mapping[int, Any] | None],
    rule: SamplingRule,
    k: int,
    vocab_size: int,
) -> RowScores:
    tokens, top, lp, rank = parse_prompt_logprobs(prompt_logprobs, row.input_ids, row.loss_mask, k)
    gap, mu, var = token_stats(torch.from_numpy(top), torch.from_numpy(lp), rule, vocab_size)
    return RowScores(
        row.id, row.source, row.prompt_tail, tokens, lp, rank, gap.numpy(), mu.numpy(), var.numpy()
    )


class VllmScorer:
    """Scores rows on a vLLM `LLM` (streamed through its own engine, like regeneration)."""

    def __init__(self, llm: Any, rule: SamplingRule, in_flight: int = 256) -> None:
        from vllm import SamplingParams
        from vllm.sampling_params import RequestOutputKind

        self.llm = llm
        self.set_rule(rule)
        self.params = SamplingParams(**build_score_sampling_kwargs(self.k))
        self.params.output_kind = RequestOutputKind.FINAL_ONLY
        self.in_flight = in_flight
        config = llm.llm_engine.model_config
        self.vocab_size = int(config.get_vocab_size())

    def set_rule(self, rule: SamplingRule) -> None:
        """Score the next rows under `rule` (sources declare their own sampling)."""
        self.rule = rule
        self.k = min(rule.logprobs, VLLM_MAX_LOGPROBS)

    def score(self, rows: list[TokenizedRow]) -> list[RowScores]:
        from dflash_trainer.data.regenerate.vllm_engine import build_engine_input

        engine = self.llm.llm_engine
        pending = list(enumerate(rows))
        results: dict[int, RowScores] = {}
        live = 0
        while pending or live:
            while pending and live < self.in_flight:
                index, row = pending.pop(0)
                engine.add_request(f"score-{index}", build_engine_input(list(row.input_ids)),
                                   self.params)  # fmt: skip
                live += 1
            for output in engine.step():
                if not output.finished:
                    continue
                live -= 1
                index = int(str(output.request_id).rsplit("-", 1)[-1])
                results[index] = build_row_scores(
                    rows[index], output.prompt_logprobs, self.rule, self.k, self.vocab_size
                )
        return [results[i] for i in range(len(rows))]
