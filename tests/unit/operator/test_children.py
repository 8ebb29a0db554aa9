"""Builders of the run's children: placement from the pool, GPUs and extra resources, S3
credentials by reference only, non-root read-only pods, PyTorchJob shape, RBAC, config."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
import yaml
from dflash_operator.api.constants import Stage
from dflash_operator.api.spec_storage import CleanupPolicy
from dflash_operator.api.validation import parse_spec
from dflash_operator.children import commands
from dflash_operator.children.config_map import build_config_map
from dflash_operator.children.meta import RunRef
from dflash_operator.children.rbac import build_trainer_access
from dflash_operator.plan.placement import place_stages
from dflash_operator.plan.stages import (
    PlanSettings,
    StageContext,
    build_cleanup_child,
    build_pipeline,
    build_stage_child,
)
from dflash_operator.pools import PoolsConfig

RUN = RunRef("r1", "ml", "uid-1")
ROOT = "s3://artifacts/dflash/ml/r1/uid-1"


@pytest.fixture
def build(
    pools: PoolsConfig, make_spec: Callable[..., dict[str, Any]]
) -> Callable[..., dict[str, Any]]:
    def make(
        stage: Stage, attempt: int = 1, suspend: bool = False, **overrides: Any
    ) -> dict[str, Any]:
        spec = parse_spec(make_spec(**overrides))
        placements, errors = place_stages(
            spec, (*build_pipeline(spec), Stage.CLEANUP, Stage.PRUNE), pools
        )
        assert not errors
        ctx = StageContext(
            RUN,
            spec,
            ROOT,
            placements,
            PlanSettings(regen_image="regen:1", trainer_image="trainer:1"),
        )
        if stage == Stage.CLEANUP:
            return build_cleanup_child(ctx, CleanupPolicy.DELETE)
        if stage == Stage.PRUNE:
            return build_cleanup_child(ctx, CleanupPolicy.DELETE_INTERMEDIATE)
        return build_stage_child(ctx, stage, attempt, suspend)

    return make


def pod_spec(manifest: dict[str, Any], replica: str = "Master") -> dict[str, Any]:
    if manifest["kind"] == "PyTorchJob":
        return dict(manifest["spec"]["pytorchReplicaSpecs"][replica]["template"]["spec"])
    return dict(manifest["spec"]["template"]["spec"])


def env_of(manifest: dict[str, Any]) -> dict[str, Any]:
    return {
        e["name"]: e.get("value", e.get("valueFrom"))
        for e in pod_spec(manifest)["containers"][0]["env"]
    }


def test_regeneration_is_an_indexed_job_with_one_index_per_shard_on_the_b200_pool(
    build: Callable[..., dict[str, Any]],
) -> None:
    job = build(
        Stage.REGEN,
        regeneration={"shards": 64, "parallelism": 8, "retriesPerShard": 3, "tensorParallel": 2},
    )
    spec = job["spec"]
    assert (
        spec["completionMode"],
        spec["completions"],
        spec["parallelism"],
        spec["backoffLimitPerIndex"],
    ) == ("Indexed", 64, 8, 3)
    pod = pod_spec(job)
    assert pod["nodeSelector"] == {"nvidia.com/gpu.product": "NVIDIA-B200"}
    assert pod["tolerations"] == [
        {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}
    ]
    assert pod["restartPolicy"] == "Never"
    container = pod["containers"][0]
    limits, requests = container["resources"]["limits"], container["resources"]["requests"]
    assert (limits["nvidia.com/gpu"], limits["rdma/ib"]) == ("2", "1")
    assert (requests["nvidia.com/gpu"], requests["rdma/ib"]) == ("2", "1")
    # Host resources scale with the GPUs of the pod (2 here): 8 cores and 96Gi per GPU.
    assert (requests["cpu"], requests["memory"], limits["memory"]) == ("16", "192Gi", "192Gi")
    assert requests["ephemeral-storage"] == limits["ephemeral-storage"] == "100Gi"
    tmp = next(v for v in pod["volumes"] if v["name"] == "tmp")
    assert tmp["emptyDir"] == {"sizeLimit": "100Gi"}
    assert container["image"] == "regen:1"
    assert container["args"][:3] == ["python3", "-m", "dflash_trainer.data.regenerate"]
    assert container["args"][container["args"].index("--shards") + 1] == "64"
    assert container["securityContext"]["capabilities"] == {"drop": ["ALL"], "add": ["IPC_LOCK"]}
    shm = next(v for v in pod["volumes"] if v["name"] == "dshm")
    assert shm["emptyDir"] == {"medium": "Memory", "sizeLimit": "64Gi"}


def test_stage_pods_get_s3_credentials_only_as_secret_references(
    build: Callable[..., dict[str, Any]],
) -> None:
    env = env_of(
        build(
            Stage.TOKENIZE,
            storage={
                "bucket": "bkt",
                "endpoint": "http://s3.local:8333",
                "pathStyle": True,
                "credentialsSecretRef": {"name": "creds", "accessKeyIdKey": "id"},
            },
        )
    )
    assert env["AWS_ACCESS_KEY_ID"] == {"secretKeyRef": {"name": "creds", "key": "id"}}
    assert env["AWS_SECRET_ACCESS_KEY"] == {
        "secretKeyRef": {"name": "creds", "key": "AWS_SECRET_ACCESS_KEY"}
    }
    assert env["AWS_ENDPOINT_URL"] == "http://s3.local:8333"
    assert env["DFLASH_S3_PATH_STYLE"] == "true"


@pytest.mark.parametrize(
    "stage",
    [
        Stage.REGEN,
        Stage.AUDIT_COMPLETIONS,
        Stage.TOKENIZE,
        Stage.AUDIT_TOKENS,
        Stage.TRAIN,
        Stage.EVAL,
        Stage.CLEANUP,
        Stage.PRUNE,
    ],
)
def test_every_stage_pod_runs_as_non_root_with_a_read_only_root(
    build: Callable[..., dict[str, Any]], stage: Stage
) -> None:
    pod = pod_spec(build(stage))
    assert pod["securityContext"]["runAsNonRoot"] is True
    assert pod["securityContext"]["runAsUser"] == 65532
    assert pod["securityContext"]["seccompProfile"] == {"type": "RuntimeDefault"}
    container = pod["containers"][0]
    assert container["securityContext"]["readOnlyRootFilesystem"] is True
    assert container["securityContext"]["allowPrivilegeEscalation"] is False
    assert container["terminationMessagePolicy"] == "FallbackToLogsOnError"
    assert {"name": "tmp", "mountPath": "/tmp"} in container["volumeMounts"]
    assert pod["automountServiceAccountToken"] is (stage == Stage.TRAIN)
    assert pod["enableServiceLinks"] is False


def test_audits_and_tokenization_run_on_the_cpu_pool_without_gpus(
    build: Callable[..., dict[str, Any]],
) -> None:
    for stage in (Stage.AUDIT_COMPLETIONS, Stage.TOKENIZE, Stage.AUDIT_TOKENS):
        pod = pod_spec(build(stage))
        assert pod["nodeSelector"] == {"dflash.dev/node-pool": "cpu"}
        resources = pod["containers"][0]["resources"]
        assert "nvidia.com/gpu" not in resources["requests"]
        # Requests and limits for cpu and memory: a namespace with a ResourceQuota admits it.
        for part in ("requests", "limits"):
            assert {"cpu", "memory", "ephemeral-storage"} <= set(resources[part])


def test_an_audit_job_never_retries_a_failed_gate_or_bad_input(
    build: Callable[..., dict[str, Any]],
) -> None:
    job = build(Stage.AUDIT_COMPLETIONS)
    rules = job["spec"]["podFailurePolicy"]["rules"]
    assert rules[0] == {"action": "FailJob", "onExitCodes": {"operator": "In", "values": [2, 3]}}
    args = pod_spec(job)["containers"][0]["args"]
    assert args[args.index("--gate") + 1] == "completions"
    assert args[args.index("--thresholds") + 1] == "/etc/dflash/thresholds.yaml"


def test_training_is_a_pytorchjob_with_a_master_and_workers_on_the_rtx_pool(
    build: Callable[..., dict[str, Any]],
) -> None:
    job = build(Stage.TRAIN, training={"nodes": 3, "maxRestarts": 5})
    spec = job["spec"]
    assert (job["apiVersion"], job["kind"]) == ("kubeflow.org/v1", "PyTorchJob")
    assert spec["nprocPerNode"] == "4"
    assert spec["runPolicy"]["backoffLimit"] == 5
    assert spec["runPolicy"]["suspend"] is False
    assert spec["pytorchReplicaSpecs"]["Master"]["replicas"] == 1
    assert spec["pytorchReplicaSpecs"]["Worker"]["replicas"] == 2
    assert spec["pytorchReplicaSpecs"]["Master"]["restartPolicy"] == "OnFailure"
    pod = pod_spec(job, "Worker")
    container = pod["containers"][0]
    assert container["name"] == "pytorch"
    assert container["ports"][0]["name"] == "pytorchjob-port"
    assert container["resources"]["limits"]["nvidia.com/gpu"] == "4"
    assert container["resources"]["requests"]["memory"] == "384Gi"
    assert pod["serviceAccountName"] == "r1-trainer"
    env = env_of(job)
    assert env["DFLASH_RUN_NAME"] == "r1" and env["DFLASH_RUN_NAMESPACE"] == "ml"
    assert env["NCCL_SOCKET_IFNAME"] == "eth0" and env["TORCH_NCCL_ASYNC_ERROR_HANDLING"] == "1"
    assert job["metadata"]["labels"]["kueue.x-k8s.io/queue-name"] == "gpu-queue"
    assert pod_spec(job)["containers"][0]["args"][:5] == [
        "python",
        "-m",
        "torch.distributed.run",
        "--module",
        "dflash_trainer.train",
    ]
    assert any(v["name"] == "dshm" and v["emptyDir"]["medium"] == "Memory" for v in pod["volumes"])


def test_a_single_node_training_job_has_no_workers(build: Callable[..., dict[str, Any]]) -> None:
    job = build(Stage.TRAIN, training={"nodes": 1, "gpusPerNode": 2})
    assert "Worker" not in job["spec"]["pytorchReplicaSpecs"]
    assert job["spec"]["nprocPerNode"] == "2"


def test_a_suspended_run_builds_suspended_children(build: Callable[..., dict[str, Any]]) -> None:
    assert build(Stage.REGEN, suspend=True)["spec"]["suspend"] is True
    assert build(Stage.TRAIN, suspend=True)["spec"]["runPolicy"]["suspend"] is True


def test_retries_get_a_new_name_and_attempt_label(build: Callable[..., dict[str, Any]]) -> None:
    job = build(Stage.AUDIT_TOKENS, attempt=3)
    assert job["metadata"]["name"] == "r1-audit-tokens-3"
    assert job["metadata"]["labels"]["dflash.dev/attempt"] == "3"
    assert pod_spec(job)["containers"][0]["env"]  # pods are labelled too
    assert job["spec"]["template"]["metadata"]["labels"]["dflash.dev/attempt"] == "3"


def test_spec_values_cannot_expand_environment_variables_in_args(
    build: Callable[..., dict[str, Any]],
) -> None:
    job = build(
        Stage.REGEN,
        regeneration={"engineArgs": {"extra": {"swap-space": "$(AWS_SECRET_ACCESS_KEY)"}}},
    )
    args = pod_spec(job)["containers"][0]["args"]
    assert "swap-space=$$(AWS_SECRET_ACCESS_KEY)" in args
    assert all("$(" not in arg.replace("$$(", "") for arg in args)
    assert commands.escape("a$b") == "a$$b"


def test_pvc_sources_are_mounted_read_only_and_passed_as_local_paths(
    build: Callable[..., dict[str, Any]],
) -> None:
    job = build(Stage.TOKENIZE, target={"model": "pvc://models/qwen3-8b"})
    pod = pod_spec(job)
    assert {
        "name": "pvc-0",
        "persistentVolumeClaim": {"claimName": "models", "readOnly": True},
    } in pod["volumes"]
    args = pod["containers"][0]["args"]
    assert args[args.index("--model") + 1] == "/mnt/pvc/models/qwen3-8b"


def test_the_cleanup_job_outlives_its_run_and_deletes_itself_later(
    build: Callable[..., dict[str, Any]],
) -> None:
    job = build(Stage.CLEANUP)
    assert "ownerReferences" not in job["metadata"]
    assert job["spec"]["ttlSecondsAfterFinished"] == 3600
    volume = next(v for v in pod_spec(job)["volumes"] if v["name"] == "config")
    assert volume["configMap"]["optional"] is True
    args = pod_spec(job)["containers"][0]["args"]
    assert args[args.index("--policy") + 1] == "Delete"


def test_the_prune_job_is_owned_by_its_run_and_deletes_only_intermediate_artifacts(
    build: Callable[..., dict[str, Any]],
) -> None:
    job = build(Stage.PRUNE)
    assert job["metadata"]["name"] == "r1-prune"
    assert job["metadata"]["ownerReferences"][0]["name"] == "r1"
    assert "ttlSecondsAfterFinished" not in job["spec"]
    args = pod_spec(job)["containers"][0]["args"]
    assert args[:3] == ["python", "-m", "dflash_trainer.cleanup"]
    assert args[args.index("--policy") + 1] == "DeleteIntermediate"
    assert args[args.index("--run-root") + 1] == ROOT


def test_the_trainer_may_get_and_patch_its_own_runs_status_and_nothing_else() -> None:
    account, role, binding = build_trainer_access(RUN)
    assert account["kind"] == "ServiceAccount" and account["metadata"]["name"] == "r1-trainer"
    assert role["rules"] == [
        {
            "apiGroups": ["dflash.dev"],
            "resources": ["dflashruns/status"],
            "resourceNames": ["r1"],
            "verbs": ["get", "patch"],
        }
    ]
    assert binding["roleRef"]["name"] == "r1-trainer"
    assert binding["subjects"] == [
        {"kind": "ServiceAccount", "name": "r1-trainer", "namespace": "ml"}
    ]
    for obj in (account, role, binding):
        assert obj["metadata"]["ownerReferences"][0]["uid"] == "uid-1"


def test_the_config_map_holds_every_file_the_stages_read(
    make_spec: Callable[..., dict[str, Any]],
) -> None:
    spec = parse_spec(make_spec(
        target={"model": "Qwen/Qwen3-8B", "thinking": False, "chatTemplate": "{{ messages }}"},
        drafter={"numLayers": 5, "slidingWindow": {"size": 2048, "layers": 4}},
        training={"nodes": 1, "strategy": "fsdp", "learningRate": 0.001},
    ))  # fmt: skip
    config = build_config_map(RUN, spec, ROOT)
    data = config["data"]
    assert set(data) == {
        "sources.yaml",
        "thresholds.yaml",
        "train.yaml",
        "eval.yaml",
        "chat_template.jinja",
    }
    assert yaml.safe_load(data["sources.yaml"])["sources"][0]["name"] == "chat"
    assert yaml.safe_load(data["thresholds.yaml"])["expectThinking"] is False
    train = yaml.safe_load(data["train.yaml"])
    assert train["run_root"] == ROOT
    assert train["distributed"]["strategy"] == "fsdp2"
    assert train["optim"]["lr"] == 0.001
    assert train["drafter"]["layer_types"] == ["sliding_attention"] * 4 + ["full_attention"]
    assert yaml.safe_load(data["eval.yaml"])["drafter_uri"] == f"{ROOT}/final"
    assert config["metadata"]["annotations"]["dflash.dev/config-hash"]


def test_a_dflash2_drafter_reaches_the_trainers_config_and_a_dflash_one_is_unchanged(
    make_spec: Callable[..., dict[str, Any]],
) -> None:
    from dflash_trainer.train.config import TrainConfig

    def train_file(drafter: dict[str, Any]) -> dict[str, Any]:
        data = build_config_map(RUN, parse_spec(make_spec(drafter=drafter)), ROOT)["data"]
        return dict(yaml.safe_load(data["train.yaml"]))

    plain = train_file({"blockSize": 8})
    assert "dflash2" not in plain["drafter"]
    defaults = train_file({"blockSize": 8, "architecture": "dflash2"})["drafter"]["dflash2"]
    assert defaults == {"conv_kernel_size": 2, "conv_group_size": 16, "selector_rank": 256,
                        "selector_top_k": 16, "selector_loss_weight": 1.0}  # fmt: skip
    tuned = train_file({"blockSize": 8, "architecture": "dflash2",
                        "dflash2": {"selectorRank": 64, "selectorLossWeight": 0.5}})  # fmt: skip
    assert tuned["drafter"]["dflash2"]["selector_rank"] == 64
    # The trainer reads the section the operator writes (its schema forbids unknown keys).
    parsed = TrainConfig.model_validate(tuned)
    assert parsed.drafter.dflash2 is not None and parsed.drafter.dflash2.selector_rank == 64


def test_the_config_hash_changes_with_the_thresholds_only_when_they_change(
    make_spec: Callable[..., dict[str, Any]],
) -> None:
    one = build_config_map(RUN, parse_spec(make_spec()), ROOT)["metadata"]["annotations"]
    same = build_config_map(RUN, parse_spec(make_spec()), ROOT)["metadata"]["annotations"]
    other = build_config_map(RUN, parse_spec(make_spec(audit={"maxStubRate": 0.5})), ROOT)[
        "metadata"
    ]["annotations"]
    assert one == same
    assert one != other


# --- identity, registries, the Hub ------------------------------------------------------------
def test_only_the_model_stage_talks_to_the_hub_and_gets_the_token(
    build: Callable[..., dict[str, Any]],
) -> None:
    token = {"hfTokenSecretRef": {"name": "hf", "key": "token"}, "target": {"model": "org/m"}}
    model = env_of(build(Stage.MODEL, **token))
    assert model["HF_TOKEN"] == {"secretKeyRef": {"name": "hf", "key": "token"}}
    assert "HF_HUB_OFFLINE" not in model
    for stage in (Stage.REGEN, Stage.TOKENIZE, Stage.AUDIT_TOKENS, Stage.TRAIN):
        env = env_of(build(stage, **token))
        assert "HF_TOKEN" not in env, stage  # they load the run's copy
        assert env["HF_HUB_OFFLINE"] == env["TRANSFORMERS_OFFLINE"] == "1", stage
    offline = env_of(build(Stage.TRAIN, target={"model": "s3://models/qwen3-8b/"}))
    assert offline["HF_HUB_OFFLINE"] == offline["TRANSFORMERS_OFFLINE"] == "1"
    assert "HF_TOKEN" not in offline
    cleanup = env_of(build(Stage.CLEANUP, **token))
    assert "HF_TOKEN" not in cleanup  # S3 only


def test_a_hub_target_is_copied_once_and_every_stage_loads_the_copy(
    build: Callable[..., dict[str, Any]],
) -> None:
    hub = {"target": {"model": "Qwen/Qwen3-8B", "revision": "main"}}
    job = build(Stage.MODEL, **hub)
    args = pod_spec(job)["containers"][0]["args"]
    assert args[:3] == ["python", "-m", "dflash_trainer.model.fetch"]
    assert args[args.index("--model") + 1] == "Qwen/Qwen3-8B"
    assert args[args.index("--revision") + 1] == "main"
    copy = f"{ROOT}/model"
    assert args[args.index("--dest") + 1] == copy
    assert job["spec"]["completions"] == 1
    # A CPU pod: the download never holds a GPU.
    limits = pod_spec(job)["containers"][0]["resources"]["limits"]
    assert not any("gpu" in key for key in limits)
    for stage in (Stage.REGEN, Stage.AUDIT_COMPLETIONS, Stage.TOKENIZE):
        stage_args = pod_spec(build(stage, **hub))["containers"][0]["args"]
        assert stage_args[stage_args.index("--model") + 1] == copy, stage
        assert "--revision" not in stage_args, stage  # the copy is pinned to one commit
    mine = {"target": {"model": "s3://models/qwen3-8b", "revision": "v1"}}
    stage_args = pod_spec(build(Stage.TOKENIZE, **mine))["containers"][0]["args"]
    assert stage_args[stage_args.index("--model") + 1] == "s3://models/qwen3-8b"


def test_the_pipeline_starts_with_the_model_copy_only_for_a_hub_target(
    make_spec: Callable[..., dict[str, Any]],
) -> None:
    hub = build_pipeline(parse_spec(make_spec(target={"model": "Qwen/Qwen3-8B"})))
    assert hub[0] == Stage.MODEL
    assert hub.count(Stage.MODEL) == 1
    for model in ("s3://models/qwen3-8b", "pvc://models/qwen3-8b"):
        assert Stage.MODEL not in build_pipeline(parse_spec(make_spec(target={"model": model})))


def test_image_pull_secrets_come_from_the_pool_and_the_spec(
    pools: PoolsConfig, make_spec: Callable[..., dict[str, Any]]
) -> None:
    from dflash_operator.pools import parse_pools

    from .conftest import POOLS

    raw = {**POOLS, "nodePools": {**POOLS["nodePools"]}}
    raw["nodePools"]["b200"] = {**raw["nodePools"]["b200"], "imagePullSecrets": ["nvcr", "ghcr"]}
    spec = parse_spec(make_spec(imagePullSecrets=[{"name": "ghcr"}, {"name": "team"}]))
    config = parse_pools(raw)
    placements, _ = place_stages(spec, build_pipeline(spec), config)
    ctx = StageContext(RUN, spec, ROOT, placements, PlanSettings())
    pod = pod_spec(build_stage_child(ctx, Stage.REGEN, 1, False))
    assert pod["imagePullSecrets"] == [{"name": "nvcr"}, {"name": "ghcr"}, {"name": "team"}]
    audit = pod_spec(build_stage_child(ctx, Stage.AUDIT_COMPLETIONS, 1, False))
    assert audit["imagePullSecrets"] == [{"name": "ghcr"}, {"name": "team"}]


def test_stage_pods_run_as_the_named_account_without_a_token_and_training_as_its_own(
    build: Callable[..., dict[str, Any]],
) -> None:
    regen = pod_spec(build(Stage.REGEN, serviceAccountName="s3-reader"))
    assert regen["serviceAccountName"] == "s3-reader"
    assert regen["automountServiceAccountToken"] is False
    train = pod_spec(build(Stage.TRAIN, serviceAccountName="s3-reader"))
    assert train["serviceAccountName"] == "r1-trainer"
    assert train["automountServiceAccountToken"] is True
    plain = pod_spec(build(Stage.TOKENIZE))
    assert "serviceAccountName" not in plain and plain["automountServiceAccountToken"] is False


def test_the_trainer_account_carries_the_specs_annotations() -> None:
    arn = {"eks.amazonaws.com/role-arn": "arn:aws:iam::123456789012:role/dflash"}
    account, _role, _binding = build_trainer_access(RUN, arn)
    assert account["metadata"]["annotations"] == arn


def test_a_ca_bundle_is_mounted_in_every_stage_pod_and_named_by_aws_ca_bundle(
    build: Callable[..., dict[str, Any]],
) -> None:
    storage = {"bucket": "artifacts", "caBundle": {"configMapName": "corp-ca", "key": "bundle.pem"}}
    for stage in (Stage.REGEN, Stage.TRAIN, Stage.CLEANUP):
        manifest = build(stage, storage=storage)
        pod = pod_spec(manifest)
        volume = next(v for v in pod["volumes"] if v["name"] == "s3-ca")
        assert volume["configMap"] == {
            "name": "corp-ca",
            "items": [{"key": "bundle.pem", "path": "ca.crt"}],
        }
        mount = next(m for m in pod["containers"][0]["volumeMounts"] if m["name"] == "s3-ca")
        assert mount == {"name": "s3-ca", "mountPath": "/etc/dflash-ca", "readOnly": True}
        assert env_of(manifest)["AWS_CA_BUNDLE"] == "/etc/dflash-ca/ca.crt"
    secret = pod_spec(
        build(Stage.REGEN, storage={"bucket": "artifacts", "caBundle": {"secretName": "ca"}})
    )
    volume = next(v for v in secret["volumes"] if v["name"] == "s3-ca")
    assert volume["secret"]["secretName"] == "ca"


@pytest.mark.parametrize("bundle", [{}, {"configMapName": "a", "secretName": "b"}])
def test_a_ca_bundle_names_exactly_one_source(
    make_spec: Callable[..., dict[str, Any]], bundle: dict[str, str]
) -> None:
    from dflash_operator.api.validation import SpecError

    with pytest.raises(SpecError, match="name exactly one of configMapName and secretName"):
        parse_spec(make_spec(storage={"bucket": "artifacts", "caBundle": bundle}))


def test_pool_env_and_offline_mode_never_duplicate_an_env_name(
    pools: PoolsConfig, make_spec: Callable[..., dict[str, Any]]
) -> None:
    """The API server refuses a pod with two env entries of one name (the demo's pool sets
    HF_HUB_OFFLINE itself)."""
    from dflash_operator.pools import parse_pools

    from .conftest import POOLS

    raw = {**POOLS, "nodePools": {**POOLS["nodePools"]}}
    raw["nodePools"]["rtx-pro-6000"] = {
        **raw["nodePools"]["rtx-pro-6000"],
        "env": {"HF_HUB_OFFLINE": "1", "HF_TOKEN": "from-the-pool"},
    }
    raw["nodePools"]["cpu"] = {**raw["nodePools"]["cpu"], "env": {"HF_TOKEN": "from-the-pool"}}
    spec = parse_spec(
        make_spec(target={"model": "s3://models/qwen/"}, hfTokenSecretRef={"name": "hf"})
    )
    placements, _ = place_stages(spec, build_pipeline(spec), parse_pools(raw))
    ctx = StageContext(RUN, spec, ROOT, placements, PlanSettings())
    env = pod_spec(build_stage_child(ctx, Stage.TRAIN, 1, False))["containers"][0]["env"]
    names = [e["name"] for e in env]
    assert len(names) == len(set(names)), names
    # The model stage (a Hub target) gets the Secret's token: the reference wins over a plain value.
    hub = parse_spec(make_spec(target={"model": "org/m"}, hfTokenSecretRef={"name": "hf"}))
    placements, _ = place_stages(hub, build_pipeline(hub), parse_pools(raw))
    ctx = StageContext(RUN, hub, ROOT, placements, PlanSettings())
    env = pod_spec(build_stage_child(ctx, Stage.MODEL, 1, False))["containers"][0]["env"]
    names = [e["name"] for e in env]
    assert len(names) == len(set(names)), names
    token = next(e for e in env if e["name"] == "HF_TOKEN")
    assert "valueFrom" in token
    # A pool that turns the Hub on (a mirror for the model stage) never turns it on for a stage
    # that loads the run's copy.
    raw["nodePools"]["cpu"]["env"] = {"HF_HUB_OFFLINE": "0", "HF_ENDPOINT": "http://mirror"}
    placements, _ = place_stages(hub, build_pipeline(hub), parse_pools(raw))
    ctx = StageContext(RUN, hub, ROOT, placements, PlanSettings())
    for stage, offline in ((Stage.MODEL, "0"), (Stage.TOKENIZE, "1")):
        env = pod_spec(build_stage_child(ctx, stage, 1, False))["containers"][0]["env"]
        values = {e["name"]: e.get("value") for e in env}
        assert values["HF_HUB_OFFLINE"] == offline, stage
        assert values["HF_ENDPOINT"] == "http://mirror"
