"""The regeneration engine against the real `vllm` wheel of the regen image's version, imported
on CPU in its own cached environment (dflash_dev.vllm_env): `LLM(...)` arguments,
`SamplingParams` fields, the `generate` input form, and `RequestOutput` / `CompletionOutput`
with every finish reason vLLM has."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest
from dflash_dev import vllm_env
from dflash_dev.paths import REPO_ROOT
from dflash_dev.regen_requirements import vllm_version

PROBE = Path(__file__).with_name("vllm_probe.py")


@pytest.fixture(scope="module")
def report() -> dict[str, object]:
    python = vllm_env.ensure()
    env = {**os.environ, "PYTHONPATH": str(REPO_ROOT / "trainer"), "VLLM_LOGGING_LEVEL": "ERROR"}
    result = subprocess.run(
        [str(python), str(PROBE)], capture_output=True, text=True, check=False, env=env,
        timeout=600,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr[-3000:]
    return dict(json.loads(result.stdout.strip().splitlines()[-1]))


def test_it_is_the_regen_images_vllm(report: dict[str, object]) -> None:
    assert report["vllm"] == vllm_version()


def test_every_llm_argument_is_one_vllm_accepts(report: dict[str, object]) -> None:
    assert report["unknown_llm_kwargs"] == []
    assert {"model", "tensor_parallel_size", "seed", "enable_prefix_caching"} <= set(
        report["llm_kwargs"]  # type: ignore[arg-type]
    )


def test_an_s3_target_is_streamed_by_the_runai_loader_of_this_vllm(
    report: dict[str, object],
) -> None:
    assert report["streamed_unknown_kwargs"] == []
    assert report["streamed_loader"] is True
    assert report["streamed_model_is_object_storage"] is True
    assert report["streamed_tokenizer"] == "/tmp/cfg"  # the local copy of tokenizer + config
    assert report["streamed_config_pulled"] is True


def test_sampling_params_take_every_field_as_given(report: dict[str, object]) -> None:
    assert report["sampling_mismatches"] == []


def test_requests_carry_no_seed_and_the_engine_gets_the_shards(report: dict[str, object]) -> None:
    assert report["sampling_seed"] is None  # a seeded request takes vLLM's slow sampling path
    assert report["llm_seed"] == 7 + 3  # shard_seed(7, shard 3)


def test_the_streaming_loop_uses_the_llms_own_v1_engine(report: dict[str, object]) -> None:
    assert report["llm_engine_is_v1"] is True
    assert report["add_request_head"] == ["request_id", "prompt", "params"]
    assert report["step_params"] == [] and report["abort_request_head"] == ["request_ids"]
    assert report["final_only"] is True
    assert report["engine_input_matches"] is True and report["engine_input_keys_known"] is True
    assert report["request_output_has"] == ["finished", "outputs", "request_id"]


def test_generate_takes_token_prompts_and_sampling_params(report: dict[str, object]) -> None:
    assert report["generate_missing"] == []
    assert report["tokens_prompt_has_ids"] is True


def test_every_vllm_finish_reason_is_mapped_exactly(report: dict[str, object]) -> None:
    assert report["vllm_finish_reasons"] == report["known_reasons"]
    assert report["parsed"] == {
        "stop": "stop", "length": "length", "repetition": "repetition",
        "abort": "failed", "error": "failed",
    }  # fmt: skip


def test_the_likelihood_scorer_asks_for_raw_prompt_logprobs_this_vllm_can_give(
    report: dict[str, object],
) -> None:
    assert report["score_mismatches"] == []
    assert report["score_skips_prefix_cache"] is True  # every position's log-probability
    assert report["engine_default_max_logprobs"] == 20  # VLLM_MAX_LOGPROBS, no engine change
    assert report["logprobs_mode_default"] == "raw_logprobs"  # before temperature and top-p
    assert report["model_config_has_vocab_size"] is True


def test_the_scorer_reads_vllms_own_prompt_logprob_containers(report: dict[str, object]) -> None:
    # Filled by vLLM's own helper, as its output processor fills them: both container kinds.
    assert report["prompt_logprobs_parsed"] == {"list": True, "flat": True}
