"""Per-row features of a batch of regenerated completions (contract section 3), vectorised.

Lengths (generated, reasoning), how generation ended, empty and stray-tag answers, duplicate
keys, repetition loops on the engine's token ids, and the writing system of prompt and answer.
The completions gate (`metrics_completions`) sums them per source; the examples pass
(`examples`) uses them to pick rows that show a failing check.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from dflash_trainer.data.audit.lists import first_position, flatten_list
from dflash_trainer.data.audit.ngrams import ngram_stats
from dflash_trainer.data.audit.scripts import Script, script_counts, wrong_language
from dflash_trainer.data.audit.text_keys import completion_keys, completion_texts
from dflash_trainer.data.audit.thresholds import Thresholds
from dflash_trainer.data.audit.vocab import VocabInfo

# Without token counts (completions made elsewhere), generated tokens are estimated from the
# UTF-8 size: ~4 bytes per token is typical of byte-level BPE on English text and code.
BYTES_PER_TOKEN_ESTIMATE = 4
# Completions shorter than this many 4-grams are not judged for loops (a stub is caught anyway).
MIN_LOOP_NGRAMS = 16
# Script detection reads the end of the prompt (where its last user message is) and the start
# of the answer: a few hundred characters tell a language apart.
PROMPT_TAIL_CHARS = 300
# The most frequent completion is counted on the start of its reasoning and of its answer.
TOP_KEY_CHARS = 256
ANSWER_HEAD_CHARS = 300
# The prompt column is the JSON of the messages (written with ensure_ascii=False). Its keys and
# escapes are Latin letters that are not the user's language: they are counted and taken off.
PROMPT_JSON_LETTERS = {'"role"': 4, '"content"': 7, '"user"': 4, '"assistant"': 9,
                       '"system"': 6, "\\n": 1, "\\t": 1}  # fmt: skip
FINISH_LENGTH = "length"


@dataclass(frozen=True)
class CompletionSettings:
    """What the completions gate knows beyond the data: the vocabulary (`--model`) and the
    generation limit (`--max-new-tokens`, from spec.regeneration.maxNewTokens)."""

    vocab: VocabInfo | None = None
    max_new_tokens: int | None = None


def large_strings(batch: pa.RecordBatch, name: str) -> pa.Array | None:
    if name not in batch.schema.names:
        return None
    col = batch.column(name)
    return col.cast(pa.large_string()) if not pa.types.is_large_string(col.type) else col


def _bool(arr: pa.Array | pa.ChunkedArray) -> np.ndarray:
    out: np.ndarray = arr.to_numpy(zero_copy_only=False).astype(bool)
    return out


def _is_blank(texts: pa.Array) -> np.ndarray:
    """Empty or whitespace only (no copy of the texts is made)."""
    texts = texts.fill_null("")
    return _bool(pc.or_(pc.equal(pc.binary_length(texts), 0), pc.utf8_is_space(texts)))


def _estimated_tokens(texts: pa.Array) -> np.ndarray:
    size = pc.binary_length(texts.fill_null("")).to_numpy(zero_copy_only=False).astype(np.int64)
    estimate: np.ndarray = -(-size // BYTES_PER_TOKEN_ESTIMATE)
    return estimate


def _generated_tokens(
    batch: pa.RecordBatch, response: pa.Array, reasoning: pa.Array | None
) -> tuple[np.ndarray, np.ndarray]:
    """(generated tokens, whether the count is known) per row."""
    estimate = _estimated_tokens(response)
    if reasoning is not None:
        estimate = estimate + _estimated_tokens(reasoning)
    if "num_output_tokens" not in batch.schema.names:
        return estimate, np.zeros(batch.num_rows, dtype=bool)
    col = batch.column("num_output_tokens")
    known = _bool(col.is_valid())
    counts = col.fill_null(0).to_numpy(zero_copy_only=False).astype(np.int64)
    return np.where(known, counts, estimate), known


def _reasoning_tokens(
    batch: pa.RecordBatch,
    response_blank: np.ndarray,
    reasoning: pa.Array | None,
    vocab: VocabInfo | None,
) -> np.ndarray:
    """Reasoning tokens per row: counted in the engine's ids (the tags and the whitespace at
    the edges of the think block excluded) when the vocabulary is known and the row has ids,
    else estimated from the text."""
    if reasoning is None:
        return np.zeros(batch.num_rows, dtype=np.int64)
    estimate = _estimated_tokens(reasoning)
    if vocab is None or vocab.think_end is None or "output_token_ids" not in batch.schema.names:
        return estimate
    ids = flatten_list(batch.column("output_token_ids"), np.int32)
    if len(ids.values) == 0:
        return estimate
    rows = ids.rows
    has_ids = ids.lengths > 0
    ends = first_position(np.flatnonzero(ids.values == vocab.think_end), ids.offsets, rows)
    # No </think> in the ids: cut inside thinking when there is no answer, else no thinking.
    ends = np.where(ends >= 0, ends, np.where(response_blank, ids.offsets[1:], ids.offsets[:-1]))
    starts = ids.offsets[:-1].copy()
    if vocab.think_start is not None:  # Qwen3 writes <think> itself; Qwen3.5/3.6 prompts hold it
        opens = has_ids & (ids.values[np.minimum(starts, len(ids.values) - 1)] == vocab.think_start)
        starts = starts + opens
    exact = vocab.trimmed_reasoning(ids.values, starts, ends)
    return np.where(has_ids, exact, estimate)


def _loops(batch: pa.RecordBatch, loop_share: float) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(measured, loop, repeated share) per row, on the engine's ids; unmeasured without ids."""
    rows = batch.num_rows
    if "output_token_ids" not in batch.schema.names:
        zero = np.zeros(rows, dtype=bool)
        return zero, zero, np.zeros(rows)
    ids = flatten_list(batch.column("output_token_ids"), np.int32)
    stats = ngram_stats(ids.values, ids.offsets)
    measured = stats.ngrams >= MIN_LOOP_NGRAMS
    share = stats.repeats / np.maximum(stats.ngrams, 1)
    return measured, measured & (share > loop_share), share


