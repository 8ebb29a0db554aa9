"""The model stage in the planner: a target named by its Hub id is copied once into the run root
by one CPU pod before anything else runs; every later stage loads that copy; a gated model
without a token stops the run with the stage's own words, and a retry resumes the copy."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

COPIED = {"stage": "model", "ok": True, "message": "copied", "revision": "3f" * 20,
          "files": 7, "bytes": 16_400_000_000, "fetchedBytes": 16_400_000_000}  # fmt: skip
GATED = {
    "stage": "model", "ok": False,
    "message": "Qwen/Qwen3-8B is gated or private and no token was accepted: set "
               "spec.hfTokenSecretRef to a Secret holding a token with access",
}  # fmt: skip


def hub_spec(make_spec: Callable[..., dict[str, Any]]) -> dict[str, Any]:
    return make_spec(
        target={"model": "Qwen/Qwen3-8B", "revision": "main"},
        hfTokenSecretRef={"name": "hf"},
    )


def args_of(world: Any, kind: str, name: str, replica: str = "Master") -> list[str]:
    manifest = world.manifests[(kind, name)]
    if kind == "PyTorchJob":
        pod = manifest["spec"]["pytorchReplicaSpecs"][replica]["template"]["spec"]
    else:
        pod = manifest["spec"]["template"]["spec"]
    return list(pod["containers"][0]["args"])


def test_a_hub_target_is_copied_first_by_one_cpu_pod(
    sim: Callable[..., Any], make_spec: Callable[..., dict[str, Any]]
) -> None:
    world = sim(spec=hub_spec(make_spec))
    world.step()

    assert world.created == ["r1-model"]
    assert world.status["phase"] == "FetchingModel"
    pod = world.manifests[("Job", "r1-model")]["spec"]["template"]["spec"]
    assert pod["nodeSelector"] != {"nvidia.com/gpu.product": "NVIDIA-B200"}
    env = {e["name"]: e for e in pod["containers"][0]["env"]}
    assert env["HF_TOKEN"]["valueFrom"]["secretKeyRef"]["name"] == "hf"
    args = args_of(world, "Job", "r1-model")
    assert args[args.index("--revision") + 1] == "main"


def test_after_the_copy_every_stage_loads_it_and_status_records_the_commit(
    sim: Callable[..., Any], make_spec: Callable[..., dict[str, Any]]
) -> None:
    world = sim(spec=hub_spec(make_spec))
    world.step()
    world.finish("r1-model", result=COPIED)
    world.settle()

    assert world.status["phase"] == "Regenerating"
    copy = world.status["stages"]["model"]
    assert copy["revision"] == "3f" * 20 and copy["files"] == 7
    assert copy["uri"].endswith("/model")
    fetched = world.condition("ModelFetched")
    assert fetched is not None and fetched["status"] == "True"
    assert "3f3f3f" in fetched["message"] and "16.4 GB" in fetched["message"]
    regen = args_of(world, "Job", "r1-regen")
    assert regen[regen.index("--model") + 1] == copy["uri"]
    assert "--revision" not in regen
    env = {e["name"] for e in world.manifests[("Job", "r1-regen")]["spec"]["template"]["spec"][
        "containers"][0]["env"]}  # fmt: skip
    assert "HF_TOKEN" not in env and "HF_HUB_OFFLINE" in env

    world.finish_data_stages()
    train = world.manifests[("ConfigMap", "r1-config")]["data"]["train.yaml"]
    assert f"path: {copy['uri']}" in train


def test_a_gated_model_without_a_token_fails_with_the_stages_words_and_a_retry_resumes(
    sim: Callable[..., Any], make_spec: Callable[..., dict[str, Any]]
) -> None:
    world = sim(spec=hub_spec(make_spec))
    world.step()
    world.finish("r1-model", ok=False, result=GATED, exit_code=2,
                 message="PodFailurePolicy: exit code 2")  # fmt: skip
    world.settle()

    assert world.status["phase"] == "Failed"
    failed = world.condition("ModelFetched")
    assert failed is not None and failed["status"] == "False"
    assert "spec.hfTokenSecretRef" in failed["message"]
    assert "r1-regen" not in world.created  # no GPU pod before the model is there

    world.step(lambda body: body["metadata"]["annotations"].update({"dflash.dev/retry": "token"}))
    assert "r1-model-2" in world.created
    assert world.status["phase"] == "FetchingModel"
