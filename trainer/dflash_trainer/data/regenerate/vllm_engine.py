"""The vLLM engine (production): offline `LLM`, tensor parallel, prefix caching, streamed.

Requests go straight to the `LLM`'s own engine (`LLM.llm_engine.add_request`, under the runner's
request ids) and `LLM.llm_engine.step()` returns them as they finish: vLLM's slots refill from the
whole shard instead of waiting for the slowest answer of a batch (what `LLM.generate` does).

vLLM is imported only inside `VllmEngine` (GPU images have it; the dev environment does not).
Building its arguments and parsing its outputs are pure functions, tested without a GPU.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from dflash_trainer.data.regenerate.engine import (
    FAILED_REASONS,
    KNOWN_REASONS,
    Generation,
    SamplingSpec,
)

DEFAULT_GPU_MEMORY_UTILIZATION = 0.90


# vLLM's loader that streams safetensors from object storage straight to the GPU (vllm[runai]).
RUNAI_STREAMER = "runai_streamer"


@dataclass(frozen=True)
class WeightSource:
    """Where vLLM reads the weights: `model` an s3:// URI with `load_format` runai_streamer, or
    None (a local copy must be made first)."""

    model: str | None
    load_format: str | None
    why: str


def runai_streamer_installed() -> bool:
    """True where vLLM's Run:ai streamer can run (the regen image installs it)."""
    import importlib.util

    return importlib.util.find_spec("runai_model_streamer") is not None


def choose_weight_source(model: str, engine_kwargs: dict[str, Any], streamer: bool) -> WeightSource:
    """Stream an S3 target's safetensors to the GPU (no 54 GB copy in the pod's /tmp, no wait for
    the whole download) unless the spec chose another `load-format` or the streamer is missing."""
    if not model.startswith("s3://"):
        return WeightSource(None, None, f"from the local folder {model}")
    chosen = engine_kwargs.get("load_format")
    if chosen is not None and chosen != RUNAI_STREAMER:
        return WeightSource(None, None, f"from a local copy (engine argument load-format={chosen})")
    if not streamer:
        return WeightSource(
            None, None, "from a local copy (runai-model-streamer is not installed in this image)"
        )
    return WeightSource(
        model, RUNAI_STREAMER, f"streamed from {model} (load_format={RUNAI_STREAMER})"
    )


@dataclass(frozen=True)
class VllmSettings:
    model: str
    # A local folder with the tokenizer (and config.json); unset: `model`.
    tokenizer: str | None = None
    # vLLM's `load_format` (runai_streamer for an s3:// model); unset: vLLM's default.
    load_format: str | None = None
    tensor_parallel_size: int = 1
    max_model_len: int | None = None
    gpu_memory_utilization: float = DEFAULT_GPU_MEMORY_UTILIZATION
    # Unset: vLLM's own choice for the GPU (vllm 0.33 picks 1024 on a B200).
    max_num_seqs: int | None = None
    dtype: str = "auto"
    enforce_eager: bool = False
    revision: str | None = None
    # Further vLLM engine arguments (`--engine-arg key=value`), applied last.
    extra: dict[str, Any] = field(default_factory=dict)


def parse_engine_args(items: list[str]) -> dict[str, Any]:
    """`["max-num-seqs=256", "enforce-eager=true"]` -> `{"max_num_seqs": 256, "enforce_eager": True}`."""
    out: dict[str, Any] = {}
    for item in items:
        key, sep, raw = item.partition("=")
        key = key.strip().lstrip("-")
        if not sep or not key or not all(c.isalnum() or c in "-_" for c in key):
            raise ValueError(f"--engine-arg {item!r}: expected KEY=VALUE with a vLLM argument name")
        out[key.replace("-", "_")] = _parse_value(raw.strip())
    return out


def _parse_value(raw: str) -> Any:
    lowered = raw.lower()
    if lowered in ("true", "false"):
        return lowered == "true"
    for kind in (int, float):
        try:
            return kind(raw)
        except ValueError:
            continue
    return raw


