"""The transformers engine: continuous batching on CPU (tests, the demo) or a single GPU.

Slow next to vLLM but exact and dependency-free; the tiny target makes it fast enough for CI.
The target loads on the GPU when there is one (`--device`), in the declared `--dtype`
(`hf_options`). Where transformers' continuous batching cannot run the sampling asked for
(`is_streamable`), or lacks an option the answers depend on, the engine falls back to static
batches of `model.generate`, each waiting for its slowest answer.
"""

from __future__ import annotations

import importlib.util
import math
import sys
from collections import deque
from typing import Any

import torch

from dflash_trainer.data.regenerate.engine import (
    FINISH_LENGTH,
    FINISH_STOP,
    Generation,
    SamplingSpec,
)
from dflash_trainer.data.regenerate.hf_options import (
    REQUIRED_OPTIONS,
    EngineOptionError,
    accepted_options,
    build_batching_options,
    resolve_device,
    resolve_dtype,
)

# Measured: transformers 5.20.2 sizes the CPU cache of continuous batching from psutil and refuses
# to start without it ("available memory 0"); 5.24.0 runs without it. vLLM installs psutil, so the
# regen image streams with either version.
CPU_STREAMING_WITHOUT_PSUTIL = (5, 24)
# Tokens per cache page on CPU (transformers' default of 256 wastes most of a page per request on
# short answers); the GPU keeps transformers' own sizing from free memory.
CPU_PAGE_SIZE = 64
# Tokens per forward pass (a longer prefill is split): each step's tensors are sized to it, so on
# CPU a small value is faster (measured on the tiny target: 1024 ran 1.8x slower than 256).
CPU_MAX_BATCH_TOKENS = 256
# transformers' continuous batching pages the caches of attention layers only: it refuses a model
# with Gated DeltaNet (`linear_attention`) layers, so hybrid targets (qwen3_5) use static batches.
PAGED_LAYER_TYPES = frozenset({"full_attention", "sliding_attention"})
# How long `step` waits for a finished request before it checks the batching thread is alive.
RESULT_WAIT_SECONDS = 1.0


def is_streamable(sampling: SamplingSpec, version: str, has_psutil: bool, on_cpu: bool) -> bool:
    """Whether transformers' continuous batching can stream this sampling: it keeps only
    temperature, top-k and top-p (it drops min-p and repetition penalty: their answers would
    change silently), and on CPU it needs psutil before transformers 5.24."""
    if sampling.min_p > 0 or sampling.repetition_penalty != 1.0:
        return False
    major, minor = (int(part) for part in version.split(".")[:2])
    return not on_cpu or has_psutil or (major, minor) >= CPU_STREAMING_WITHOUT_PSUTIL


def has_paged_layers_only(config: Any) -> bool:
    """Whether continuous batching can page every layer's cache (no linear-attention layers)."""
    return set(getattr(config, "layer_types", None) or ()) <= PAGED_LAYER_TYPES


def split_answer(tokens: list[int], eot_id: int) -> tuple[list[int], str]:
    """(tokens up to and including the end of turn, finish reason) of generated tokens."""
    if eot_id in tokens:
        return tokens[: tokens.index(eot_id) + 1], FINISH_STOP
    return tokens, FINISH_LENGTH


