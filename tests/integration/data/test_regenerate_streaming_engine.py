"""The transformers engine streams on CPU with the tiny target: continuous batching gives the
same greedy answers as static batches, in fewer forward passes when answer lengths vary."""

from __future__ import annotations

import pytest
from dflash_trainer.data.chat_template import ChatTemplate
from dflash_trainer.data.regenerate.engine import SamplingSpec, generate_all
from dflash_trainer.data.regenerate.hf_engine import TransformersEngine
from dflash_trainer.data.target import context_length
from dflash_trainer.tiny.build import TinyTarget
from dflash_trainer.tiny.prompts import build_prompt_records
from transformers import AutoTokenizer

SLOTS = 4


def engine(target: TinyTarget, sampling: SamplingSpec, streaming: bool) -> TransformersEngine:
    tokenizer = AutoTokenizer.from_pretrained(target.path)
    context = context_length(str(target.path)) or 4096
    return TransformersEngine(
        str(target.path), tokenizer, sampling, target.eos_token_id, seed=0, context=context,
        batch_size=SLOTS, threads=1, streaming=streaming,
    )  # fmt: skip


def prompts(target: TinyTarget, n: int) -> list[list[int]]:
    tokenizer = AutoTokenizer.from_pretrained(target.path)
    template = ChatTemplate.from_tokenizer(tokenizer)
    records = build_prompt_records(n, seed=3)
    texts = [template.render(r["messages"], True) for r in records]
    return [tokenizer(t, add_special_tokens=False)["input_ids"] for t in texts]


def run_counting(e: TransformersEngine, batch: list[list[int]]) -> tuple[list[list[int]], int]:
    calls = [0]
    handle = e.model.register_forward_hook(lambda *_: calls.__setitem__(0, calls[0] + 1))
    try:
        outputs = generate_all(e, batch)
    finally:
        handle.remove()
        e.close()
    return [o.token_ids for o in outputs], calls[0]


def test_greedy_answers_are_the_same_streamed_or_in_static_batches(
    tiny_target: TinyTarget,
) -> None:
    sampling = SamplingSpec(temperature=0.0, max_tokens=12)
    batch = prompts(tiny_target, 6)
    streamed, _ = run_counting(engine(tiny_target, sampling, streaming=True), batch)
    static, _ = run_counting(engine(tiny_target, sampling, streaming=False), batch)
    assert streamed == static
    assert all(len(t) == 12 or t[-1] == tiny_target.eos_token_id for t in streamed)


@pytest.mark.slow
def test_streaming_needs_fewer_forward_passes_when_answers_end_at_varied_lengths(
    tiny_target: TinyTarget,
) -> None:
    """At temperature 1 the random target samples its end of turn about once in its vocabulary
    size (~450 tokens): with max_tokens 400 about half the answers stop early, the others run to the cap."""
    sampling = SamplingSpec(temperature=1.0, top_p=1.0, top_k=0, max_tokens=400)
    batch = prompts(tiny_target, 24)
    e = engine(tiny_target, sampling, streaming=True)
    assert e.streaming
    streamed, streamed_passes = run_counting(e, batch)
    _, static_passes = run_counting(engine(tiny_target, sampling, streaming=False), batch)
    assert {len(t) for t in streamed} != {400}, "no answer ended early: pick another seed"
    # Each static batch runs to its longest answer; slots refill as soon as an answer ends.
    assert streamed_passes < static_passes
    assert streamed_passes >= sum(len(t) for t in streamed) / SLOTS
