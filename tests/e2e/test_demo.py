"""The demo's run, at test size: every phase for real (the canary, regeneration with the
transformers engine, the gates, tokenization, a 2-node TrainJob (Kubeflow Trainer v2 on JobSet,
torchrun in each pod) with checkpoints in S3, export, evaluation), and the drafter it exports
drafts exactly what the target generates."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from dflash_dev.demo.harness import STAGE_JOBS, DemoHarness
from dflash_dev.demo.summary import split_s3_uri
from dflash_dev.kube_wait import get_json
from dflash_trainer.eval.greedy import greedy_generate
from dflash_trainer.eval.speculative import speculative_generate
from dflash_trainer.model.export import load_exported_drafter
from dflash_trainer.model.taps import TargetTaps
from dflash_trainer.model.target import load_target
from dflash_trainer.tiny.prompts import build_prompts
from transformers import AutoTokenizer

VERIFY_PROMPTS = 4
VERIFY_NEW_TOKENS = 40


# The trained drafter of this smaller run beats an untrained one (1.00) by this much at least.
E2E_ACCEPTANCE_FLOOR = 1.05
DEMO_EPOCHS = 6


def verify_against_target(
    drafter_uri: str, model_uri: str, workdir: Path
) -> list[tuple[list[int], list[int]]]:
    """(speculative, greedy) outputs of the exported drafter + target on chat prompts."""
    target = load_target(
        path=model_uri, config=None, seed=0, dtype="float32", device=torch.device("cpu"),
        cache_dir=workdir / "models",
    )  # fmt: skip
    drafter = load_exported_drafter(drafter_uri).eval()
    taps = TargetTaps(target, drafter.config.target_layer_ids)
    tokenizer = AutoTokenizer.from_pretrained(
        str(next((workdir / "models").rglob("tokenizer.json")).parent)
    )
    end_of_turn = tokenizer.convert_tokens_to_ids("<|im_end|>")
    assert isinstance(end_of_turn, int)
    stops = {end_of_turn}
    pairs = []
    for text in build_prompts(VERIFY_PROMPTS, seed=99):
        rendered = tokenizer.apply_chat_template(
            [{"role": "user", "content": text}], tokenize=False, add_generation_prompt=True,
            enable_thinking=True,
        )  # fmt: skip
        prompt = tokenizer(rendered, add_special_tokens=False)["input_ids"]
        spec = speculative_generate(target, taps, drafter, prompt, VERIFY_NEW_TOKENS, stops)
        ids = greedy_generate(target.model, torch.tensor([prompt]), VERIFY_NEW_TOKENS, stops)
        greedy = ids[0, len(prompt) :].tolist()
        cut = next((j for j, t in enumerate(greedy) if t in stops), len(greedy) - 1)
        pairs.append((spec.tokens, greedy[: cut + 1]))
    taps.remove()
    return pairs


def test_the_demo_run_succeeds_and_its_drafter_decodes_exactly_like_the_target(
    harness: DemoHarness, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    harness.start_operator()
    # More epochs than the other e2e runs (2): on 2026-12-07's fresh machine 16 steps left the
    # drafter at 1.00 (the tiny target's build differs by CPU in float rounding); 48 and 96
    # steps both gave 1.12.
    harness.apply(harness.build_run("demo", training={"epochs": DEMO_EPOCHS}))

    status = harness.wait_phase("demo", "Succeeded", "Failed", "AuditFailed")
    assert status["phase"] == "Succeeded", harness.describe("demo")

    # One child per stage, each pod on this session's executor nodes.
    assert harness.children("jobs") == [f"demo-{stage}" for stage in STAGE_JOBS]
    assert status["launcher"] == "trainjob"
    assert harness.children("trainjobs") == ["demo-train"]
    assert harness.children("pytorchjobs") == []
    nodes = {pod["spec"]["nodeName"] for pod in harness.pods()}
    assert nodes <= set(harness.executor.nodes)
    # Training ran as 2 JobSet pods, each torchrun (the runtime sets no command: the args are
    # the command line) with the Trainer's PET_* rendezvous on rank 0's pod DNS name.
    job = get_json(harness.cluster, "trainjob", "demo-train", "-n", harness.namespace)
    assert job["spec"]["trainer"]["numNodes"] == 2
    ranks = harness.rank_pods("demo-train")
    assert len(ranks) == 2, ranks
    for pod in ranks:
        log = harness.executor.logs(harness.namespace, pod)
        assert "-m torch.distributed.run --module dflash_trainer.train" in log, log[:2000]
        assert "Loading weights" in log, log[-2000:]

    # The status tells the whole story.
    assert status["audit"]["canary"]["verdict"] == "pass"
    assert status["stages"]["canary"]["samples"] == 4 * 4  # 4 of each source, reused
    assert status["audit"]["completions"]["verdict"] == "pass"
    assert status["audit"]["tokens"]["verdict"] == "pass"
    assert status["stages"]["regeneration"]["samples"] == 4 * 16
    assert status["training"]["step"] == status["training"]["totalSteps"] > 0
    assert status["checkpoint"]["step"] == status["training"]["step"]
    # Measured 1.15 on 2026-12-03 (2 epochs), 1.12 on 2026-12-07 (6 and 12 epochs; 2 gave
    # 1.00 there): an untrained drafter gives 1.00, any accepted draft token lifts it.
    assert status["acceptanceLength"] >= E2E_ACCEPTANCE_FLOOR, status["acceptanceLength"]
    drafter_uri = status["drafterUri"]
    assert drafter_uri.startswith(f"s3://{harness.bucket}/") and drafter_uri.endswith("/final")

    # The exported drafter loads from S3 and verifies token for token against the target.
    for key, value in harness.s3.env.items():
        monkeypatch.setenv(key, value)
    model_uri = harness.run("demo")["spec"]["target"]["model"]
    bucket, key = split_s3_uri(model_uri)
    assert harness.s3.client().head_object(Bucket=bucket, Key=f"{key}/config.json")
    pairs = verify_against_target(drafter_uri, model_uri, tmp_path)
    assert len(pairs) == VERIFY_PROMPTS
    for speculative, greedy in pairs:
        assert len(greedy) > 1
        assert speculative == greedy
