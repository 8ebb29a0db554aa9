"""Volumes become directories in the pod's sandbox, and container paths in the command, args
and env are rewritten to them, so configMap, secret and emptyDir mounts work as in a pod."""

from __future__ import annotations

import json
from typing import Any

from dflash_dev.executor.testing import LocalExecutor, container_state
from dflash_dev.kube_wait import get_json, wait_for

USE_VOLUMES = """
import json, os, pathlib, sys
config_dir, secret_file, scratch = sys.argv[1], os.environ["SECRET_FILE"], pathlib.Path(os.environ["SCRATCH"])
(scratch / "out.txt").write_text("written")
result = {
    "train": open(f"{config_dir}/train.yaml").read(),
    "secret": open(secret_file).read(),
    "scratch": (scratch / "out.txt").read_text(),
    "shared": open("/cache/out.txt").read(),
    "config_dir": config_dir,
    "s3_uri": os.environ["S3_URI"],
}
open("/dev/termination-log", "w").write(json.dumps(result))
"""


def test_configmap_and_secret_volumes_are_readable_and_an_emptydir_is_writable(
    executor: LocalExecutor, namespace: str
) -> None:
    config = {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": "run-config"},
        "data": {"train.yaml": "steps: 3\n"},
    }
    secret = {
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": {"name": "hf"},
        "stringData": {"token": "hf_abc"},
    }
    pod = executor.pod(
        "volumes",
        ["python", "-c", USE_VOLUMES, "/etc/dflash"],
        volumes=[
            {"name": "config", "configMap": {"name": "run-config"}},
            {
                "name": "hf",
                "secret": {"secretName": "hf", "items": [{"key": "token", "path": "hf-token"}]},
            },
            {"name": "scratch", "emptyDir": {}},
            {"name": "shm", "emptyDir": {"medium": "Memory"}},
        ],
        container={
            "env": [
                {"name": "SECRET_FILE", "value": "/var/secrets/hf/hf-token"},
                {"name": "SCRATCH", "value": "/scratch"},
                {"name": "S3_URI", "value": "s3://bucket/scratch/x"},
            ],
            "volumeMounts": [
                {"name": "config", "mountPath": "/etc/dflash"},
                {"name": "hf", "mountPath": "/var/secrets/hf", "readOnly": True},
                {"name": "scratch", "mountPath": "/scratch"},
                {"name": "scratch", "mountPath": "/cache"},  # the same emptyDir twice
                {"name": "shm", "mountPath": "/dev/shm"},
            ],
        },
    )
    executor.apply(namespace, config, secret, pod)
    done = executor.wait_phase(namespace, "volumes", "Succeeded", "Failed")
    assert done["status"]["phase"] == "Succeeded", executor.describe(namespace, "volumes")
    seen = json.loads(container_state(done)["terminated"]["message"])
    sandbox = executor.state_dir / "pods" / namespace / "volumes" / done["metadata"]["uid"]
    assert seen.pop("config_dir") == str(sandbox / "volumes" / "config")
    assert seen == {
        "train": "steps: 3\n",
        "secret": "hf_abc",
        "scratch": "written",
        "shared": "written",
        "s3_uri": "s3://bucket/scratch/x",  # a URI is not a path: never rewritten
    }


def test_a_volume_of_an_unsupported_type_keeps_the_pod_waiting_with_a_clear_message(
    executor: LocalExecutor, namespace: str
) -> None:
    pod = executor.pod(
        "host-path",
        ["python", "-c", "pass"],
        volumes=[{"name": "data", "hostPath": {"path": "/srv/data"}}],
        container={"volumeMounts": [{"name": "data", "mountPath": "/data"}]},
    )
    executor.apply(namespace, pod)
    waiting = executor.wait_until(
        "a config error",
        namespace,
        "host-path",
        lambda p: "waiting" in container_state(p) and container_state(p)["waiting"].get("message"),
    )
    message = container_state(waiting)["waiting"]["message"]
    assert "volume data: type hostPath is not supported" in message
    assert "emptyDir" in message  # says what is supported


