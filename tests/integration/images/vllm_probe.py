"""Run by the vLLM environment's python (not by pytest): checks the regeneration engine's calls
against the real vLLM API and prints what it found as JSON. PYTHONPATH holds trainer/ only."""

from __future__ import annotations

import dataclasses
import inspect
import json
import typing

import vllm
import vllm.config.model
from dflash_trainer.data.regenerate.engine import KNOWN_REASONS, SamplingSpec, shard_seed
from dflash_trainer.data.regenerate.vllm_engine import (
    FailedRequestError,
    VllmSettings,
    build_engine_input,
    build_llm_kwargs,
    build_sampling_kwargs,
    parse_request_output,
)
from vllm import LLM, SamplingParams
from vllm.engine.arg_utils import EngineArgs
from vllm.inputs import TokensPrompt
from vllm.inputs.engine import TokensInput, tokens_input
from vllm.outputs import CompletionOutput, RequestOutput
from vllm.sampling_params import RequestOutputKind
from vllm.v1.engine import FinishReason
from vllm.v1.engine.llm_engine import LLMEngine

report: dict[str, typing.Any] = {"vllm": vllm.__version__}

# LLM(...): every keyword is a parameter of LLM.__init__ or, through its **kwargs, EngineArgs.
init = inspect.signature(LLM.__init__).parameters
takes_kwargs = any(p.kind is p.VAR_KEYWORD for p in init.values())
engine_fields = {f.name for f in dataclasses.fields(EngineArgs)}
settings = VllmSettings(model="/models/target", max_model_len=8192, revision="0123abc")
llm_kwargs = build_llm_kwargs(settings, seed=shard_seed(7, 3))
report["llm_seed"] = llm_kwargs["seed"]
report["llm_kwargs"] = sorted(llm_kwargs)
report["unknown_llm_kwargs"] = sorted(
    k for k in llm_kwargs if k not in init and not (takes_kwargs and k in engine_fields)
)

# An S3 target streamed by the Run:ai loader: the model is the s3:// URI, the tokenizer a local
# folder; vLLM must take load_format=runai_streamer, map it to its streamer loader, and treat
# the URI as object storage (it pulls config.json itself and streams the safetensors).
from vllm.model_executor.model_loader import _LOAD_FORMAT_TO_MODEL_LOADER  # noqa: E402
from vllm.model_executor.model_loader.runai_streamer_loader import (  # noqa: E402
    RunaiModelStreamerLoader,
)
from vllm.transformers_utils.runai_utils import is_runai_obj_uri  # noqa: E402

streamed = VllmSettings(
    model="s3://bucket/dflash/ns/run/uid/model", tokenizer="/tmp/cfg", load_format="runai_streamer"
)
streamed_kwargs = build_llm_kwargs(streamed, seed=1)
report["streamed_unknown_kwargs"] = sorted(
    k for k in streamed_kwargs if k not in init and not (takes_kwargs and k in engine_fields)
)
report["streamed_loader"] = (
    _LOAD_FORMAT_TO_MODEL_LOADER.get(str(streamed_kwargs.get("load_format")))
    is RunaiModelStreamerLoader
)
report["streamed_model_is_object_storage"] = is_runai_obj_uri(streamed_kwargs["model"])
report["streamed_tokenizer"] = streamed_kwargs["tokenizer"]
pull = inspect.getsource(vllm.config.model.ModelConfig.maybe_pull_model_tokenizer_for_runai)
report["streamed_config_pulled"] = "*.json" in pull

# SamplingParams(...): built for real, and every value read back.
sampling_kwargs = build_sampling_kwargs(SamplingSpec(top_k=20, max_tokens=4096, seed=7), 151645)
params = SamplingParams(**sampling_kwargs)
report["sampling_mismatches"] = sorted(
    k for k, v in sampling_kwargs.items() if getattr(params, k) != v
)
report["sampling_seed"] = params.seed  # None: vLLM's fast (batched) sampling path
params.output_kind = RequestOutputKind.FINAL_ONLY  # what VllmEngine sets, as LLM.generate does
report["final_only"] = params.clone().output_kind == RequestOutputKind.FINAL_ONLY

# The streaming loop on the LLM's own engine (LLM.llm_engine, an LLMEngine in V1):
# add_request(request_id, prompt, params), step() -> outputs, abort_request(ids).
llm_init = inspect.getsource(LLM.__init__)
report["llm_engine_is_v1"] = "self.llm_engine = LLMEngine.from_engine_args(" in llm_init and (
    LLMEngine.__module__ == "vllm.v1.engine.llm_engine"
)
add = list(inspect.signature(LLMEngine.add_request).parameters)
report["add_request_head"] = add[1:4]
report["step_params"] = list(inspect.signature(LLMEngine.step).parameters)[1:]
report["abort_request_head"] = list(inspect.signature(LLMEngine.abort_request).parameters)[1:2]
report["engine_input_matches"] = build_engine_input([1, 2, 3]) == tokens_input([1, 2, 3])
report["engine_input_keys_known"] = set(build_engine_input([1])) <= set(
    typing.get_type_hints(TokensInput)
)
request_output_init = inspect.signature(RequestOutput.__init__).parameters
report["request_output_has"] = sorted(
    n for n in ("request_id", "outputs", "finished") if n in request_output_init
)

