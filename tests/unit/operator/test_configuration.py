"""The operator's process config and pools file: valid input loads, bad input is answered
with the setting or key, its value, and what is accepted."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

import pytest
import yaml
from dflash_operator.config import ConfigError, OperatorConfig, add_flags, load_config
from dflash_operator.pools import PoolsError, load_pools, parse_pools

CHART_VALUES = Path(__file__).resolve().parents[3] / "charts" / "dflash-operator" / "values.yaml"


def flags(*argv: str) -> argparse.Namespace:
    parser = argparse.ArgumentParser()
    add_flags(parser)
    return parser.parse_args(list(argv))


def test_defaults_watch_the_whole_cluster() -> None:
    config = load_config(env={})
    assert config == OperatorConfig()
    assert config.clusterwide
    assert config.liveness_endpoint == "http://0.0.0.0:8080/healthz"


def test_flags_win_over_the_environment() -> None:
    config = load_config(
        env={"DFLASH_WORKERS": "2", "DFLASH_NAMESPACES": "a,b"}, flags=flags("--workers", "6")
    )
    assert config.workers == 6
    assert config.namespaces == ("a", "b")
    assert not config.clusterwide


def test_namespaces_can_be_repeated_as_flags() -> None:
    assert load_config(
        env={}, flags=flags("--namespaces", "a", "--namespaces", "b,c")
    ).namespaces == ("a", "b", "c")


@pytest.mark.parametrize(
    ("env", "words"),
    [
        ({"DFLASH_WORKERS": "0"}, ["--workers / DFLASH_WORKERS='0'", "greater than or equal to 1"]),
        ({"DFLASH_RESYNC_SECONDS": "soon"}, ["DFLASH_RESYNC_SECONDS='soon'", "valid number"]),
        ({"DFLASH_LOG_FORMAT": "xml"}, ["DFLASH_LOG_FORMAT='xml'", "'text' or 'json'"]),
        ({"DFLASH_NAMESPACES": "Bad_Name"}, ["'Bad_Name'", "namespace name"]),
        (
            {"DFLASH_WATCH_CLIENT_TIMEOUT": "100", "DFLASH_WATCH_SERVER_TIMEOUT": "200"},
            ["--watch-client-timeout=100", "larger than"],
        ),
        ({"DFLASH_TRAINER_IMAGE": "not an image"}, ["DFLASH_TRAINER_IMAGE='not an image'"]),
    ],
)
def test_a_bad_setting_is_named_with_its_value(env: dict[str, str], words: list[str]) -> None:
    with pytest.raises(ConfigError) as caught:
        load_config(env=env)
    for word in words:
        assert word in str(caught.value)


def test_the_charts_default_pools_are_valid_pools() -> None:
    values = yaml.safe_load(CHART_VALUES.read_text())
    defaults = {k: v for k, v in values["defaultPools"].items() if v}
    pools = parse_pools({"nodePools": values["nodePools"], "defaults": defaults})
    assert pools.names() == "b200, cpu, rtx-pro-6000"
    assert pools.node_pools["b200"].gpus_per_node == 8
    assert pools.node_pools["rtx-pro-6000"].gpus_per_node == 4
    assert not pools.node_pools["cpu"].has_gpus


def pools_doc(**pool: Any) -> dict[str, Any]:
    return {
        "nodePools": {"gpu": {"gpusPerNode": 8, **pool}},
        "defaults": {
            "regeneration": "gpu",
            "audit": "gpu",
            "tokenization": "gpu",
            "training": "gpu",
        },
    }


@pytest.mark.parametrize(
    ("doc", "words"),
    [
        (pools_doc(gpusPerNode=-1), ["nodePools.gpu.gpusPerNode=-1"]),
        (pools_doc(gpuCount=8), ["nodePools.gpu.gpuCount", "Extra inputs are not permitted"]),
        (pools_doc(shmSize="lots"), ["nodePools.gpu.shmSize='lots'"]),
        (pools_doc(extraResources={"nvidia.com/gpu": 1}), ["may not contain 'nvidia.com/gpu'"]),
        (pools_doc(env={"1BAD": "x"}), ["'1BAD' is not a valid environment variable name"]),
        (
            {
                "nodePools": {"gpu": {}},
                "defaults": {
                    "regeneration": "h100",
                    "audit": "gpu",
                    "tokenization": "gpu",
                    "training": "gpu",
                },
            },
            ["defaults.regeneration='h100' is not a configured pool", "configured pools: gpu"],
        ),
        (
            {
                "nodePools": {"GPU": {}},
                "defaults": {
                    "regeneration": "GPU",
                    "audit": "GPU",
                    "tokenization": "GPU",
                    "training": "GPU",
                },
            },
            ["'GPU' is not a pool name"],
        ),
    ],
)
def test_a_bad_pools_file_names_the_key_and_value(doc: dict[str, Any], words: list[str]) -> None:
    with pytest.raises(PoolsError) as caught:
        parse_pools(doc, "pools.yaml")
    for word in words:
        assert word in str(caught.value)
    assert str(caught.value).startswith("pools.yaml: ")


def test_a_missing_pools_file_says_which_setting_points_to_it(tmp_path: Path) -> None:
    with pytest.raises(PoolsError) as caught:
        load_pools(tmp_path / "nope.yaml")
    assert "nope.yaml" in str(caught.value)
    assert "DFLASH_POOLS_FILE" in str(caught.value)


def test_a_pools_file_that_is_not_yaml_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "pools.yaml"
    path.write_text("nodePools: [unclosed")
    with pytest.raises(PoolsError, match="not valid YAML"):
        load_pools(path)
