"""The demo's run with the operator from the operator image and every pod from the image the
operator gives its stage (the executor's image mode): the whole pipeline Succeeds with an
acceptance length, and the 87%-stub data stops at the canary (`make test-images-e2e`).

CI builds the regen image only when its inputs changed (docs/images.md, "CI"); otherwise it
sets DFLASH_E2E_REGEN_FROM_TRAINER=1 and regeneration runs from the trainer image (the same
dflash-trainer code and transformers engine, without vLLM), so every other stage still runs
from the image it ships in."""

from __future__ import annotations

import os
from typing import Any

import pytest
from dflash_dev.demo import assets
from dflash_dev.demo.harness import STAGE_JOBS
from dflash_operator.api.constants import LABEL_STAGE

pytestmark = pytest.mark.e2e
# As tests/e2e/test_demo.py: a trained drafter of this size beats an untrained one (1.00).
E2E_ACCEPTANCE_FLOOR = 1.05
# Epochs of the demo's run at test size (the other e2e runs train 2).
DEMO_EPOCHS = 6
REGEN_FROM_TRAINER = os.environ.get("DFLASH_E2E_REGEN_FROM_TRAINER") == "1"


def _start(harness: Any, refs: Any) -> dict[str, str]:
    """The operator from its image; the stage images it assigns (checked on the pods)."""
    stage_images = {
        "trainer": refs["trainer"],
        "regen": refs["trainer" if REGEN_FROM_TRAINER else "regen"],
    }
    env = {
        "DFLASH_TRAINER_IMAGE": stage_images["trainer"],
        "DFLASH_REGEN_IMAGE": stage_images["regen"],
    }
    harness.start_operator(image=refs["operator"], env=env)
    return stage_images


def _check_pods_ran_from_their_images(harness: Any, stage_images: dict[str, str]) -> None:
    pods = harness.pods()
    assert pods
    for pod in pods:
        name = pod["metadata"]["name"]
        image = pod["spec"]["containers"][0]["image"]
        regen = pod["metadata"]["labels"][LABEL_STAGE] in ("canary", "regen")
        assert image == stage_images["regen" if regen else "trainer"], (name, image)
        log = harness.executor.logs(harness.namespace, name)
        assert f"from image {image} as 65532:65532, read-only root" in log, log[:2000]


def test_the_demo_run_succeeds_from_the_images(image_harness: Any, refs: Any) -> None:
    stage_images = _start(image_harness, refs)
    image_harness.apply(image_harness.build_run("demo", training={"epochs": DEMO_EPOCHS}))

    status = image_harness.wait_phase("demo", "Succeeded", "Failed", "AuditFailed")
    assert status["phase"] == "Succeeded", image_harness.describe("demo")
    assert image_harness.children("jobs") == [f"demo-{stage}" for stage in STAGE_JOBS]
    assert status["training"]["step"] == status["training"]["totalSteps"] > 0
    assert status["acceptanceLength"] >= E2E_ACCEPTANCE_FLOOR, status["acceptanceLength"]
    _check_pods_ran_from_their_images(image_harness, stage_images)


def test_the_broken_data_stops_at_the_canary_from_the_images(image_harness: Any, refs: Any) -> None:
    stage_images = _start(image_harness, refs)
    files = assets.build_broken_sources(24)
    canary = {"canary": {"samplesPerSource": 16}}
    image_harness.apply(image_harness.build_run("broken", files, 24, regeneration=canary))

    status = image_harness.wait_phase("broken", "AuditFailed", "Succeeded", "Failed", "Training")
    assert status["phase"] == "AuditFailed", image_harness.describe("broken")
    violated = {v["check"]: v for v in status["audit"]["canary"]["violations"]}
    assert violated["stub_rate"]["sources"] == ["openorca"]
    assert image_harness.children("jobs") == ["broken-audit-canary", "broken-canary"]
    _check_pods_ran_from_their_images(image_harness, stage_images)