# generate(prompts, sampling_params, use_tqdm=...), prompts as TokensPrompt dicts.
generate = inspect.signature(LLM.generate).parameters
report["generate_missing"] = [
    n for n in ("prompts", "sampling_params", "use_tqdm") if n not in generate
]
report["tokens_prompt_has_ids"] = "prompt_token_ids" in typing.get_type_hints(TokensPrompt)


# RequestOutput / CompletionOutput: the attributes parse_request_output reads, per reason.
def output(reason: str | None) -> RequestOutput:
    completion = CompletionOutput(
        index=0,
        text="<think>\nR\n</think>\n\nA",
        token_ids=[11, 12, 151645],
        cumulative_logprob=None,
        logprobs=None,
        finish_reason=reason,
    )
    return RequestOutput(
        request_id="r-1",
        prompt=None,
        prompt_token_ids=[1, 2],
        prompt_logprobs=None,
        outputs=[completion],
        finished=True,
    )


parsed: dict[str, str] = {}
for reason in [str(r) for r in FinishReason]:
    try:
        got = parse_request_output(output(reason))
        parsed[reason] = got.finish_reason
        assert got.token_ids == [11, 12, 151645] and got.text.endswith("A")
    except FailedRequestError:
        parsed[reason] = "failed"
report["vllm_finish_reasons"] = sorted(str(r) for r in FinishReason)
report["known_reasons"] = sorted(KNOWN_REASONS)
report["parsed"] = parsed

# The likelihood scorer (data/likelihood/vllm_scorer.py): its SamplingParams, and vLLM's own
# prompt log-probability containers (a list of dicts, or FlatLogprobs) filled by vLLM's own
# helper exactly as its output processor fills them, read back by the scorer's parser.
import math  # noqa: E402

from dflash_trainer.data.likelihood.vllm_scorer import (  # noqa: E402
    VLLM_MAX_LOGPROBS,
    build_score_sampling_kwargs,
    parse_prompt_logprobs,
)
from vllm.config.model import ModelConfig  # noqa: E402
from vllm.logprobs import (  # noqa: E402
    FlatLogprobs,
    append_logprobs_for_next_position,
    create_prompt_logprobs,
)

score_kwargs = build_score_sampling_kwargs(VLLM_MAX_LOGPROBS)
score_params = SamplingParams(**score_kwargs)
report["score_mismatches"] = sorted(
    k for k, v in score_kwargs.items() if getattr(score_params, k) != v
)
# Prefix caching would hide the cached prompt's log-probabilities: vLLM skips reading it.
report["score_skips_prefix_cache"] = score_params.skip_reading_prefix_cache is True
engine_defaults = {f.name: f.default for f in dataclasses.fields(EngineArgs)}
report["engine_default_max_logprobs"] = engine_defaults["max_logprobs"]
report["logprobs_mode_default"] = str(engine_defaults["logprobs_mode"])
report["model_config_has_vocab_size"] = callable(getattr(ModelConfig, "get_vocab_size", None))

k = 3
ids = [5, 7, 9, 11]  # the scored sequence; positions 1..3 supervised
mask = [0, 1, 1, 1]
# Per position: (the sequence's own token, its rank, the top-k ids, their log-probabilities)
positions = [
    (7, 1, [7, 8, 2], [-0.1, -2.5, -3.0]),  # the most likely token
    (9, 2, [3, 9, 4], [-0.5, -1.0, -4.0]),  # inside the top k
    (11, 40, [1, 2, 6], [-0.2, -1.9, -2.2]),  # far outside it
]
expected_top = [lps for _, _, _, lps in positions]
expected_lp = [-0.1, -1.0, -7.5]
parsed_ok = {}
for flat in (False, True):
    container = create_prompt_logprobs(flat)
    for token, rank, top_ids, top_lps in positions:
        own = top_lps[top_ids.index(token)] if token in top_ids else -7.5
        append_logprobs_for_next_position(
            container, [token, *top_ids], [own, *top_lps], [None] * (k + 1), rank, k
        )
    got_ids, top, lp, ranks = parse_prompt_logprobs(container, ids, mask, k)
    parsed_ok["flat" if flat else "list"] = (
        isinstance(container, FlatLogprobs) == flat
        and got_ids.tolist() == [7, 9, 11]
        and all(
            math.isclose(a, b, abs_tol=1e-6)
            for row, want in zip(top.tolist(), expected_top, strict=True)
            for a, b in zip(row, want, strict=True)
        )
        and all(
            math.isclose(a, b, abs_tol=1e-6) for a, b in zip(lp.tolist(), expected_lp, strict=True)
        )
        and ranks.tolist() == [0, 1, 39]
    )
report["prompt_logprobs_parsed"] = parsed_ok
print(json.dumps(report))
