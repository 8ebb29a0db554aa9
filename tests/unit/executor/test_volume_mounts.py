"""The sandbox is built as kubelet sets volumes up: every volume whose Secret or ConfigMap (or a
listed key of one) is missing is reported in kubelet's FailedMount words, all of them at once;
an optional one is skipped. The objects come from a table (the cluster test is
tests/integration/executor/test_volumes.py)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from dflash_dev.executor.env import PodFacts
from dflash_dev.executor.errors import VolumeMountError
from dflash_dev.executor.sandbox import SandboxBuilder


class Objects:
    """Secrets and ConfigMaps by name (None: does not exist)."""

    def __init__(
        self, secrets: dict[str, dict[str, bytes]], maps: dict[str, dict[str, bytes]]
    ) -> None:
        self.secrets, self.maps = secrets, maps

    def secret(self, namespace: str, name: str) -> dict[str, bytes] | None:
        return self.secrets.get(name)

    def config_map(self, namespace: str, name: str) -> dict[str, bytes] | None:
        return self.maps.get(name)


def build(tmp_path: Path, volumes: list[dict[str, Any]], objects: Objects) -> Any:
    pod: dict[str, Any] = {"metadata": {"name": "p", "namespace": "ns", "uid": "u"},
           "spec": {"containers": [{"name": "c"}], "volumes": volumes}}  # fmt: skip
    facts = PodFacts(pod, "127.0.0.2", "127.0.0.1", {})
    builder = SandboxBuilder(objects, facts)  # type: ignore[arg-type]
    return builder.build(tmp_path / "sandbox", pod["spec"]["containers"][0])


def test_every_failing_volume_is_named_in_kubelets_words(tmp_path: Path) -> None:
    volumes = [
        {"name": "ca", "secret": {"secretName": "later"}},
        {"name": "key", "secret": {"secretName": "s3", "items": [{"key": "tls.crt", "path": "c"}]}},
        {"name": "cfg", "configMap": {"name": "settings", "items": [{"key": "mode", "path": "m"}]}},
        {"name": "gone", "configMap": {"name": "nowhere"}},
        {"name": "both", "projected": {"sources": [{"secret": {"name": "later"}}]}},
        {"name": "maybe", "secret": {"secretName": "later", "optional": True}},
        {"name": "fine", "configMap": {"name": "settings"}},
    ]
    objects = Objects({"s3": {"user": b"u"}}, {"settings": {"other": b"x"}})
    with pytest.raises(VolumeMountError) as failed:
        build(tmp_path, volumes, objects)
    assert failed.value.reason == "ContainerCreating"
    assert failed.value.failures == [
        ("ca", 'secret "later" not found'),
        ("key", "references non-existent secret key: tls.crt"),
        ("cfg", "configmap references non-existent config key: mode"),
        ("gone", 'configmap "nowhere" not found'),
        ("both", 'secret "later" not found'),
    ]
    assert str(failed.value).startswith(
        'MountVolume.SetUp failed for volume "ca" : secret "later" not found; '
    )


def test_once_the_objects_exist_the_volumes_are_filled(tmp_path: Path) -> None:
    volumes = [{"name": "ca", "secret": {"secretName": "later", "items": [{"key": "ca.crt", "path": "ca.crt"}]}}]  # fmt: skip
    sandbox = build(tmp_path, volumes, Objects({"later": {"ca.crt": b"CERT"}}, {}))
    assert (sandbox.volumes["ca"] / "ca.crt").read_bytes() == b"CERT"
