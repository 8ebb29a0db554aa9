"""The transformers engine on the tiny target, with the transformers installed here: the target
loads in the declared dtype on the chosen device, and regeneration streams through continuous
batching. `make test-version-floor` runs these at transformers 5.17 with psutil installed, as on
the GPU machine (issue 29: the engine passed 5.24-only options there and every step after
regeneration was lost)."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import pytest
import torch
import transformers
from dflash_trainer.data.chat_template import ChatTemplate
from dflash_trainer.data.regenerate.cli import main as regenerate_main
from dflash_trainer.data.regenerate.engine import SamplingSpec, generate_all
from dflash_trainer.data.regenerate.hf_engine import TransformersEngine, is_streamable
from dflash_trainer.data.regenerate.hf_options import EngineOptionError
from dflash_trainer.data.regenerate.shard_store import ShardStore
from dflash_trainer.tiny.build import TinyTarget, build_tiny_target
from dflash_trainer.tiny.prompts import build_prompt_records
from transformers import AutoTokenizer

PROMPTS = 4
MAX_TOKENS = 8


@pytest.fixture(scope="module")
def tiny(tmp_path_factory: pytest.TempPathFactory) -> TinyTarget:
    return build_tiny_target(tmp_path_factory.mktemp("tiny") / "qwen3", arch="qwen3", seed=0)


def build_engine(target: TinyTarget, **kwargs: object) -> TransformersEngine:
    tokenizer = AutoTokenizer.from_pretrained(target.path)
    return TransformersEngine(
        str(target.path), tokenizer, SamplingSpec(temperature=0.0, max_tokens=MAX_TOKENS),
        target.eos_token_id, seed=0, context=512, batch_size=PROMPTS, threads=1,
        **kwargs,  # type: ignore[arg-type]
    )  # fmt: skip


@pytest.mark.parametrize(("declared", "expected"), [("bfloat16", torch.bfloat16), ("auto", None)])
def test_the_target_loads_in_the_declared_dtype_on_the_chosen_device(
    tiny: TinyTarget, declared: str, expected: torch.dtype | None
) -> None:
    engine = build_engine(tiny, dtype=declared, device="auto")
    want_device = "cuda" if torch.cuda.is_available() else "cpu"
    # auto: float32 on the CPU, the checkpoint's half precision (bfloat16 for float32) on a GPU
    want_dtype = expected or (torch.bfloat16 if want_device == "cuda" else torch.float32)
    parameters = list(engine.model.parameters())
    assert {p.dtype for p in parameters} == {want_dtype}
    assert {p.device.type for p in parameters} == {want_device}
    engine.close()


def test_forced_cpu_keeps_the_target_on_the_cpu(tiny: TinyTarget) -> None:
    engine = build_engine(tiny, dtype="float32", device="cpu")
    assert {p.device.type for p in engine.model.parameters()} == {"cpu"}
    engine.close()


# transformers before 5.24 sizes its CPU cache from psutil and cannot stream on the CPU without
# it (the regen image's 5.20 without vLLM's psutil, `make test-regen-pins`): the engine then
# chooses static batches itself, which the other tests cover.
CAN_STREAM_ON_CPU = is_streamable(
    SamplingSpec(temperature=0.0),
    transformers.__version__,
    importlib.util.find_spec("psutil") is not None,
    on_cpu=True,
)


@pytest.mark.skipif(not CAN_STREAM_ON_CPU, reason="this transformers cannot stream on the CPU")
def test_continuous_batching_streams_with_the_installed_transformers(tiny: TinyTarget) -> None:
    tokenizer = AutoTokenizer.from_pretrained(tiny.path)
    template = ChatTemplate.from_tokenizer(tokenizer)
    texts = [template.render(r["messages"], True) for r in build_prompt_records(PROMPTS, seed=1)]
    prompts = [tokenizer(t, add_special_tokens=False)["input_ids"] for t in texts]
    streamed = build_engine(tiny, dtype="float32", device="cpu", streaming=True)
    static = build_engine(tiny, dtype="float32", device="cpu", streaming=False)
    try:
        got = [g.token_ids for g in generate_all(streamed, prompts)]
        want = [g.token_ids for g in generate_all(static, prompts)]
    finally:
        streamed.close()
        static.close()
    assert got == want  # greedy: the same answers in either mode
    assert all(0 < len(tokens) <= MAX_TOKENS for tokens in got)


@pytest.mark.parametrize("batching", ["auto", "static"])
def test_regeneration_on_the_transformers_engine_passes(
    tiny: TinyTarget, tmp_path: Path, batching: str
) -> None:
    """The regenerate CLI end to end, as the GPU smoke's `regen-qwen3` step runs it (and its
    retry with static batches); with psutil installed (the version floor, the GPU machine) the
    engine streams."""
    prompts = tmp_path / "prompts.jsonl"
    prompts.write_text("".join(json.dumps(r) + "\n" for r in build_prompt_records(PROMPTS)))
    sources = tmp_path / "sources.yaml"
    sources.write_text(f"- {{name: smoke, uri: {prompts}, format: openai-messages}}\n")
    root = tmp_path / "run"
    code = regenerate_main([
        "--run-root", str(root), "--sources", str(sources), "--model", str(tiny.path),
        "--engine", "transformers", "--dtype", "auto", "--max-tokens", str(MAX_TOKENS),
        "--batch-size", str(PROMPTS), "--threads", "1", "--batching", batching,
        "--termination-log", str(tmp_path / "result.json"),
    ])  # fmt: skip
    result = json.loads((tmp_path / "result.json").read_text())
    assert code == 0, result
    manifest = json.loads(Path(ShardStore(str(root), 0, 1).commit_uri).read_text())
    assert manifest["samples"] == PROMPTS and manifest["outputTokens"] > 0


def test_forced_continuous_batching_refuses_sampling_it_would_drop(tiny: TinyTarget) -> None:
    tokenizer = AutoTokenizer.from_pretrained(tiny.path)
    with pytest.raises(EngineOptionError, match=r"--batching continuous.*min_p"):
        TransformersEngine(
            str(tiny.path), tokenizer, SamplingSpec(min_p=0.05), tiny.eos_token_id, seed=0,
            context=512, batch_size=2, threads=1, streaming=True, device="cpu",
        )  # fmt: skip


@pytest.mark.skipif(
    importlib.util.find_spec("psutil") is None, reason="psutil is not installed here"
)
def test_with_psutil_installed_the_cpu_engine_streams(tiny: TinyTarget) -> None:
    """transformers before 5.24 streams on the CPU only with psutil: where it is installed (the
    version floor's environment, like the GPU image), the engine must choose to stream."""
    engine = build_engine(tiny, dtype="float32", device="cpu")
    assert engine.streaming
    engine.close()