def _prompt_scripts(batch: pa.RecordBatch) -> np.ndarray | None:
    """Letters per script of the end of each prompt (its last message), JSON keys excluded."""
    prompt = large_strings(batch, "prompt")
    if prompt is None:
        return None
    tail = pc.utf8_slice_codeunits(prompt.fill_null(""), -PROMPT_TAIL_CHARS)
    counts = script_counts(tail)
    noise = np.zeros(len(tail), dtype=np.int64)
    for key, letters in PROMPT_JSON_LETTERS.items():
        found = pc.count_substring(tail, key).to_numpy(zero_copy_only=False)
        noise += letters * found.astype(np.int64)
    counts[:, Script.LATIN] = np.maximum(counts[:, Script.LATIN] - noise, 0)
    return counts


def whole_completion_texts(batch: pa.RecordBatch) -> pa.Array:
    """Each row's completion as one short text for counting the most frequent one: the first
    TOP_KEY_CHARS characters of the reasoning (when there is any), a separator, and of the answer.
    Repetition of the answer alone is no defect: long, distinct reasoning that ends in a common
    short answer ("42", "Yes.") is healthy data."""
    response = large_strings(batch, "response")
    if response is None:
        raise ValueError("completion batches need a 'response' column")
    answer = pc.utf8_slice_codeunits(response.fill_null(""), 0, TOP_KEY_CHARS)
    reasoning = large_strings(batch, "reasoning")
    if reasoning is None:
        return answer
    head = pc.utf8_slice_codeunits(reasoning.fill_null(""), 0, TOP_KEY_CHARS)
    return pc.if_else(pa.array(_is_blank(head)), answer, completion_texts(head, answer))


def completion_features(
    batch: pa.RecordBatch, thresholds: Thresholds, settings: CompletionSettings | None = None
) -> dict[str, np.ndarray]:
    """Per-row features of one batch of completions."""
    settings = settings or CompletionSettings()
    rows = batch.num_rows
    response = large_strings(batch, "response")
    if response is None:
        raise ValueError("completion batches need a 'response' column")
    response = response.fill_null("")
    reasoning = large_strings(batch, "reasoning")
    finish = (
        batch.column("finish_reason")
        if "finish_reason" in batch.schema.names
        else pa.nulls(rows, pa.string())
    )
    finish_known = _bool(pc.and_(finish.is_valid(), pc.not_equal(finish.fill_null(""), "")))
    declared_length = _bool(pc.equal(finish.fill_null(""), FINISH_LENGTH))
    response_blank = _is_blank(response)
    # One pass finds "think>" (both tags end so); the few hits are confirmed exactly.
    maybe = _bool(pc.match_substring(response, "think>"))
    stray = np.zeros(rows, dtype=bool)
    if maybe.any():
        hits = response.filter(pa.array(maybe))
        exact = pc.or_(pc.match_substring(hits, "<think>"), pc.match_substring(hits, "</think>"))
        stray[np.flatnonzero(maybe)] = _bool(exact)
    tokens, known = _generated_tokens(batch, response, reasoning)
    feats: dict[str, np.ndarray] = {
        "empty_response": response_blank,
        "stray_think": stray,
        "truncated": declared_length,
        "finish_unknown": ~finish_known,
        "output_tokens": tokens,
        "known_tokens": known,
        "estimated_tokens": ~known,
        "stub": tokens < thresholds.stub_tokens,
    }
    if settings.max_new_tokens:
        at_limit = known & (tokens >= settings.max_new_tokens)
        feats["at_limit"] = at_limit & ~declared_length
    if thresholds.expect_thinking:
        blank = np.ones(rows, dtype=bool) if reasoning is None else _is_blank(reasoning)
        thinking = _reasoning_tokens(batch, response_blank, reasoning, settings.vocab)
        feats["empty_thinking"] = blank
        feats["thinking_tokens"] = np.where(blank, 0, thinking)
        feats["near_empty_thinking"] = ~blank & (thinking < thresholds.min_thinking_tokens)
    exact, near = completion_keys(reasoning, response)
    feats["exact_key"], feats["near_key"] = exact, near
    measured, loop, share = _loops(batch, thresholds.loop_ngram_share)
    feats["loop_measured"], feats["loop"], feats["repeated_share"] = measured, loop, share
    prompt_counts = _prompt_scripts(batch)
    if prompt_counts is not None:
        answer = pc.utf8_slice_codeunits(response, 0, ANSWER_HEAD_CHARS)
        judged, wrong = wrong_language(prompt_counts, script_counts(answer))
        feats["language_judged"], feats["wrong_language"] = judged, wrong
    return feats
