"""Engine code paths that need no GPU: vLLM arguments and output parsing, thinking parsing, shards."""

from __future__ import annotations

from dataclasses import dataclass, field

import pytest
from dflash_trainer.data.regenerate.engine import (
    SamplingSpec,
    is_prompt_opening_think,
    shard_seed,
    split_generation,
)
from dflash_trainer.data.regenerate.hf_engine import (
    has_paged_layers_only,
    is_streamable,
    split_answer,
)
from dflash_trainer.data.regenerate.shard_store import base_id, shard_of
from dflash_trainer.data.regenerate.vllm_engine import (
    FailedRequestError,
    VllmEngine,
    VllmSettings,
    build_llm_kwargs,
    build_sampling_kwargs,
    choose_weight_source,
    parse_request_output,
)


@dataclass
class FakeCompletion:  # the attributes of vllm.outputs.CompletionOutput we read
    text: str
    token_ids: list[int]
    finish_reason: str | None


@dataclass
class FakeRequestOutput:  # the attributes of vllm.outputs.RequestOutput we read
    outputs: list[FakeCompletion] = field(default_factory=list)


def test_llm_arguments_enable_prefix_caching_and_pass_parallelism_and_context() -> None:
    kwargs = build_llm_kwargs(
        VllmSettings(model="/m", tensor_parallel_size=8, max_model_len=40960), seed=3
    )
    assert kwargs["enable_prefix_caching"] is True
    assert (kwargs["tensor_parallel_size"], kwargs["max_model_len"], kwargs["seed"]) == (
        8,
        40960,
        3,
    )
    assert kwargs["tokenizer"] == "/m" and kwargs["trust_remote_code"] is False
    assert "max_model_len" not in build_llm_kwargs(VllmSettings(model="/m"), seed=0)


def test_an_s3_target_streams_to_vllm_unless_the_spec_or_the_image_says_otherwise() -> None:
    uri = "s3://b/dflash/ns/run/uid/model"
    streamed = choose_weight_source(uri, {}, streamer=True)
    assert (streamed.model, streamed.load_format) == (uri, "runai_streamer")
    kwargs = build_llm_kwargs(
        VllmSettings(model=uri, tokenizer="/cfg", load_format=streamed.load_format), seed=0
    )
    assert (kwargs["model"], kwargs["tokenizer"], kwargs["load_format"]) == (
        uri,
        "/cfg",
        "runai_streamer",
    )
    # A local copy: without the streamer, with another load-format, or for a local folder.
    assert choose_weight_source(uri, {}, streamer=False).model is None
    assert "not installed" in choose_weight_source(uri, {}, streamer=False).why
    chosen = choose_weight_source(uri, {"load_format": "safetensors"}, streamer=True)
    assert chosen.model is None and "load-format=safetensors" in chosen.why
    assert choose_weight_source("/models/t", {}, streamer=True).load_format is None
    assert "load_format" not in build_llm_kwargs(VllmSettings(model="/m"), seed=0)


def test_sampling_arguments_carry_the_spec_a_stop_id_and_no_per_request_seed() -> None:
    spec = SamplingSpec(temperature=0.6, top_p=0.95, top_k=20, max_tokens=32768, seed=7)
    a = build_sampling_kwargs(spec, eot_id=151645)
    assert (a["temperature"], a["top_p"], a["top_k"], a["max_tokens"]) == (0.6, 0.95, 20, 32768)
    assert a["stop_token_ids"] == [151645] and a["skip_special_tokens"] is True
    assert "seed" not in a  # a seeded request takes vLLM's slow sampling path
    assert "top_k" not in build_sampling_kwargs(SamplingSpec(top_k=0), 1)


def test_the_engine_is_seeded_once_per_shard_from_the_runs_seed() -> None:
    assert [shard_seed(7, shard) for shard in range(3)] == [7, 8, 9]
    kwargs = build_llm_kwargs(VllmSettings(model="/m"), seed=shard_seed(7, 2))
    assert kwargs["seed"] == 9


@pytest.mark.parametrize(
    ("reason", "expected"),
    [("stop", "stop"), ("length", "length"), ("repetition", "repetition")],
)
def test_request_outputs_keep_the_engines_exact_finish_reason(reason: str, expected: str) -> None:
    out = parse_request_output(
        FakeRequestOutput([FakeCompletion("<think>\nR\n</think>\n\nA", [1, 2, 3], reason)])
    )
    assert (out.text, out.token_ids, out.finish_reason) == (
        "<think>\nR\n</think>\n\nA",
        [1, 2, 3],
        expected,
    )


@pytest.mark.parametrize("reason", ["abort", "error", None, "cancelled"])
def test_a_failed_or_unknown_finish_reason_fails_the_request_never_passes_for_a_cut(
    reason: str | None,
) -> None:
    with pytest.raises(FailedRequestError, match=f"finish_reason {reason!r}"):
        parse_request_output(FakeRequestOutput([FakeCompletion("A", [1], reason)]))


