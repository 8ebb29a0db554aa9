"""Loss-mask correctness on the real Qwen3 and Qwen3.5/3.6 chat templates."""

from __future__ import annotations

import json
from typing import Any

import pytest
from dflash_trainer.data.chat_template import ChatTemplate
from dflash_trainer.data.loss_mask import TemplateMismatchError, build_segments
from dflash_trainer.data.tokenize.core import RowTokenizer, TokenizeSettings
from transformers import PreTrainedTokenizerFast

EOT = "<|im_end|>"
USER1 = {"role": "user", "content": "Explain binary search in one sentence."}
USER2 = {"role": "user", "content": "Now give an example with numbers."}
SYSTEM = {"role": "system", "content": "You are a terse assistant."}
# A plain ChatML template that renders every turn the same way wherever it appears.
APPEND_ONLY_CHATML = (
    "{% for m in messages %}<|im_start|>{{ m.role }}\n{{ m.content }}<|im_end|>\n{% endfor %}"
    "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)


def answer(content: str, reasoning: str | None) -> dict[str, Any]:
    msg: dict[str, Any] = {"role": "assistant", "content": content}
    if reasoning is not None:
        msg["reasoning_content"] = reasoning
    return msg


def supervised_decoded(
    tokenizer: PreTrainedTokenizerFast, messages: list[dict[str, Any]], thinking: bool
) -> tuple[str, str]:
    """(decoded supervised tokens, decoded prompt tokens) after the real tokenization path."""
    row = {
        "id": "x",
        "source": "s",
        "prompt": json.dumps(messages[:-1]),
        "response": messages[-1]["content"],
        "reasoning": messages[-1].get("reasoning_content"),
    }
    settings = TokenizeSettings(max_seq_len=4096, end_of_turn=EOT, enable_thinking=thinking)
    table, counts = RowTokenizer(
        tokenizer, ChatTemplate.from_tokenizer(tokenizer), settings
    ).tokenize([row])
    assert counts.mismatched == 0, counts.mismatch_examples
    ids = table.column("input_ids")[0].as_py()
    mask = table.column("loss_mask")[0].as_py()
    sup = [t for t, m in zip(ids, mask, strict=True) if m]
    first = mask.index(1)
    assert all(mask[first:]), "the supervised tokens are one contiguous run at the end"
    return str(tokenizer.decode(sup)), str(tokenizer.decode(ids[:first]))


@pytest.mark.parametrize("arch", ["qwen3", "qwen3_5"])
@pytest.mark.parametrize("thinking", [True, False])
@pytest.mark.parametrize("generation_prompt", [True, False])
def test_our_renderer_matches_transformers_apply_chat_template(
    arch: str, thinking: bool, generation_prompt: bool, request: pytest.FixtureRequest
) -> None:
    tokenizer = request.getfixturevalue(f"{arch}_tokenizer")
    conversation = [SYSTEM, USER1, answer("Halve the range.", "Think."), USER2]
    if not generation_prompt:
        conversation = [*conversation, answer("Like 1..8.", "Numbers.")]
    ours = ChatTemplate.from_tokenizer(tokenizer).render(conversation, generation_prompt, thinking)
    theirs = tokenizer.apply_chat_template(
        conversation,
        tokenize=False,
        add_generation_prompt=generation_prompt,
        enable_thinking=thinking,
    )
    assert ours == theirs


def test_qwen3_thinking_supervises_think_block_answer_and_end_of_turn(
    qwen3_tokenizer: PreTrainedTokenizerFast,
) -> None:
    sup, prompt = supervised_decoded(
        qwen3_tokenizer,
        [USER1, answer("Halve the range each step.", "The user wants one line.")],
        True,
    )
    assert (
        sup == "<think>\nThe user wants one line.\n</think>\n\nHalve the range each step.<|im_end|>"
    )
    assert prompt.endswith("<|im_start|>assistant\n")


def test_qwen3_thinking_off_supervises_only_the_answer_after_the_prefilled_empty_block(
    qwen3_tokenizer: PreTrainedTokenizerFast,
) -> None:
    sup, prompt = supervised_decoded(
        qwen3_tokenizer, [USER1, answer("Halve the range.", None)], False
    )
    assert sup == "Halve the range.<|im_end|>"
    assert prompt.endswith("<|im_start|>assistant\n<think>\n\n</think>\n\n")


def test_qwen3_multi_turn_supervises_the_last_answer_with_earlier_reasoning_dropped_from_context(
    qwen3_tokenizer: PreTrainedTokenizerFast,
) -> None:
    messages = [
        SYSTEM,
        USER1,
        answer("Halve it.", "Old thought."),
        USER2,
        answer("1..8: 4, 6, 7.", "New."),
    ]
    sup, prompt = supervised_decoded(qwen3_tokenizer, messages, True)
    assert sup == "<think>\nNew.\n</think>\n\n1..8: 4, 6, 7.<|im_end|>"
    assert "Halve it." in prompt and "Old thought." not in prompt


def test_qwen3_5_thinking_supervises_from_reasoning_because_the_prompt_opens_the_think_block(
    qwen3_5_tokenizer: PreTrainedTokenizerFast,
) -> None:
    sup, prompt = supervised_decoded(
        qwen3_5_tokenizer, [USER1, answer("Halve it.", "Short.")], True
    )
    assert sup == "Short.\n</think>\n\nHalve it.<|im_end|>"
    assert prompt.endswith("<|im_start|>assistant\n<think>\n")


def test_qwen3_5_multi_turn_supervises_only_the_last_answer(
    qwen3_5_tokenizer: PreTrainedTokenizerFast,
) -> None:
    messages = [USER1, answer("Halve it.", "Old."), USER2, answer("Like 4, 6, 7.", "New.")]
    sup, prompt = supervised_decoded(qwen3_5_tokenizer, messages, True)
    assert sup == "New.\n</think>\n\nLike 4, 6, 7.<|im_end|>"
    assert "Old." not in prompt


def test_qwen3_5_empty_thinking_is_spliced_after_the_opened_block_with_the_templates_own_closing(
    qwen3_5_tokenizer: PreTrainedTokenizerFast,
) -> None:
    sup, prompt = supervised_decoded(qwen3_5_tokenizer, [USER1, answer("OK then.", "")], True)
    # The model saw `<think>\n` and wrote `\n</think>\n\n` itself: exactly what it generated.
    assert prompt.endswith("<|im_start|>assistant\n<think>\n")
    assert sup == "\n</think>\n\nOK then.<|im_end|>"


def test_qwen3_5_thinking_off_supervises_the_answer_after_the_prefilled_closed_block(
    qwen3_5_tokenizer: PreTrainedTokenizerFast,
) -> None:
    # The Qwen3.6 template with thinking off: every row used to fail with prompt_not_prefix.
    for reasoning in (None, ""):
        sup, prompt = supervised_decoded(
            qwen3_5_tokenizer, [USER1, answer("Halve the range.", reasoning)], False
        )
        assert prompt.endswith("<|im_start|>assistant\n<think>\n\n</think>\n\n")
        assert sup == "Halve the range.<|im_end|>"


def test_qwen3_5_thinking_off_multi_turn_keeps_the_history_and_supervises_the_last_answer(
    qwen3_5_tokenizer: PreTrainedTokenizerFast,
) -> None:
    messages = [SYSTEM, USER1, answer("Halve it.", None), USER2, answer("Like 4, 6, 7.", None)]
    sup, prompt = supervised_decoded(qwen3_5_tokenizer, messages, False)
    assert sup == "Like 4, 6, 7.<|im_end|>"
    assert "Halve it." in prompt and prompt.endswith("<think>\n\n</think>\n\n")


def test_qwen3_5_thinking_off_with_a_reasoning_trace_fails_loudly(
    qwen3_5_tokenizer: PreTrainedTokenizerFast,
) -> None:
    template = ChatTemplate.from_tokenizer(qwen3_5_tokenizer)
    with pytest.raises(TemplateMismatchError) as err:
        build_segments(template, [USER1, answer("OK.", "A thought.")], EOT, enable_thinking=False)
    assert err.value.kind == "reasoning_after_closed_think"
    assert "thinking" in str(err.value)


def test_qwen3_thinking_off_with_a_reasoning_trace_fails_loudly(
    qwen3_tokenizer: PreTrainedTokenizerFast,
) -> None:
    template = ChatTemplate.from_tokenizer(qwen3_tokenizer)
    with pytest.raises(TemplateMismatchError):
        build_segments(
            template, [USER1, answer("Halve it.", "A thought.")], EOT, enable_thinking=False
        )


@pytest.mark.parametrize("arch", ["qwen3", "qwen3_5"])
def test_supervising_all_turns_fails_loudly_when_the_template_rewrites_earlier_turns(
    arch: str, request: pytest.FixtureRequest
) -> None:
    template = ChatTemplate.from_tokenizer(request.getfixturevalue(f"{arch}_tokenizer"))
    messages = [USER1, answer("Halve it.", "Old thought."), USER2, answer("4, 6, 7.", "New.")]
    with pytest.raises(TemplateMismatchError) as err:
        build_segments(template, messages, EOT, enable_thinking=True, supervise="all")
    assert err.value.kind == "rewrites_earlier_turns"
    assert "--supervise last" in str(err.value)


def test_supervising_all_turns_masks_every_answer_on_an_append_only_template() -> None:
    template = ChatTemplate(APPEND_ONLY_CHATML)
    messages = [USER1, answer("Halve it.", None), USER2, answer("4, 6, 7.", None)]
    segments = build_segments(template, messages, EOT, supervise="all")
    assert [s.text for s in segments if s.supervised] == [
        "Halve it.<|im_end|>",
        "4, 6, 7.<|im_end|>",
    ]
    assert "".join(s.text for s in segments) == template.render(messages, False)[: -len("\n")]


def test_the_incident_stub_is_six_supervised_tokens_on_qwen3(
    qwen3_tokenizer: PreTrainedTokenizerFast,
) -> None:
    settings = TokenizeSettings(max_seq_len=4096, end_of_turn=EOT)
    tok = RowTokenizer(qwen3_tokenizer, ChatTemplate.from_tokenizer(qwen3_tokenizer), settings)
    row = {
        "id": "a",
        "source": "s",
        "prompt": json.dumps([USER1]),
        "response": "OK.",
        "reasoning": "",
    }
    table, _ = tok.tokenize([row])
    sup = [
        t
        for t, m in zip(table["input_ids"][0].as_py(), table["loss_mask"][0].as_py(), strict=True)
        if m
    ]
    assert qwen3_tokenizer.decode(sup) == "<think>\n\n</think>\n\nOK.<|im_end|>"
