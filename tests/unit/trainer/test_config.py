"""train.yaml / eval.yaml: validated at load, unknown keys rejected, `a.b=c` overrides, and
bad input answered with one line and exit code 2."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import yaml
from dflash_trainer.eval.config import load_eval_config
from dflash_trainer.train.__main__ import main as train_main
from dflash_trainer.train.config import ConfigError, apply_overrides, load_train_config
from dflash_trainer.train.result import build_stage_result

MINIMAL = {"run_root": "/tmp/x", "target": {"path": "/models/qwen3"}}


def write(tmp_path: Path, data: Any, name: str = "train.yaml") -> Path:
    path = tmp_path / name
    path.write_text(yaml.safe_dump(data))
    return path


def test_a_minimal_config_gets_the_paper_defaults(tmp_path: Path) -> None:
    cfg = load_train_config(write(tmp_path, MINIMAL))
    assert cfg.drafter.block_size == 16 and cfg.drafter.num_layers == 5
    assert cfg.objective.anchors_per_sequence == 512
    # gamma and the loss chunk follow the block size and the vocabulary (train/setup.py).
    assert cfg.objective.gamma is None and cfg.objective.loss_chunk_tokens is None
    assert cfg.optim.lr == 6e-4 and cfg.optim.grad_clip == 1.0 and cfg.optim.epochs == 6
    assert cfg.data.max_seq_len == 3072
    assert cfg.checkpoint_uri == "/tmp/x/checkpoints" and cfg.export_uri == "/tmp/x/final"


def test_overrides_set_nested_keys_with_yaml_values() -> None:
    out = apply_overrides(
        {"optim": {"lr": 1.0}},
        ["optim.lr=3e-4", "optim.betas=[0.9, 0.99]", "drafter.layer_types=null"],
    )
    assert out == {"optim": {"lr": "3e-4", "betas": [0.9, 0.99]}, "drafter": {"layer_types": None}}


def test_an_override_reaches_the_validated_config(tmp_path: Path) -> None:
    cfg = load_train_config(write(tmp_path, MINIMAL), ["optim.lr=3e-4", "data.batch_size=2"])
    assert cfg.optim.lr == 3e-4 and cfg.data.batch_size == 2


@pytest.mark.parametrize(
    ("data", "overrides", "message"),
    [
        ({**MINIMAL, "optim": {"learning_rate": 1}}, [], "optim.learning_rate: unknown key"),
        (MINIMAL, ["optim.lr=-1"], "optim.lr: Input should be greater than 0 (got -1)"),
        (MINIMAL, ["drafter.attention_backend=xformers"], "drafter.attention_backend: "),
        ({"run_root": "/x", "target": {}}, [], "set exactly one of target.path"),
        (MINIMAL, ["oops"], "override 'oops' is invalid; accepted: dotted.key=value"),
        (
            {**MINIMAL, "data": {"tokenized_uri": "/t", "self_distill": {}}},
            [],
            "set at most one of data.tokenized_uri and data.self_distill",
        ),
    ],
)
def test_bad_settings_are_one_line_errors_naming_the_key(
    tmp_path: Path, data: dict[str, Any], overrides: list[str], message: str
) -> None:
    with pytest.raises(ConfigError) as info:
        load_train_config(write(tmp_path, data), overrides)
    assert message in str(info.value)
    assert "\n" not in str(info.value)


def test_a_missing_config_file_is_named(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=r"config file .*nope\.yaml cannot be read"):
        load_train_config(tmp_path / "nope.yaml")


def test_the_eval_config_rejects_unknown_keys_too(tmp_path: Path) -> None:
    path = write(tmp_path, {**MINIMAL, "prompts": {"count": 3}}, "eval.yaml")
    with pytest.raises(ConfigError, match=r"prompts\.count: unknown key"):
        load_eval_config(path)


def test_the_entry_point_answers_bad_input_with_exit_2_and_a_stage_result(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    result = tmp_path / "termination-log"
    code = train_main(
        [
            "--config",
            str(write(tmp_path, MINIMAL)),
            "--termination-log",
            str(result),
            "optim.epochs=0",
        ]
    )
    assert code == 2
    payload = json.loads(result.read_text())
    assert payload["stage"] == "train" and payload["ok"] is False
    assert "optim.epochs: Input should be greater than or equal to 1 (got 0)" in payload["message"]
    assert "Traceback" not in capsys.readouterr().err


def test_a_target_folder_that_does_not_exist_is_bad_input(tmp_path: Path) -> None:
    result = tmp_path / "termination-log"
    config = write(
        tmp_path,
        {"run_root": str(tmp_path / "run"), "target": {"path": str(tmp_path / "no-model")}},
    )
    assert train_main(["--config", str(config), "--termination-log", str(result)]) == 2
    assert "no-model" in json.loads(result.read_text())["message"]


def test_pvc_uris_resolve_to_where_the_operator_mounts_claims(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("DFLASH_PVC_ROOT", "/mnt/claims")
    data = {
        "run_root": "pvc://runs/ns/r1",
        "target": {"path": "pvc://models/qwen3-8b"},
        "checkpoint": {"uri": "s3://b/ckpt"},
    }
    cfg = load_train_config(write(tmp_path, data))
    assert cfg.run_root == "/mnt/claims/runs/ns/r1"
    assert cfg.target.path == "/mnt/claims/models/qwen3-8b"
    assert cfg.checkpoint_uri == "s3://b/ckpt"
    eval_data = {key: value for key, value in data.items() if key != "checkpoint"}
    evaluation = load_eval_config(write(tmp_path, eval_data, "eval.yaml"))
    assert evaluation.drafter == "/mnt/claims/runs/ns/r1/final"


def test_a_stage_result_message_is_capped_at_400_characters() -> None:
    result = build_stage_result("train", False, "x" * 1000, step=3)
    assert len(result["message"]) == 400 and result["step"] == 3


def test_objective_settings_take_gamma_from_the_block_and_the_chunk_from_the_vocab(
    tmp_path: Path,
) -> None:
    from types import SimpleNamespace

    from dflash_trainer.model.config import build_drafter_config
    from dflash_trainer.train.setup import build_objective_settings

    target = SimpleNamespace(
        num_hidden_layers=8, num_attention_heads=4, hidden_size=64, intermediate_size=128,
        vocab_size=248320,
    )  # fmt: skip
    drafter = build_drafter_config(target, num_layers=2, block_size=8)
    cfg = load_train_config(write(tmp_path, {**MINIMAL, "drafter": {"block_size": 8}}))
    settings = build_objective_settings(cfg, drafter)
    assert settings.gamma == 4.0 and settings.loss_chunk_tokens == 1024
    explicit = {**MINIMAL, "objective": {"gamma": 3.0, "loss_chunk_tokens": 64}}
    settings = build_objective_settings(load_train_config(write(tmp_path, explicit)), drafter)
    assert settings.gamma == 3.0 and settings.loss_chunk_tokens == 64