def build_llm_kwargs(settings: VllmSettings, seed: int) -> dict[str, Any]:
    """Keyword arguments of `vllm.LLM(...)`."""
    kwargs: dict[str, Any] = {
        "model": settings.model,
        "tokenizer": settings.tokenizer or settings.model,
        "tensor_parallel_size": settings.tensor_parallel_size,
        "gpu_memory_utilization": settings.gpu_memory_utilization,
        "dtype": settings.dtype,
        "seed": seed,
        # Many prompts share a system prompt or few-shot prefix; prefix caching makes them free.
        "enable_prefix_caching": True,
        "trust_remote_code": False,
        "enforce_eager": settings.enforce_eager,
    }
    if settings.load_format:
        kwargs["load_format"] = settings.load_format
    if settings.max_num_seqs:
        kwargs["max_num_seqs"] = settings.max_num_seqs
    if settings.max_model_len:
        kwargs["max_model_len"] = settings.max_model_len
    if settings.revision:
        kwargs["revision"] = settings.revision
        kwargs["tokenizer_revision"] = settings.revision
    kwargs.update(settings.extra)
    return kwargs


def build_sampling_kwargs(sampling: SamplingSpec, eot_id: int) -> dict[str, Any]:
    """Keyword arguments of the shard's one `vllm.SamplingParams(...)`. No per-request seed: a
    seeded request takes vLLM's slow sampling path; the engine is seeded once per shard."""
    kwargs: dict[str, Any] = {
        "n": 1,
        "temperature": sampling.temperature,
        "top_p": sampling.top_p,
        "min_p": sampling.min_p,
        "max_tokens": sampling.max_tokens,
        "repetition_penalty": sampling.repetition_penalty,
        "presence_penalty": sampling.presence_penalty,
        "stop_token_ids": [eot_id],
        # `<think>`/`</think>` are not special tokens in Qwen3, so the reasoning stays in the text.
        "skip_special_tokens": True,
    }
    if sampling.top_k > 0:
        kwargs["top_k"] = sampling.top_k
    return kwargs


class FailedRequestError(RuntimeError):
    """vLLM ended a request with `abort` or `error`: the shard fails (its Job retries it)."""


def parse_request_output(output: Any) -> Generation:
    """A vLLM `RequestOutput` (first completion) as a Generation, its finish reason kept
    exactly: `stop`, `length`, `repetition`; `abort` / `error` (or an unknown or missing
    reason) fail the request instead of passing for a finished or a cut answer."""
    completion = output.outputs[0]
    reason = completion.finish_reason
    if reason in FAILED_REASONS or reason not in KNOWN_REASONS:
        raise FailedRequestError(
            f"vLLM request {getattr(output, 'request_id', '?')} ended with finish_reason "
            f"{reason!r} (accepted: {', '.join(sorted(KNOWN_REASONS - FAILED_REASONS))})"
        )
    return Generation(
        token_ids=[int(t) for t in completion.token_ids],
        text=str(completion.text),
        finish_reason=str(reason),
    )


def build_engine_input(prompt: list[int]) -> dict[str, Any]:
    """A token prompt in vLLM's engine-input form (`vllm.inputs.engine.tokens_input`): already
    tokenized, so the engine does not render it again (the runner checked its length)."""
    return {"type": "token", "prompt_token_ids": prompt}


class VllmEngine:
    name = "vllm"

    def __init__(
        self, settings: VllmSettings, sampling: SamplingSpec, eot_id: int, seed: int
    ) -> None:
        try:
            from vllm import LLM, SamplingParams
            from vllm.sampling_params import RequestOutputKind
        except ImportError:
            raise RuntimeError(
                "the vllm engine needs the vllm package (use the regen image), or pass "
                "--engine transformers"
            ) from None
        self.llm = LLM(**build_llm_kwargs(settings, seed))
        # One params object for every request (the engine clones it per request), asking for the
        # final output only, as `LLM.generate` does.
        self.params = SamplingParams(**build_sampling_kwargs(sampling, eot_id))
        self.params.output_kind = RequestOutputKind.FINAL_ONLY
        self._unfinished: set[str] = set()

    def add(self, request_id: str, prompt: list[int]) -> None:
        self.llm.llm_engine.add_request(request_id, build_engine_input(prompt), self.params)
        self._unfinished.add(request_id)

    def step(self) -> list[tuple[str, Generation]]:
        if not self._unfinished:
            return []
        finished = []
        for output in self.llm.llm_engine.step():
            if output.finished:  # RequestOutput.request_id is the id given to add_request
                self._unfinished.discard(output.request_id)
                finished.append((output.request_id, parse_request_output(output)))
        return finished

    def close(self) -> None:
        if self._unfinished:  # a failed shard: leave nothing running in the engine
            self.llm.llm_engine.abort_request(sorted(self._unfinished))
            self._unfinished.clear()
