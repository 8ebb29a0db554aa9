"""Measure an exported drafter's acceptance on held-out prompts and write `eval/acceptance.json`.

Two engines: `builtin` (our greedy speculative loop, any device, also checks the output
against plain greedy decoding token for token) and `vllm` (GPU; vLLM with
`method: dflash`, reading its spec-decode counters). Both report pooled acceptance.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch

from dflash_trainer.eval.config import EvalConfig
from dflash_trainer.eval.greedy import build_random_prompts, greedy_generate
from dflash_trainer.eval.speculative import AcceptanceStats, speculative_generate
from dflash_trainer.model.export import architecture_of, load_exported_drafter
from dflash_trainer.model.taps import TargetTaps
from dflash_trainer.model.target import TargetParts, fetch_model_folder, load_target
from dflash_trainer.train.batches import DataError, read_tokenized, split_holdout

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class EvalReport:
    acceptance_length: float
    per_position: list[float]
    prompts: int
    rounds: int
    generated_tokens: int
    greedy_mismatches: int | None
    engine: str
    # The drafter's architecture (export.py): acceptance is DFlash's or DFlash2's walk.
    architecture: str = "DFlashDraftModel"

    def to_json(self, cfg: EvalConfig) -> dict[str, Any]:
        return {
            "acceptanceLength": self.acceptance_length,
            "acceptanceLengthKind": "pooled: generated tokens / verification rounds",
            "perPositionAcceptance": self.per_position,
            "prompts": self.prompts,
            "rounds": self.rounds,
            "generatedTokens": self.generated_tokens,
            "greedyMismatches": self.greedy_mismatches,
            "engine": self.engine,
            "architecture": self.architecture,
            "drafterUri": cfg.drafter,
            "target": cfg.target.name,
            "maxNewTokens": cfg.max_new_tokens,
            "temperature": cfg.temperature,
        }


def select_prompts(cfg: EvalConfig, vocab_size: int, mask_token_id: int) -> list[list[int]]:
    """Held-out prompts: random tokens, or the un-supervised prefix of held-out samples."""
    section = cfg.prompts
    if section.random is not None:
        prompts = build_random_prompts(
            section.num_prompts,
            section.random.prompt_tokens,
            vocab_size,
            section.random.seed,
            avoid=mask_token_id,
        )
        return [p.tolist() for p in prompts]
    if section.source is not None:
        return read_source_prompts(cfg)
    rows = read_tokenized(cfg.tokenized())
    if section.holdout_fraction > 0:
        _, rows = split_holdout(rows, section.holdout_fraction)
    else:
        log.warning("prompts.holdout_fraction is 0: evaluating on prompts the drafter trained on")
    out: list[list[int]] = []
    for i in range(len(rows)):
        tokens, mask = rows.row(i, len(rows.tokens))
        supervised = np.flatnonzero(mask)
        if supervised.size == 0 or not 0 < supervised[0] <= section.max_prompt_tokens:
            continue
        out.append(tokens[: supervised[0]].astype(np.int64).tolist())
        if len(out) == section.num_prompts:
            break
    if not out:
        raise DataError(
            f"{cfg.tokenized()}: no held-out sample has a prompt of 1.."
            f"{section.max_prompt_tokens} tokens"
        )
    return out


def read_source_prompts(cfg: EvalConfig) -> list[list[int]]:
    """Prompts of `prompts.source`, chat-templated with the target's tokenizer (thinking as in
    training), the first `num_prompts` that fit `max_prompt_tokens`."""
    from dflash_trainer.data.chat_template import ChatTemplate
    from dflash_trainer.data.errors import BadInputError
    from dflash_trainer.data.ingest import SourceStats, iter_source
    from dflash_trainer.data.sources import SourceFormat, SourceSpec
    from dflash_trainer.data.target import load_tokenizer
    from dflash_trainer.storage import store_for

    section = cfg.prompts
    source = section.source
    assert source is not None
    if not cfg.target.path:
        raise DataError("prompts.source needs target.path: its tokenizer renders the prompts")
    try:
        tokenizer = load_tokenizer(cfg.target.path, cfg.target.revision)
        override = None
        if source.chat_template:
            override = store_for(source.chat_template).read_bytes(source.chat_template).decode()
        template = ChatTemplate.from_tokenizer(tokenizer, override)
        spec = SourceSpec(name="eval", uri=source.uri, format=SourceFormat(source.format))
        stats = SourceStats("eval", source.uri)
        out: list[list[int]] = []
        for record in iter_source(spec, stats, set()):
            text = template.render(
                list(record.messages),
                add_generation_prompt=True,
                enable_thinking=source.enable_thinking,
            )
            ids = tokenizer.encode(text, add_special_tokens=False)
            if 0 < len(ids) <= section.max_prompt_tokens:
                out.append([int(t) for t in ids])
            if len(out) == section.num_prompts:
                break
    except BadInputError as exc:
        raise DataError(f"prompts.source {source.uri}: {exc}") from None
    if not out:
        raise DataError(
            f"prompts.source {source.uri} (format {source.format}): no usable prompt of 1.."
            f"{section.max_prompt_tokens} tokens in {stats.rows} rows"
        )
    return out


def build_greedy_references(
    target: TargetParts,
    prompts: list[list[int]],
    max_new_tokens: int,
    stops: set[int],
    device: torch.device,
) -> list[list[int]]:
    """Plain greedy outputs, batching prompts of equal length (one batch for random prompts)."""
    by_length: dict[int, list[int]] = {}
    for i, prompt in enumerate(prompts):
        by_length.setdefault(len(prompt), []).append(i)
    out: list[list[int]] = [[] for _ in prompts]
    for length, members in by_length.items():
        batch = torch.tensor([prompts[i] for i in members], device=device)
        rows = greedy_generate(target.model, batch, max_new_tokens, stops)
        for row, i in zip(rows, members, strict=True):
            tokens = row[length:].tolist()
            if stops:  # a row that stopped early is padded with its stop token
                cut = next((j for j, t in enumerate(tokens) if t in stops), len(tokens) - 1)
                tokens = tokens[: cut + 1]
            out[i] = tokens
    return out


def evaluate_builtin(cfg: EvalConfig, target: TargetParts, device: torch.device) -> EvalReport:
    drafter = load_exported_drafter(cfg.drafter, device).eval()
    taps = TargetTaps(target, drafter.config.target_layer_ids)
    prompts = select_prompts(cfg, int(target.config.vocab_size), drafter.config.mask_token_id)
    stats = AcceptanceStats(drafter.config.block_size)
    stops = set(cfg.stop_token_ids)
    generator = torch.Generator(device=device).manual_seed(cfg.seed)
    outputs = []
    for prompt in prompts:
        out = speculative_generate(
            target, taps, drafter, prompt, cfg.max_new_tokens, stops, cfg.temperature, generator
        )
        stats.add(out)
        outputs.append(out.tokens)
    taps.remove()
    mismatches = 0
    # Sampled outputs differ from greedy ones by design: the check is for temperature 0.
    check_greedy = cfg.check_greedy and cfg.temperature == 0
    if check_greedy:
        references = build_greedy_references(target, prompts, cfg.max_new_tokens, stops, device)
        for i, (spec, ref) in enumerate(zip(outputs, references, strict=True)):
            if spec != ref:
                mismatches += 1
                log.warning("prompt %d: speculative output differs from greedy decoding", i)
    return EvalReport(
        stats.acceptance_length,
        stats.per_position,
        len(prompts),
        stats.rounds,
        stats.produced,
        mismatches if check_greedy else None,
        "builtin",
        architecture_of(drafter.config),
    )


def evaluate_vllm(cfg: EvalConfig, target_path: str) -> EvalReport:  # pragma: no cover - GPU
    """vLLM offline generation with the DFlash drafter; acceptance from its counters."""
    from vllm import LLM, SamplingParams
    from vllm.inputs import TokensPrompt

    from dflash_trainer.model.export import drafter_config_from_export
    from dflash_trainer.storage import join_uri, read_json

    drafter_cfg = drafter_config_from_export(read_json(join_uri(cfg.drafter, "config.json")))
    cache = Path(cfg.target.cache_dir)
    drafter_path = str(fetch_model_folder(cfg.drafter, cache))
    llm = LLM(
        model=str(fetch_model_folder(target_path, cache)),
        revision=cfg.target.revision,
        tensor_parallel_size=cfg.vllm.tensor_parallel_size,
        gpu_memory_utilization=cfg.vllm.gpu_memory_utilization,
        max_model_len=cfg.vllm.max_model_len,
        disable_log_stats=False,
        speculative_config={
            "method": "dflash",
            "model": drafter_path,
            "num_speculative_tokens": drafter_cfg.block_size - 1,
        },
    )
    prompts = select_prompts(cfg, drafter_cfg.vocab_size, drafter_cfg.mask_token_id)
    params = SamplingParams(
        temperature=cfg.temperature, seed=cfg.seed, max_tokens=cfg.max_new_tokens
    )
    outputs = llm.generate([TokensPrompt(prompt_token_ids=p) for p in prompts], params)
    counters: dict[str, Any] = {m.name: m for m in llm.get_metrics()}
    drafts = counters["vllm:spec_decode_num_drafts"].value
    accepted = counters["vllm:spec_decode_num_accepted_tokens"].value
    per_pos = counters["vllm:spec_decode_num_accepted_tokens_per_pos"].values
    generated = sum(len(o.outputs[0].token_ids) for o in outputs)
    return EvalReport(
        1.0 + accepted / max(1, drafts),
        [v / max(1, drafts) for v in per_pos],
        len(prompts),
        int(drafts),
        generated,
        None,
        "vllm",
        architecture_of(drafter_cfg),
    )


def run_evaluation(cfg: EvalConfig) -> EvalReport:
    if cfg.engine == "vllm":
        if not cfg.target.path:
            raise ValueError("engine=vllm needs target.path (a HF folder vLLM can load)")
        return evaluate_vllm(cfg, cfg.target.path)
    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    target = load_target(
        path=cfg.target.path,
        config=cfg.target.config,
        seed=cfg.target.init_seed,
        dtype=cfg.target.dtype,
        device=device,
        cache_dir=Path(cfg.target.cache_dir),
        revision=cfg.target.revision,
    )
    return evaluate_builtin(cfg, target, device)
