"""Synthetic datasets shaped like the incident's: healthy sources and broken ones whose answers
are mostly the 6-token stub `<think>\\n\\n</think>\\n\\nOK.<|im_end|>`. Numpy-built, any scale.

Used by the audit tests, the audit benchmark (914K samples, ~260M tokens) and demos.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pyarrow as pa

STUB_RESPONSE = "OK."


@dataclass(frozen=True)
class TokenLayout:
    """Token ids the generator writes; defaults are Qwen3's real ids."""

    vocab_size: int = 151643
    im_start: int = 151644
    im_end: int = 151645
    think_start: int = 151667
    think_end: int = 151668
    newline: int = 198
    double_newline: int = 271
    ok: int = 3925  # stands for "OK."; any ordinary id works
    user: int = 872
    assistant: int = 77091


@dataclass(frozen=True)
class IncidentShape:
    sources: tuple[str, ...] = ("openorca", "codealpaca", "agentic-coding", "magicoder", "sharegpt")
    broken: tuple[str, ...] = ("openorca", "codealpaca")
    stub_share: float = 0.87
    prompt_tokens: tuple[int, int] = (20, 220)
    reasoning_tokens_mean: float = 120.0
    answer_tokens_mean: float = 70.0


def _lengths(rng: np.random.Generator, mean: float, n: int) -> np.ndarray:
    # Log-normal lengths, like real generations: many short, a long tail.
    sigma = 0.6
    mu = np.log(mean) - sigma**2 / 2
    return np.maximum(8, rng.lognormal(mu, sigma, n)).astype(np.int64)


def build_incident_tokens(
    samples: int,
    seed: int = 0,
    shape: IncidentShape | None = None,
    layout: TokenLayout | None = None,
) -> pa.Table:
    """Tokenized rows (contract section 4 columns) with stubs in the broken sources."""
    shape = shape or IncidentShape()
    t = layout or TokenLayout()
    rng = np.random.default_rng(seed)
    src = rng.integers(0, len(shape.sources), samples)
    broken_src = np.isin(np.array(shape.sources)[src], shape.broken)
    stub = broken_src & (rng.random(samples) < shape.stub_share)
    prompt = rng.integers(shape.prompt_tokens[0], shape.prompt_tokens[1], samples)
    reasoning = np.where(stub, 0, _lengths(rng, shape.reasoning_tokens_mean, samples))
    answer = np.where(stub, 1, _lengths(rng, shape.answer_tokens_mean, samples))
    # prompt frame: <|im_start|> user \n P <|im_end|> \n <|im_start|> assistant \n  (8 fixed)
    head = prompt + 8
    # answer frame: <think> \n R \n </think> \n\n A <|im_end|>; a stub has `\n\n` for R+newlines
    body = np.where(stub, 6, reasoning + answer + 6)
    seq = head + body
    offsets = np.zeros(samples + 1, dtype=np.int64)
    np.cumsum(seq, out=offsets[1:])
    total = int(offsets[-1])
    ids = rng.integers(0, t.vocab_size, total, dtype=np.int32)
    mask = np.zeros(total, dtype=np.int8)
    starts = offsets[:-1]
    for k, tok in enumerate((t.im_start, t.user, t.newline)):
        ids[starts + k] = tok
    a = starts + 3 + prompt  # after the prompt text
    for k, tok in enumerate((t.im_end, t.newline, t.im_start, t.assistant, t.newline)):
        ids[a + k] = tok
    r = starts + head  # first generated token
    ids[r] = t.think_start
    healthy = ~stub
    ids[r[healthy] + 1] = t.newline
    ids[(r + 2 + reasoning)[healthy]] = t.newline
    ids[(r + 3 + reasoning)[healthy]] = t.think_end
    ids[(r + 4 + reasoning)[healthy]] = t.double_newline
    ids[r[stub] + 1] = t.double_newline
    ids[r[stub] + 2] = t.think_end
    ids[r[stub] + 3] = t.double_newline
    ids[r[stub] + 4] = t.ok
    ids[offsets[1:] - 1] = t.im_end
    # loss mask: ones from the first generated token to the end of each row
    cover = np.zeros(total + 1, dtype=np.int32)
    np.add.at(cover, r, 1)
    np.add.at(cover, offsets[1:], -1)
    mask[:] = np.cumsum(cover[:-1]) > 0
    offs = pa.array(offsets.astype(np.int32))
    names = np.array(shape.sources)
    return pa.table(
        {
            "id": pa.array([f"s{i:08d}" for i in range(samples)]),
            "source": pa.array(names[src]).dictionary_encode().cast(pa.string()),
            "input_ids": pa.ListArray.from_arrays(offs, pa.array(ids)),
            "loss_mask": pa.ListArray.from_arrays(offs, pa.array(mask)),
            "seq_len": pa.array(seq.astype(np.int32)),
        }
    )


