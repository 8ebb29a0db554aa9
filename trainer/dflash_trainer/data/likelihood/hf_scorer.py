"""Score tokenized rows with a transformers causal LM (CPU or one GPU): one forward per batch of
rows, the LM head applied only where a supervised token is predicted, in chunks.

`score_positions` is the shared core: hidden states that predict some tokens -> per token its
log-probability, rank and the sampler's figures (`rule.token_stats`). The trainer's monitor
calls it on the hidden states its target forward already produced.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from dflash_memplan.estimate import MONITOR_HEAD_CHUNK_ROWS
from torch import nn

from dflash_trainer.data.likelihood.rule import SamplingRule, token_stats
from dflash_trainer.data.likelihood.types import RowScores, TokenizedRow

# LM-head rows per chunk: 1,024 x a 248K vocabulary is 1 GB of float32 logits. The memory plan
# counts the in-training monitor's chunk with this same constant (docs/memory-plan.md).
HEAD_CHUNK_ROWS = MONITOR_HEAD_CHUNK_ROWS
# Tokens per forward (rows are padded to the longest of their batch, sorted by length first).
BATCH_TOKENS = 8192


@dataclass(frozen=True)
class PositionScores:
    """Per scored token, flat (torch, on the scoring device)."""

    lp: torch.Tensor
    rank: torch.Tensor
    gap: torch.Tensor
    mu: torch.Tensor
    var: torch.Tensor


@torch.no_grad()
def score_positions(
    hidden: torch.Tensor,
    targets: torch.Tensor,
    lm_head: nn.Module,
    rule: SamplingRule,
    chunk_rows: int = HEAD_CHUNK_ROWS,
) -> PositionScores:
    """`hidden [n, H]` predicts `targets [n]`: the LM head on those rows only, in chunks."""
    parts = [
        _score_chunk(hidden[at : at + chunk_rows], targets[at : at + chunk_rows], lm_head, rule)
        for at in range(0, hidden.shape[0], chunk_rows)
    ]
    if not parts:
        empty = hidden.new_zeros(0, dtype=torch.float32)
        return PositionScores(empty, empty.long(), empty, empty, empty)
    joined = [torch.cat(column) for column in zip(*parts, strict=True)]
    return PositionScores(*joined)


def _score_chunk(
    hidden: torch.Tensor, target: torch.Tensor, lm_head: nn.Module, rule: SamplingRule
) -> tuple[torch.Tensor, ...]:
    """One chunk's figures. A function of its own so that the chunk's [rows, V] tensors are
    freed before the next chunk's logits exist: 9 B per logit at the peak (float32 logits,
    their log-softmax, the rank's comparison), not 12-14 B with two chunks alive."""
    logits = lm_head(hidden).float()  # bf16 logits are freed once copied
    logprobs = torch.log_softmax(logits, dim=-1)
    lp = logprobs.gather(1, target[:, None])[:, 0]
    rank = (logits > logits.gather(1, target[:, None])).sum(dim=1)
    top = logprobs.topk(min(rule.logprobs, logprobs.shape[1]), dim=1).values
    gap, mu, var = token_stats(top, lp, rule, logits.shape[1])
    return lp, rank, gap, mu, var


def _batches(rows: list[TokenizedRow], budget: int) -> list[list[int]]:
    """Row indices grouped by length so that padding wastes little."""
    order = sorted(range(len(rows)), key=lambda i: len(rows[i].input_ids))
    out: list[list[int]] = []
    current: list[int] = []
    for i in order:
        width = len(rows[i].input_ids)
        if current and width * (len(current) + 1) > budget:
            out.append(current)
            current = []
        current.append(i)
    if current:
        out.append(current)
    return out


class HfScorer:
    """Scores rows with a loaded transformers causal LM (its decoder and LM head)."""

    def __init__(self, model: nn.Module, rule: SamplingRule, batch_tokens: int = BATCH_TOKENS):
        from dflash_trainer.model.target import find_parts

        parts = find_parts(model)
        self.decoder = parts.decoder
        self.lm_head = parts.lm_head
        self.rule = rule
        self.batch_tokens = batch_tokens
        self.device = next(model.parameters()).device

    def set_rule(self, rule: SamplingRule) -> None:
        """Score the next rows under `rule` (sources declare their own sampling)."""
        self.rule = rule

    @torch.no_grad()
    def score(self, rows: list[TokenizedRow]) -> list[RowScores]:
        out: list[RowScores | None] = [None] * len(rows)
        for batch in _batches(rows, self.batch_tokens):
            for i, scored in zip(batch, self._score_batch([rows[i] for i in batch]), strict=True):
                out[i] = scored
        return [r for r in out if r is not None]

    def _score_batch(self, rows: list[TokenizedRow]) -> list[RowScores]:
        width = max(len(r.input_ids) for r in rows)
        ids = torch.zeros(len(rows), width, dtype=torch.long)
        mask = torch.zeros(len(rows), width, dtype=torch.bool)
        for j, row in enumerate(rows):
            ids[j, : len(row.input_ids)] = torch.as_tensor(list(row.input_ids), dtype=torch.long)
            mask[j, : len(row.loss_mask)] = torch.as_tensor(list(row.loss_mask), dtype=torch.bool)
        ids, mask = ids.to(self.device), mask.to(self.device)
        # Right padding, causal attention: padding never changes a row's own positions.
        hidden = self.decoder(input_ids=ids, use_cache=False).last_hidden_state
        predicted = mask[:, 1:]  # token t is predicted by position t - 1
        rows_at, cols_at = predicted.nonzero(as_tuple=True)
        scores = score_positions(
            hidden[:, :-1][rows_at, cols_at], ids[:, 1:][rows_at, cols_at], self.lm_head, self.rule
        )
        counts = predicted.sum(dim=1).tolist()
        columns = [
            t.cpu().numpy() for t in (scores.lp, scores.rank, scores.gap, scores.mu, scores.var)
        ]
        targets = ids[:, 1:][rows_at, cols_at].cpu().numpy()
        out = []
        start = 0
        for row, count in zip(rows, counts, strict=True):
            end = start + int(count)
            tail = row.prompt_tail
            lp, rank, gap, mu, var = (c[start:end] for c in columns)
            out.append(
                RowScores(row.id, row.source, tail, targets[start:end], lp, rank, gap, mu, var)
            )
            start = end
        return out