class TransformersEngine:
    name = "transformers"

    def __init__(
        self,
        model_dir: str,
        tokenizer: Any,
        sampling: SamplingSpec,
        eot_id: int,
        seed: int,
        context: int,
        batch_size: int = 16,
        threads: int | None = None,
        revision: str | None = None,
        streaming: bool | None = None,
        dtype: str = "auto",
        device: str = "auto",
    ) -> None:
        import transformers
        from transformers import AutoConfig, AutoModelForCausalLM

        if threads:
            torch.set_num_threads(threads)
        torch.manual_seed(seed)  # one seed per shard (engine.shard_seed)
        self.device = torch.device(resolve_device(device, torch.cuda.is_available()))
        config = AutoConfig.from_pretrained(model_dir, revision=revision)
        stored = getattr(config, "dtype", None) or getattr(config, "torch_dtype", None)
        self.dtype = getattr(torch, resolve_dtype(dtype, self.device.type, str(stored or "")))
        model: Any = AutoModelForCausalLM.from_pretrained(
            model_dir, dtype=self.dtype, revision=revision
        )
        self.model = model.to(self.device)
        self.model.train(False)
        self.tokenizer = tokenizer
        self.sampling = sampling
        self.eot_id = eot_id
        self.seed = seed
        self.context = context
        self.batch_size = batch_size
        pad = tokenizer.pad_token_id
        self.pad_id = int(pad) if pad is not None else eot_id
        self.on_cpu = self.device.type == "cpu"
        has_psutil = importlib.util.find_spec("psutil") is not None
        self._batching, dropped = self._batching_options()
        if streaming is None:
            streaming = (
                is_streamable(sampling, transformers.__version__, has_psutil, self.on_cpu)
                and has_paged_layers_only(self.model.config)
                and not REQUIRED_OPTIONS.intersection(dropped)
            )
        elif streaming and not is_streamable(sampling, "99.0", True, on_cpu=False):
            raise EngineOptionError(
                "--batching continuous: transformers' continuous batching drops min_p and the "
                "repetition penalty this sampling sets; use --batching static or auto"
            )
        if streaming and dropped:
            print(
                f"transformers {transformers.__version__} has no continuous-batching option "
                f"{', '.join(dropped)}: left out",
                file=sys.stderr,
                flush=True,
            )
        self.streaming = streaming
        self._queue: deque[tuple[str, list[int]]] = deque()  # static batches only
        self._unfinished: set[str] = set()
        self._manager: Any = None

    def add(self, request_id: str, prompt: list[int]) -> None:
        self._unfinished.add(request_id)
        if not self.streaming:
            self._queue.append((request_id, prompt))
            return
        manager = self._manager or self._start_manager()
        manager.add_request(
            prompt,
            request_id=request_id,
            max_new_tokens=self.sampling.max_tokens,
            eos_token_id=self.eot_id,
        )

    def step(self) -> list[tuple[str, Generation]]:
        if not self._unfinished:
            return []
        if not self.streaming:
            batch = [self._queue.popleft() for _ in range(min(self.batch_size, len(self._queue)))]
            outputs = self._generate_batch([prompt for _, prompt in batch])
            self._unfinished.difference_update(rid for rid, _ in batch)
            return [(rid, out) for (rid, _), out in zip(batch, outputs, strict=True)]
        finished = []
        result = self._manager.get_result(timeout=RESULT_WAIT_SECONDS)
        while result is not None:
            if result.is_finished():
                finished.append((result.request_id, self._parse(result)))
                self._unfinished.discard(result.request_id)
            result = self._manager.get_result(timeout=0)
        if not finished and not self._manager.is_running():
            raise RuntimeError(
                f"transformers continuous batching stopped with {len(self._unfinished)} "
                "requests unfinished (see the log above for its error)"
            )
        return finished

    def close(self) -> None:
        if self._manager is not None:
            self._manager.stop(block=True)
            self._manager = None

    def _parse(self, result: Any) -> Generation:
        if result.error:
            raise RuntimeError(f"transformers request {result.request_id} failed: {result.error}")
        tokens, finish = split_answer([int(t) for t in result.generated_tokens], self.eot_id)
        return self._generation(tokens, finish)

    def _generation(self, tokens: list[int], finish: str) -> Generation:
        body = tokens[:-1] if finish == FINISH_STOP else tokens
        text = self.tokenizer.decode(body, skip_special_tokens=True)
        return Generation(token_ids=tokens, text=text, finish_reason=finish)

    def _generation_kwargs(self) -> dict[str, Any]:
        s = self.sampling
        sample = s.temperature > 0
        kwargs: dict[str, Any] = {
            "max_new_tokens": s.max_tokens,
            "do_sample": sample,
            "eos_token_id": self.eot_id,
            "pad_token_id": self.pad_id,
        }
        if sample:
            kwargs |= {"temperature": s.temperature, "top_p": s.top_p, "top_k": s.top_k or None}
            if s.min_p > 0:
                kwargs["min_p"] = s.min_p
        if s.repetition_penalty != 1.0:
            kwargs["repetition_penalty"] = s.repetition_penalty
        return kwargs

    def _batching_options(self) -> tuple[dict[str, Any], list[str]]:
        """The ContinuousBatchingConfig arguments, under the installed transformers' names."""
        from transformers.generation.configuration_utils import ContinuousBatchingConfig

        slots: dict[str, Any] = {"max_requests_per_batch": self.batch_size, "seed": self.seed}
        if self.on_cpu:  # size the cache for a full batch of the longest requests
            pages = self.batch_size * math.ceil(self.context / CPU_PAGE_SIZE)
            slots |= {
                "page_size": CPU_PAGE_SIZE,
                "num_blocks": pages,
                "max_batch_tokens": CPU_MAX_BATCH_TOKENS,
                "allow_block_sharing": False,
                "use_cuda_graph": False,
                "use_async_batching": False,
                "auto_switch_to_flash": False,
            }
        return build_batching_options(slots, accepted_options(ContinuousBatchingConfig))

    def _start_manager(self) -> Any:
        from transformers import GenerationConfig
        from transformers.generation.configuration_utils import ContinuousBatchingConfig

        build_config: Any = GenerationConfig  # untyped in transformers
        config = build_config(**self._generation_kwargs())
        self._manager = self.model.init_continuous_batching(
            generation_config=config,
            continuous_batching_config=ContinuousBatchingConfig(**self._batching),
        )
        self._manager.start()
        return self._manager

    def _generate_batch(self, prompts: list[list[int]]) -> list[Generation]:
        width = max(len(p) for p in prompts)
        input_ids = torch.full((len(prompts), width), self.pad_id, dtype=torch.long)
        attention = torch.zeros((len(prompts), width), dtype=torch.long)
        for row, prompt in enumerate(prompts):  # left padding: generation continues at the end
            input_ids[row, width - len(prompt) :] = torch.tensor(prompt)
            attention[row, width - len(prompt) :] = 1
        input_ids, attention = input_ids.to(self.device), attention.to(self.device)
        with torch.no_grad():
            generated = self.model.generate(
                input_ids=input_ids, attention_mask=attention, **self._generation_kwargs()
            )
        return [
            self._generation(*split_answer(row, self.eot_id))
            for row in generated[:, width:].tolist()
        ]