@pytest.mark.parametrize(
    ("text", "thinking", "opens", "expected"),
    [
        ("<think>\nWhy.\n</think>\n\nBecause.", True, False, ("Why.", "Because.")),  # Qwen3
        (
            "Why.\n</think>\n\nBecause.",
            True,
            True,
            ("Why.", "Because."),
        ),  # Qwen3.5: prompt opened it
        ("<think>\n\n</think>\n\nOK.", True, False, ("", "OK.")),  # the incident's empty thinking
        ("<think>\nStill thinking", True, False, ("Still thinking", "")),  # cut by max_tokens
        ("Still thinking", True, True, ("Still thinking", "")),
        ("Because.", False, False, (None, "Because.")),  # thinking off
    ],
)
def test_generated_text_splits_into_reasoning_and_response(
    text: str, thinking: bool, opens: bool, expected: tuple[str | None, str]
) -> None:
    assert split_generation(text, thinking, opens) == expected


def test_a_prompt_that_ends_inside_a_think_block_is_recognised() -> None:
    assert is_prompt_opening_think("<|im_start|>assistant\n<think>\n")
    assert not is_prompt_opening_think("<|im_start|>assistant\n<think>\n\n</think>\n\n")


def test_shards_are_stable_and_cover_all_samples_evenly() -> None:
    ids = [f"{i:016x}" for i in range(4000)]
    shards = [shard_of(i, 8) for i in ids]
    assert shards == [shard_of(i, 8) for i in ids]
    counts = [shards.count(s) for s in range(8)]
    assert min(counts) > 400 and max(counts) < 600
    assert base_id("abc.t2") == "abc" and base_id("abc-1") == "abc-1"


@pytest.mark.parametrize(
    ("sampling", "version", "psutil", "cpu", "expected"),
    [
        (SamplingSpec(), "5.24.0", False, True, True),
        (SamplingSpec(), "5.20.2", False, True, False),  # refuses to size its CPU cache
        (SamplingSpec(), "5.20.2", True, True, True),  # the regen image: vLLM brings psutil
        (SamplingSpec(), "5.20.2", False, False, True),
        (SamplingSpec(min_p=0.05), "5.24.0", True, True, False),  # dropped by continuous batching
        (SamplingSpec(repetition_penalty=1.1), "5.24.0", True, False, False),
    ],
)
def test_transformers_streams_only_where_continuous_batching_keeps_the_sampling(
    sampling: SamplingSpec, version: str, psutil: bool, cpu: bool, expected: bool
) -> None:
    assert is_streamable(sampling, version, psutil, cpu) is expected


@pytest.mark.parametrize(
    ("layer_types", "expected"),
    [
        (None, True),
        (["full_attention", "sliding_attention"], True),
        (["linear_attention", "linear_attention", "linear_attention", "full_attention"], False),
    ],
)
def test_gated_deltanet_targets_use_static_batches_not_continuous_batching(
    layer_types: list[str] | None, expected: bool
) -> None:
    @dataclass
    class Config:
        layer_types: list[str] | None

    assert has_paged_layers_only(Config(layer_types)) is expected


def test_generated_tokens_end_at_the_first_end_of_turn_or_are_cut() -> None:
    assert split_answer([5, 6, 2, 0, 0], eot_id=2) == ([5, 6, 2], "stop")
    assert split_answer([5, 6, 7], eot_id=2) == ([5, 6, 7], "length")


@dataclass
class FakeStreamingOutput:  # a RequestOutput as LLMEngine.step() returns it
    request_id: str
    outputs: list[FakeCompletion]
    finished: bool = True


@dataclass
class FakeLLMEngine:  # the LLMEngine calls VllmEngine makes
    added: list[tuple[str, dict[str, object]]] = field(default_factory=list)
    steps: list[list[FakeStreamingOutput]] = field(default_factory=list)
    aborted: list[str] = field(default_factory=list)

    def add_request(self, request_id: str, prompt: dict[str, object], params: object) -> str:
        self.added.append((request_id, prompt))
        return f"{request_id}-internal"

    def step(self) -> list[FakeStreamingOutput]:
        return self.steps.pop(0) if self.steps else []

    def abort_request(self, request_ids: list[str], internal: bool = False) -> None:
        self.aborted += request_ids


def fake_vllm_engine(llm_engine: FakeLLMEngine) -> VllmEngine:
    engine = VllmEngine.__new__(VllmEngine)  # skips LLM(...): no vllm in this environment
    engine.llm = type("FakeLLM", (), {"llm_engine": llm_engine})()
    engine.params = object()
    engine._unfinished = set()
    return engine


def test_vllm_requests_come_back_under_the_runners_ids_as_they_finish() -> None:
    done = [FakeCompletion("A", [1, 2], "stop")]
    llm_engine = FakeLLMEngine(
        steps=[
            [FakeStreamingOutput("b", done)],
            [FakeStreamingOutput("a", [], finished=False), FakeStreamingOutput("a", done)],
        ]
    )
    engine = fake_vllm_engine(llm_engine)
    engine.add("a", [5, 6])
    engine.add("b", [7])
    assert llm_engine.added[0] == ("a", {"type": "token", "prompt_token_ids": [5, 6]})
    assert [rid for rid, _ in engine.step()] == ["b"]
    assert [(rid, g.finish_reason) for rid, g in engine.step()] == [("a", "stop")]
    assert engine.step() == [] and llm_engine.steps == []  # nothing unfinished: no step
    engine.close()
    assert llm_engine.aborted == []


def test_closing_a_failed_vllm_shard_aborts_its_unfinished_requests() -> None:
    llm_engine = FakeLLMEngine()
    engine = fake_vllm_engine(llm_engine)
    engine.add("a", [1])
    engine.add("b", [2])
    engine.close()
    assert llm_engine.aborted == ["a", "b"]