WORDS = ("the", "a", "model", "answer", "think", "because", "code", "list", "value", "step",
         "first", "then", "search", "range", "half", "sorted", "index", "return", "loop", "check",
         "result", "input", "output", "number", "string", "function", "example", "case")  # fmt: skip


def _word_ids(rng: np.random.Generator, counts: np.ndarray, t: TokenLayout) -> np.ndarray:
    """Flat token ids of `counts[i]` words per row; word w has id WORD_ID_BASE + w."""
    return rng.integers(0, len(WORDS), int(counts.sum())) + WORD_ID_BASE


WORD_ID_BASE = 1000  # ids of the words above, clear of the layout's control ids


def _join_words(ids: np.ndarray, counts: np.ndarray) -> pa.Array:
    """Each row's words joined by spaces: pyarrow kernels, no per-row Python."""
    import pyarrow.compute as pc

    offsets = np.zeros(len(counts) + 1, dtype=np.int32)
    np.cumsum(counts, out=offsets[1:])
    words = pc.take(pa.array(WORDS), pa.array(ids - WORD_ID_BASE))
    return pc.binary_join(pa.ListArray.from_arrays(pa.array(offsets), words), " ")


def build_incident_completions(
    samples: int,
    seed: int = 0,
    shape: IncidentShape | None = None,
    layout: TokenLayout | None = None,
) -> pa.Table:
    """Regenerated-completion rows (contract section 3 columns) with stubs in the broken sources:
    the engine's `output_token_ids` (think block, reasoning, answer, end of turn; the stub is
    the incident's 6 ids) and texts made of the words those ids stand for. Numpy-built."""
    shape = shape or IncidentShape()
    t = layout or TokenLayout()
    rng = np.random.default_rng(seed)
    src = rng.integers(0, len(shape.sources), samples)
    names = np.array(shape.sources)
    stub = np.isin(names[src], shape.broken) & (rng.random(samples) < shape.stub_share)
    n_reason = np.where(stub, 0, _lengths(rng, shape.reasoning_tokens_mean, samples))
    n_answer = np.where(stub, 0, _lengths(rng, shape.answer_tokens_mean, samples))
    reason_ids = _word_ids(rng, n_reason, t)
    answer_ids = _word_ids(rng, n_answer, t)
    # <think> \n R \n </think> \n\n A <|im_end|>; the stub: <think> \n\n </think> \n\n OK <|im_end|>
    total = np.where(stub, 6, n_reason + n_answer + 6)
    offsets = np.zeros(samples + 1, dtype=np.int64)
    np.cumsum(total, out=offsets[1:])
    ids = np.zeros(int(offsets[-1]), dtype=np.int32)
    start = offsets[:-1]
    ids[start] = t.think_start
    healthy = ~stub
    h_start, r_len = start[healthy], n_reason[healthy]
    ids[h_start + 1] = t.newline
    r_pos = np.repeat(h_start + 2, r_len) + (
        np.arange(int(r_len.sum())) - np.repeat(np.cumsum(r_len) - r_len, r_len)
    )
    ids[r_pos] = reason_ids
    ids[h_start + 2 + r_len] = t.newline
    ids[h_start + 3 + r_len] = t.think_end
    ids[h_start + 4 + r_len] = t.double_newline
    a_len = n_answer[healthy]
    a_pos = np.repeat(h_start + 5 + r_len, a_len) + (
        np.arange(int(a_len.sum())) - np.repeat(np.cumsum(a_len) - a_len, a_len)
    )
    ids[a_pos] = answer_ids
    s_start = start[stub]
    for k, tok in enumerate((t.double_newline, t.think_end, t.double_newline, t.ok)):
        ids[s_start + 1 + k] = tok
    ids[offsets[1:] - 1] = t.im_end
    reasoning = _join_words(reason_ids, n_reason)
    answer = _join_words(answer_ids, n_answer)
    import pyarrow.compute as pc

    numbers = pa.array(np.arange(samples).astype(str))
    labelled = pc.binary_join_element_wise("Answer ", numbers, ": ", answer, "")
    response = pc.if_else(pa.array(stub), pa.scalar(STUB_RESPONSE), labelled)
    prompts = pc.binary_join_element_wise(
        '[{"role": "user", "content": "Question ', numbers, '"}]', ""
    )
    return pa.table(
        {
            "id": pc.binary_join_element_wise("c", numbers, ""),
            "source": pa.array(names[src]),
            "prompt": prompts,
            "response": response,
            "reasoning": reasoning,
            "output_token_ids": pa.ListArray.from_arrays(
                pa.array(offsets.astype(np.int32)), pa.array(ids)
            ),
            "num_output_tokens": pa.array(total.astype(np.int32)),
            "finish_reason": pa.array(np.full(samples, "stop")),
        }
    )
