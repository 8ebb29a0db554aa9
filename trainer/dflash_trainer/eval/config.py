"""The evaluation's configuration (`eval.yaml`): pydantic, unknown keys rejected, no torch.

Shares the target section with `train.yaml`; documented in `docs/trainer-config.md`.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Literal

from pydantic import Field, ValidationError, model_validator

from dflash_trainer.storage import join_uri
from dflash_trainer.train.config import (
    ConfigError,
    Section,
    TargetSection,
    apply_overrides,
    format_validation_error,
    load_yaml_mapping,
    resolve_pvc_uris,
)

EVAL_URI_KEYS = [
    ("run_root",),
    ("target", "path"),
    ("drafter_uri",),
    ("prompts", "tokenized_uri"),
    ("prompts", "source", "uri"),
    ("output_uri",),
]


class RandomPromptsSection(Section):
    """Random-token prompts (for self-distilled debug drafters); use a seed training did not."""

    prompt_tokens: Annotated[int, Field(ge=1)] = 16
    seed: int = 1


class PromptSourceSection(Section):
    """Prompts read from a dataset (spec.evaluation.prompts), chat-templated like training."""

    uri: str
    format: Literal["sharegpt", "openai-messages", "alpaca", "prompt-only"]
    enable_thinking: bool = True
    chat_template: str | None = None  # a Jinja file replacing the tokenizer's template


class PromptsSection(Section):
    tokenized_uri: str | None = None
    random: RandomPromptsSection | None = None
    source: PromptSourceSection | None = None
    holdout_fraction: Annotated[float, Field(ge=0.0, lt=1.0)] = 0.0
    num_prompts: Annotated[int, Field(ge=1)] = 32
    max_prompt_tokens: Annotated[int, Field(ge=1)] = 2048

    @model_validator(mode="after")
    def _one_source(self) -> PromptsSection:
        chosen = [k for k in ("tokenized_uri", "random", "source") if getattr(self, k)]
        if len(chosen) > 1:
            raise ValueError(
                "set at most one of prompts.tokenized_uri, prompts.random and prompts.source "
                f"(got {', '.join(chosen)})"
            )
        return self


class VllmSection(Section):
    tensor_parallel_size: Annotated[int, Field(ge=1)] = 1
    gpu_memory_utilization: Annotated[float, Field(gt=0.0, le=1.0)] = 0.85
    max_model_len: Annotated[int, Field(ge=64)] = 8192


class EvalConfig(Section):
    run_root: str
    target: TargetSection
    drafter_uri: str | None = None
    prompts: PromptsSection = PromptsSection()
    max_new_tokens: Annotated[int, Field(ge=2)] = 128
    # 0: greedy; above: speculative sampling at this temperature (the target's distribution).
    temperature: Annotated[float, Field(ge=0.0, le=2.0)] = 0.0
    seed: int = 0
    stop_token_ids: list[int] = Field(default_factory=list)
    engine: Literal["builtin", "vllm"] = "builtin"
    check_greedy: bool = True
    require_greedy_match: bool = False
    update_model_card: bool = True
    output_uri: str | None = None
    vllm: VllmSection = VllmSection()

    @property
    def drafter(self) -> str:
        return self.drafter_uri or join_uri(self.run_root, "final")

    @property
    def output(self) -> str:
        return self.output_uri or join_uri(self.run_root, "eval", "acceptance.json")

    def tokenized(self) -> str:
        return self.prompts.tokenized_uri or join_uri(self.run_root, "tokenized")


def load_eval_config(
    path: Path, overrides: list[str] | None = None, run_root: str | None = None
) -> EvalConfig:
    data = apply_overrides(load_yaml_mapping(path), overrides or [])
    if run_root:
        data["run_root"] = run_root
    data = resolve_pvc_uris(data, EVAL_URI_KEYS)
    try:
        return EvalConfig.model_validate(data)
    except ValidationError as exc:
        raise ConfigError(format_validation_error(str(path), exc)) from None
