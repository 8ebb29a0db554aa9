"""Evaluation prompts from a dataset (spec.evaluation.prompts): read like a training source,
chat-templated with the target's tokenizer and thinking setting, and bounded in count and
length; a bad source is a DataError naming it."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from dflash_trainer.eval.config import EvalConfig
from dflash_trainer.eval.evaluate import select_prompts
from dflash_trainer.tiny.build import build_tiny_target
from dflash_trainer.train.batches import DataError
from transformers import AutoTokenizer


@pytest.fixture(scope="module")
def tiny_model(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("tiny-target")
    build_tiny_target(out)
    return out


def write_prompts(path: Path, questions: list[str]) -> Path:
    rows = [{"messages": [{"role": "user", "content": q}]} for q in questions]
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def config(model: Path, uri: Path, src: dict[str, Any] | None = None, **prompts: Any) -> EvalConfig:
    return EvalConfig.model_validate(
        {
            "run_root": str(model.parent),
            "target": {"path": str(model)},
            "prompts": {
                "source": {"uri": str(uri), "format": "openai-messages", **(src or {})},
                **prompts,
            },
        }
    )


def test_source_prompts_are_chat_templated_with_the_generation_prompt_and_capped(
    tiny_model: Path, tmp_path: Path
) -> None:
    source = write_prompts(tmp_path / "eval.jsonl", [f"question number {i}?" for i in range(10)])
    cfg = config(tiny_model, source, num_prompts=3, src={"enable_thinking": False})

    prompts = select_prompts(cfg, vocab_size=1000, mask_token_id=999)

    tokenizer = AutoTokenizer.from_pretrained(tiny_model)
    texts = [tokenizer.decode(p) for p in prompts]
    assert len(prompts) == 3
    assert "question number 0?" in texts[0] and "question number 2?" in texts[2]
    expected = tokenizer.apply_chat_template(
        [{"role": "user", "content": "question number 0?"}],
        add_generation_prompt=True,
        enable_thinking=False,
        tokenize=False,
    )
    assert texts[0] == expected


def test_prompts_longer_than_the_limit_are_skipped(tiny_model: Path, tmp_path: Path) -> None:
    source = write_prompts(tmp_path / "eval.jsonl", ["word " * 400, "short?"])
    cfg = config(tiny_model, source, num_prompts=5, max_prompt_tokens=64)

    prompts = select_prompts(cfg, vocab_size=1000, mask_token_id=999)

    assert len(prompts) == 1 and len(prompts[0]) <= 64


def test_a_missing_prompts_source_is_a_data_error_naming_it(
    tiny_model: Path, tmp_path: Path
) -> None:
    missing = tmp_path / "nothing.jsonl"
    with pytest.raises(DataError, match=r"nothing\.jsonl"):
        select_prompts(config(tiny_model, missing), vocab_size=1000, mask_token_id=999)


def test_only_one_prompt_origin_may_be_set() -> None:
    with pytest.raises(ValueError, match="at most one of"):
        EvalConfig.model_validate(
            {
                "run_root": "/r",
                "target": {"path": "/m"},
                "prompts": {
                    "random": {"prompt_tokens": 4},
                    "source": {"uri": "/p.jsonl", "format": "prompt-only"},
                },
            }
        )
