"""The tiny target model directory: offline loadable, deterministic, with the real templates."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import pytest
import torch
from dflash_trainer.tiny.__main__ import main
from dflash_trainer.tiny.build import METADATA_FILE, build_tiny_target
from dflash_trainer.tiny.tokenizer import load_chat_template
from transformers import AutoModelForCausalLM, AutoTokenizer


def sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


@pytest.mark.parametrize("arch", ["qwen3", "qwen3_5"])
def test_the_tiny_target_loads_offline_with_auto_classes_and_generates(
    arch: str, tmp_path: Path
) -> None:
    target = build_tiny_target(tmp_path / arch, arch=arch)
    tokenizer = AutoTokenizer.from_pretrained(target.path)
    model = AutoModelForCausalLM.from_pretrained(target.path)
    assert model.config.vocab_size > len(tokenizer)
    assert target.mask_token_id == len(tokenizer) < model.config.vocab_size
    assert tokenizer.chat_template == load_chat_template(arch)
    assert tokenizer.eos_token == "<|im_end|>"
    for special in ("<|im_start|>", "<|im_end|>", "<think>", "</think>", "<|endoftext|>"):
        assert len(tokenizer(special, add_special_tokens=False)["input_ids"]) == 1
    prompt = tokenizer.apply_chat_template(
        [{"role": "user", "content": "Explain binary search."}],
        add_generation_prompt=True,
        tokenize=False,
    )
    ids = tokenizer(prompt, return_tensors="pt", add_special_tokens=False)["input_ids"]
    out = model.generate(ids, max_new_tokens=4, do_sample=False)
    assert out.shape == (1, ids.shape[1] + 4) or out[0, -1].item() == target.eos_token_id


def test_the_same_seed_gives_byte_identical_tokenizer_and_weights(tmp_path: Path) -> None:
    a = build_tiny_target(tmp_path / "a", seed=3)
    b = build_tiny_target(tmp_path / "b", seed=3)
    c = build_tiny_target(tmp_path / "c", seed=4)
    for name in ("tokenizer.json", "model.safetensors", "config.json"):
        assert sha256(a.path / name) == sha256(b.path / name)
    assert sha256(a.path / "model.safetensors") != sha256(c.path / "model.safetensors")


def test_the_entry_point_writes_metadata_and_a_prompt_file(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "tiny"
    prompts = tmp_path / "prompts.jsonl"
    assert main(["--out", str(out), "--prompts", str(prompts), "--num-prompts", "7"]) == 0
    meta = json.loads((out / METADATA_FILE).read_text())
    assert meta["arch"] == "qwen3" and meta["think_end_id"] != meta["think_start_id"]
    assert json.loads(capsys.readouterr().out.strip())["mask_token_id"] == meta["mask_token_id"]
    lines = prompts.read_text().splitlines()
    assert len(lines) == 7 and len(set(lines)) == 7
    assert json.loads(lines[0])["messages"][0]["role"] == "user"


def test_a_few_teaching_steps_lower_the_loss_on_chat_formatted_text(tmp_path: Path) -> None:
    random_target = build_tiny_target(tmp_path / "r", seed=1)
    taught = build_tiny_target(tmp_path / "t", seed=1, teach_steps=12)
    tokenizer = AutoTokenizer.from_pretrained(taught.path)
    text = tokenizer.apply_chat_template(
        [
            {"role": "user", "content": "Explain prime numbers in one sentence."},
            {"role": "assistant", "content": "Seven is prime.", "reasoning_content": "Short."},
        ],
        tokenize=False,
    )
    ids = tokenizer(text, return_tensors="pt", add_special_tokens=False)["input_ids"]
    losses = []
    for target in (random_target, taught):
        model = AutoModelForCausalLM.from_pretrained(target.path)
        with torch.no_grad():
            losses.append(model(input_ids=ids, labels=ids).loss.item())
    assert losses[1] < losses[0] - 0.5
