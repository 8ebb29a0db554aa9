"""Every example applies cleanly, and the server fills in exactly the models' defaults."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml
from dflash_operator.api import parse_run
from dflash_operator.api.naming import MAX_RUN_NAME_LENGTH
from dflash_operator.api.reference import MINIMAL_EXAMPLE

EXAMPLES = sorted((Path(__file__).parents[3] / "examples").glob("*.yaml"))


@pytest.mark.parametrize("path", EXAMPLES, ids=lambda p: p.name)
def test_the_example_applies_and_the_server_defaults_equal_the_model_defaults(
    runs: Any, path: Path
) -> None:
    manifest = yaml.safe_load(path.read_text())

    result = runs.apply(manifest)

    assert result.returncode == 0, result.stderr
    stored = runs.get(manifest["metadata"]["name"])
    assert stored["spec"] == parse_run(manifest).spec.to_api()


def test_the_minimal_example_of_the_reference_gets_every_default_from_the_server(runs: Any) -> None:
    manifest = yaml.safe_load(MINIMAL_EXAMPLE)
    del manifest["metadata"]["namespace"]

    assert runs.apply(manifest).returncode == 0

    spec = runs.get(manifest["metadata"]["name"])["spec"]
    assert spec["drafter"] == {"architecture": "dflash", "blockSize": 16, "numLayers": 5}
    assert spec["training"]["epochs"] == 6 and spec["training"]["anchorsPerSequence"] == 512
    assert spec["audit"]["stubTokens"] == 16
    assert spec["audit"]["tokens"]["maxLossMaskModeShare"] == pytest.approx(0.1)
    assert spec["storage"]["cleanupPolicy"] == "Retain"


def test_a_name_of_exactly_the_limit_is_accepted(runs: Any) -> None:
    manifest = yaml.safe_load(MINIMAL_EXAMPLE)
    del manifest["metadata"]["namespace"]
    manifest["metadata"]["name"] = ("drafter-" * 5)[:MAX_RUN_NAME_LENGTH]
    assert len(manifest["metadata"]["name"]) == MAX_RUN_NAME_LENGTH

    result = runs.apply(manifest)

    assert result.returncode == 0, result.stderr
