"""The command lines the operator builds for the data stages parse with the stages' own parsers
(docs/stage-cli.md): both sides of the contract, checked on the example DFlashRuns."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml
from dflash_operator.api.constants import Gate
from dflash_operator.api.spec import DFlashRunSpec
from dflash_operator.children import commands
from dflash_trainer.data.audit.cli import build_parser as audit_parser
from dflash_trainer.data.regenerate.cli import build_parser as regenerate_parser
from dflash_trainer.data.regenerate.vllm_engine import parse_engine_args
from dflash_trainer.data.tokenize.cli import build_parser as tokenize_parser

EXAMPLES = Path(__file__).parents[3] / "examples"
RUN_ROOT = "s3://bucket/prefix/ns/run/uid"


def load_spec(name: str) -> DFlashRunSpec:
    doc = yaml.safe_load((EXAMPLES / name).read_text())
    return DFlashRunSpec.model_validate(doc["spec"])


def module_args(argv: list[str], module: str) -> list[str]:
    assert argv[0].startswith("python") and argv[1:3] == ["-m", module]
    return argv[3:]


@pytest.mark.parametrize("example", ["tiny-cpu.yaml", "qwen3.6-27b.yaml"])
def test_the_regenerate_command_line_parses_with_the_spec_values(example: str) -> None:
    spec = load_spec(example)
    argv = commands.build_regenerate_args(spec, RUN_ROOT)
    args = regenerate_parser().parse_args(module_args(argv, "dflash_trainer.data.regenerate"))
    regen: Any = spec.regeneration
    assert args.run_root == RUN_ROOT and args.engine == regen.engine.value
    assert args.max_tokens == regen.max_new_tokens and args.shards == regen.shards
    assert args.enable_thinking is spec.target.thinking
    assert (
        args.temperature == regen.temperature and args.tensor_parallel_size == regen.tensor_parallel
    )
    parse_engine_args(args.engine_arg)  # every --engine-arg is KEY=VALUE


@pytest.mark.parametrize("example", ["tiny-cpu.yaml", "qwen3.6-27b.yaml"])
@pytest.mark.parametrize("gate", [Gate.CANARY, Gate.COMPLETIONS, Gate.TOKENS])
def test_the_audit_command_line_parses_with_the_gate_and_training_shape(
    example: str, gate: Gate
) -> None:
    spec = load_spec(example)
    argv = commands.build_audit_args(spec, gate, RUN_ROOT)
    args = audit_parser().parse_args(module_args(argv, "dflash_trainer.data.audit"))
    assert args.gate == gate.trainer_gate and args.run_root == RUN_ROOT
    assert args.block_size == spec.drafter.block_size
    assert args.max_seq_len == spec.tokenization.max_seq_len
    if gate == Gate.TOKENS:
        assert args.max_tokens == 0  # the generation limit is the completions gates' business
    else:
        assert args.max_tokens == spec.regeneration.max_new_tokens
    if gate == Gate.CANARY:
        assert args.path == f"{RUN_ROOT}/canary/regen" and args.out == f"{RUN_ROOT}/audit/canary"


@pytest.mark.parametrize("example", ["tiny-cpu.yaml", "qwen3.6-27b.yaml"])
def test_the_canary_command_line_is_the_regenerate_one_on_a_sample(example: str) -> None:
    spec = load_spec(example)
    argv = commands.build_canary_args(spec, RUN_ROOT)
    args = regenerate_parser().parse_args(module_args(argv, "dflash_trainer.data.regenerate"))
    assert args.canary_samples_per_source == spec.regeneration.canary.samples_per_source
    shards = regenerate_parser().parse_args(
        module_args(
            commands.build_regenerate_args(spec, RUN_ROOT), "dflash_trainer.data.regenerate"
        )
    )
    # Same engine and sampling as the shards, so that the shards may reuse its answers.
    for name in ("model", "engine", "max_tokens", "temperature", "top_p", "seed", "dtype",
                 "enable_thinking", "engine_arg", "tensor_parallel_size"):  # fmt: skip
        assert getattr(args, name) == getattr(shards, name), name


@pytest.mark.parametrize("example", ["tiny-cpu.yaml", "qwen3.6-27b.yaml"])
def test_the_tokenize_command_line_parses_with_the_spec_values(example: str) -> None:
    spec = load_spec(example)
    argv = commands.build_tokenize_args(spec, RUN_ROOT)
    args = tokenize_parser().parse_args(module_args(argv, "dflash_trainer.data.tokenize"))
    assert args.max_seq_len == spec.tokenization.max_seq_len
    assert args.enable_thinking is spec.target.thinking
    assert args.truncated_answers == spec.tokenization.truncated_answers.value.lower()
    assert args.max_template_mismatch_rate == spec.tokenization.max_template_mismatch_rate
    assert args.max_new_tokens == spec.regeneration.max_new_tokens


@pytest.mark.parametrize("example", ["tiny-cpu.yaml", "qwen3.6-27b.yaml"])
def test_the_rendered_sources_and_thresholds_files_load_with_the_stages_loaders(
    example: str,
) -> None:
    from dflash_operator.children.config_map import build_sources_file, build_thresholds_file
    from dflash_trainer.data.audit.thresholds import parse_thresholds
    from dflash_trainer.data.sources import parse_sources

    spec = load_spec(example)
    sources_doc = yaml.safe_load(yaml.safe_dump(build_sources_file(spec)))
    sources = parse_sources(sources_doc, "sources.yaml")
    assert [s.name for s in sources] == [s.name for s in spec.data.sources]
    assert [s.max_samples for s in sources] == [s.max_samples for s in spec.data.sources]
    thresholds_doc = yaml.safe_load(yaml.safe_dump(build_thresholds_file(spec)))
    thresholds = parse_thresholds(thresholds_doc, "thresholds.yaml")
    assert thresholds.expect_thinking is spec.target.thinking
    assert thresholds.max_stub_rate == spec.audit.max_stub_rate
    assert thresholds.max_loss_mask_mode_share == spec.audit.tokens.max_loss_mask_mode_share


def test_the_score_stage_judges_each_imported_source_by_the_sampling_it_declares(
    tmp_path: Path,
) -> None:
    from dflash_operator.children.config_map import build_sources_file
    from dflash_trainer.data.likelihood.cli import build_parser as score_parser
    from dflash_trainer.data.likelihood.cli import build_source_rules, undeclared_rule

    doc = yaml.safe_load((EXAMPLES / "tiny-cpu.yaml").read_text())["spec"]
    doc["regeneration"]["enabled"] = False
    doc["data"]["sources"] = [
        {"name": "hot", "uri": "s3://bucket/hot.jsonl", "format": "regenerated",
         "sampling": {"temperature": 1.0, "topP": 0.95}},
        {"name": "mystery", "uri": "s3://bucket/m.jsonl", "format": "regenerated"},
    ]  # fmt: skip
    spec = DFlashRunSpec.model_validate(doc)
    argv = commands.build_score_args(spec, RUN_ROOT)
    # No sampling of the regeneration's is imposed on imported completions.
    assert not {"--temperature", "--top-p", "--top-k", "--min-p"} & set(argv)
    sources = tmp_path / "sources.yaml"
    sources.write_text(yaml.safe_dump(build_sources_file(spec)))
    args = score_parser().parse_args(module_args(argv, "dflash_trainer.data.likelihood"))
    args.sources = str(sources)
    rules = build_source_rules(args)
    assert set(rules) == {"hot"} and undeclared_rule(args) is None  # mystery: unknown
    hot = rules["hot"]
    assert (hot.temperature, hot.top_p, hot.top_k, hot.min_p) == (1.0, 0.95, 0, 0.0)
    assert hot.default_k == spec.audit.likelihood.top_k


def test_the_training_monitor_gets_each_imported_sources_declared_sampling() -> None:
    from dflash_operator.children.config_map import build_likelihood_section
    from dflash_trainer.train.config import LikelihoodSection

    doc = yaml.safe_load((EXAMPLES / "tiny-cpu.yaml").read_text())["spec"]
    doc["regeneration"]["enabled"] = False
    doc["data"]["sources"] = [
        {"name": "hot", "uri": "s3://bucket/hot.jsonl", "format": "regenerated",
         "sampling": {"temperature": 1.0, "topP": 0.95}},
        {"name": "mystery", "uri": "s3://bucket/m.jsonl", "format": "regenerated"},
    ]  # fmt: skip
    section = LikelihoodSection.model_validate(
        build_likelihood_section(DFlashRunSpec.model_validate(doc))
    )
    assert section.sources["mystery"] is None
    hot = section.sources["hot"]
    assert hot is not None and (hot.temperature, hot.top_p, hot.top_k) == (1.0, 0.95, 0)