def test_a_script_mounted_from_a_configmap_runs_as_the_command(
    executor: LocalExecutor, namespace: str
) -> None:
    config = {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": "scripts"},
        # Paths inside files are not rewritten: the script gets its paths from env or args.
        "data": {"run.sh": '#!/bin/sh\necho "running as $0" > "$RESULT"\n'},
    }
    pod = executor.pod(
        "script",
        ["/opt/scripts/run.sh"],
        volumes=[{"name": "scripts", "configMap": {"name": "scripts", "defaultMode": 0o755}}],
        container={
            "volumeMounts": [{"name": "scripts", "mountPath": "/opt/scripts"}],
            "env": [{"name": "RESULT", "value": "/dev/termination-log"}],
        },
    )
    executor.apply(namespace, config, pod)
    done = executor.wait_phase(namespace, "script", "Succeeded", "Failed")
    assert done["status"]["phase"] == "Succeeded", executor.describe(namespace, "script")
    assert container_state(done)["terminated"]["message"].endswith("/volumes/scripts/run.sh\n")


def _mount_events(executor: LocalExecutor, namespace: str, pod: str) -> dict[str, int]:
    """FailedMount Warning events of the pod: message -> count."""
    items = get_json(
        executor.cluster, "events", "-n", namespace, "--field-selector",
        f"involvedObject.kind=Pod,involvedObject.name={pod},reason=FailedMount",
    )["items"]  # fmt: skip
    return {e["message"]: int(e.get("count") or 1) for e in items if e["type"] == "Warning"}


def test_a_missing_secret_volume_and_config_map_key_are_failed_mounts_as_on_a_kubelet(
    executor: LocalExecutor, namespace: str
) -> None:
    """kubelet 1.36 sets volumes up before it resolves env: a Secret volume whose Secret is
    missing, or a ConfigMap volume whose listed key is missing, is a FailedMount event per
    volume (`MountVolume.SetUp failed for volume "v" : <the plugin's error>`) and a pod
    Pending with its container in ContainerCreating, never CreateContainerConfigError, even
    when an env reference is missing too. Retried: the pod starts once both exist."""
    config: dict[str, Any] = {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": "settings"},
        "data": {"other": "x"},
    }
    env = [{"name": "TOKEN", "valueFrom": {"secretKeyRef": {"name": "later", "key": "token"}}}]
    pod = executor.pod(
        "mounts",
        ["python", "-c", "print(open('/ca/ca.crt').read(), open('/cfg/mode').read())"],
        volumes=[
            {"name": "ca", "secret": {"secretName": "later", "items": [{"key": "ca.crt", "path": "ca.crt"}]}},
            {"name": "cfg", "configMap": {"name": "settings", "items": [{"key": "mode", "path": "mode"}]}},
        ],
        container={
            "env": env,
            "volumeMounts": [{"name": "ca", "mountPath": "/ca"}, {"name": "cfg", "mountPath": "/cfg"}],
        },
    )  # fmt: skip
    executor.apply(namespace, config, pod)

    expected = {
        'MountVolume.SetUp failed for volume "ca" : secret "later" not found',
        'MountVolume.SetUp failed for volume "cfg" : '
        "configmap references non-existent config key: mode",
    }
    wait_for(
        "both FailedMount events",
        lambda: set(_mount_events(executor, namespace, "mounts")) == expected,
    )
    stuck = executor.get_pod(namespace, "mounts")
    assert stuck["status"]["phase"] == "Pending"
    assert container_state(stuck) == {"waiting": {"reason": "ContainerCreating"}}
    assert "podIP" not in stuck["status"]  # kubelet makes no sandbox before the volumes
    conditions = {c["type"]: c["status"] for c in stuck["status"]["conditions"]}
    assert conditions["PodReadyToStartContainers"] == "False"
    # kubelet posts them again at each retry of the mount: the events' count grows.
    wait_for(
        "a repeated FailedMount",
        lambda: max(_mount_events(executor, namespace, "mounts").values()) > 1,
    )

    secret = {"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "later"},
              "stringData": {"ca.crt": "CERT", "token": "abc"}}  # fmt: skip
    config["data"]["mode"] = "strict"
    executor.apply(namespace, secret, config)
    done = executor.wait_phase(namespace, "mounts", "Succeeded", "Failed")
    assert done["status"]["phase"] == "Succeeded", executor.describe(namespace, "mounts")
    assert "CERT strict" in executor.logs(namespace, "mounts")
