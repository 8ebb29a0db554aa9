"""Image tests (`make test-images`, after `make images`): every check runs inside a built image,
as the image's user, with a read-only root filesystem and a tmpfs at /tmp only
(dflash_dev.images.launch). Plain `make test` skips them: they need the images, which take
minutes and gigabytes to build."""

from __future__ import annotations

import os
import secrets
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from dflash_dev.images.build import image_ref
from dflash_dev.images.engine import Engine, detect_engine, image_exists

ENABLED = os.environ.get("DFLASH_IMAGE_TESTS") == "1"
REGISTRY = os.environ.get("DFLASH_IMAGE_REGISTRY", "ghcr.io/dflash-dev")
TAG = os.environ.get("DFLASH_IMAGE_TAG", "")
# The images under test (`make test-images IMAGES=...`); CI leaves out regen when its inputs
# are unchanged (docs/images.md, "CI"): then regen's commands run in the trainer image.
TESTED = os.environ.get("DFLASH_IMAGES", "operator trainer regen").split()


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    if ENABLED:
        return
    skip = pytest.mark.skip(reason="image tests run with `make test-images` after `make images`")
    for item in items:
        if "tests/images/" in str(item.fspath):
            item.add_marker(skip)


@pytest.fixture(scope="session")
def engine() -> Engine:
    return detect_engine()


class BuiltImages(dict[str, str]):
    """operator/trainer/regen -> the built image; using one that is not built fails with what
    to run."""

    def __init__(self, engine: Engine, found: dict[str, str]) -> None:
        super().__init__(found)
        self.engine = engine

    def __getitem__(self, name: str) -> str:
        ref = super().__getitem__(name)
        assert image_exists(self.engine, ref), (
            f"{ref} is not built: run `make images` (`make base-images` first where the "
            "bases' registries are unreachable)"
        )
        return ref


@pytest.fixture(scope="session")
def refs(engine: Engine) -> BuiltImages:
    from dflash_dev.version import read_version

    tag = TAG or read_version()
    return BuiltImages(
        engine, {n: image_ref(n, REGISTRY, tag) for n in ("operator", "trainer", "regen")}
    )


# ---------------------------------------------------------------- the image e2e (make test-images-e2e)
@pytest.fixture(scope="session")
def image_executor(cluster: Any, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    """This session's own executor in image mode: every pod runs from its image."""
    from dflash_dev.executor.testing import start_test_executor

    executor = start_test_executor(
        cluster, cluster.kubeconfig, tmp_path_factory.mktemp("executor"), "--from-images"
    )
    yield executor
    executor.stop()


@pytest.fixture
def image_harness(
    cluster: Any,
    s3: Any,
    image_executor: Any,
    namespace: str,
    tmp_path: Path,
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[Any]:
    from dflash_dev import operator_local
    from dflash_dev.demo import assets
    from dflash_dev.demo.harness import DemoHarness

    operator_local.install(cluster.kubeconfig)
    kubeconfig = operator_local.token_kubeconfig(
        cluster.kubeconfig, tmp_path_factory.mktemp("operator") / "operator.kubeconfig"
    )
    harness = DemoHarness(
        cluster, s3, image_executor, kubeconfig, tmp_path, namespace,
        bucket=f"e2e-{secrets.token_hex(5)}", target=assets.ensure_tiny_target(),
    )  # fmt: skip
    harness.prepare_namespace(namespace)
    yield harness
    harness.stop()
