"""Free ports are really free, and the fake node pools look like the real GPU machines."""

from __future__ import annotations

import socket

from dflash_dev.nodes import BLOCK_LABEL, DEFAULT_POOLS, RACK_LABEL, build_nodes
from dflash_dev.ports import free_port, free_ports, is_listening


def test_a_busy_port_is_never_handed_out() -> None:
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        taken = busy.getsockname()[1]
        ports = free_ports(20)
        assert taken not in ports
        assert len(set(ports)) == 20
        assert is_listening(taken)


def test_free_ports_records_every_port_in_the_set_it_is_given() -> None:
    taken: set[int] = set()
    first = free_port(taken)
    second = free_port(taken)
    assert taken == {first, second}


def test_free_port_leaves_room_for_a_grpc_port_above_it() -> None:
    assert free_port() + 10000 < 65535


def test_default_pools_match_the_design() -> None:
    nodes = {n["metadata"]["name"]: n for n in build_nodes()}
    assert sorted(nodes) == [
        "b200-0", "b200-1", "b200-2", "b200-3", "cpu-0", "rtx-pro-6000-0", "rtx-pro-6000-1"
    ]  # fmt: skip
    b200 = nodes["b200-0"]
    assert b200["metadata"]["labels"]["nvidia.com/gpu.product"] == "NVIDIA-B200"
    assert b200["status"]["allocatable"]["nvidia.com/gpu"] == "8"
    assert b200["spec"]["taints"] == [
        {"key": "nvidia.com/gpu", "value": "present", "effect": "NoSchedule"}
    ]
    rtx = nodes["rtx-pro-6000-1"]
    assert (
        rtx["metadata"]["labels"]["nvidia.com/gpu.product"]
        == "NVIDIA-RTX-PRO-6000-Blackwell-Server-Edition"
    )
    assert rtx["status"]["capacity"]["nvidia.com/gpu"] == "4"
    cpu = nodes["cpu-0"]
    assert "nvidia.com/gpu" not in cpu["status"]["capacity"]
    assert cpu["spec"]["taints"] == []
    assert all(
        n["metadata"]["annotations"] == {"kwok.x-k8s.io/node": "fake"} for n in nodes.values()
    )
    assert {p.name for p in DEFAULT_POOLS} == {"b200", "rtx-pro-6000", "cpu"}


def test_the_b200_nodes_are_two_racks_of_two_in_one_block_and_the_cpu_node_has_no_topology() -> (
    None
):
    nodes = {n["metadata"]["name"]: n["metadata"]["labels"] for n in build_nodes()}
    racks = {name: labels.get(RACK_LABEL) for name, labels in nodes.items()}
    assert racks["b200-0"] == racks["b200-1"] == "block-0-rack-0"
    assert racks["b200-2"] == racks["b200-3"] == "block-0-rack-1"
    assert {nodes[f"b200-{i}"][BLOCK_LABEL] for i in range(4)} == {"block-0"}
    assert racks["rtx-pro-6000-0"] == racks["rtx-pro-6000-1"] == "block-1-rack-0"
    assert BLOCK_LABEL not in nodes["cpu-0"] and RACK_LABEL not in nodes["cpu-0"]
