"""The plugin as kubectl runs it: found on PATH as `kubectl-dflash`, with kubectl's flags
(-n, --context, --kubeconfig, -o) and exit codes; unknown runs and bad flags get a message
that names what was wrong."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

from dflash_dev import binaries

VENV_BIN = Path(sys.executable).parent


def kubectl(plugin: Any, *args: str) -> subprocess.CompletedProcess[str]:
    """The real kubectl binary, which finds kubectl-dflash on PATH (kubectl's plugin mechanism)."""
    env = {**os.environ, "PATH": f"{VENV_BIN}{os.pathsep}{os.environ.get('PATH', '')}"}
    env["KUBECONFIG"] = str(plugin.cluster.kubeconfig)
    return subprocess.run(
        [str(binaries.cached_path("kubectl")), *args], env=env, capture_output=True, text=True,
        check=False, timeout=60,
    )  # fmt: skip


def test_kubectl_runs_the_plugin_and_passes_its_flags(plugin: Any) -> None:
    plugin.create_run("mid-training", "training")

    listed = kubectl(plugin, "plugin", "list")
    result = kubectl(plugin, "dflash", "list", "-n", plugin.namespace, "-o", "json")

    assert "kubectl-dflash" in listed.stdout
    assert result.returncode == 0, result.stderr
    assert [run["name"] for run in json.loads(result.stdout)] == ["mid-training"]


def test_an_unknown_run_exits_1_with_a_message_naming_it(plugin: Any) -> None:
    result = kubectl(plugin, "dflash", "status", "no-such-run", "-n", plugin.namespace)

    assert result.returncode == 1
    assert result.stderr == (
        f'error: dflashrun "no-such-run" not found in namespace "{plugin.namespace}". '
        f"List the runs there with: kubectl dflash list -n {plugin.namespace}\n"
    )
    assert "Traceback" not in result.stderr


def test_a_bad_flag_value_exits_2_naming_the_flag_and_what_is_accepted(plugin: Any) -> None:
    result = kubectl(plugin, "dflash", "approve", "some-run", "--gate", "answers")

    assert result.returncode == 2
    assert (
        "argument --gate: invalid choice: 'answers' (choose from prompts, canary, completions, tokens)"
        in result.stderr
        or (
            "argument --gate: invalid choice: 'answers' (choose from 'prompts', 'canary', 'completions', 'tokens')"
            in result.stderr
        )
    )


def test_without_n_the_namespace_of_the_kubeconfig_context_is_used(
    plugin: Any, tmp_path: Path
) -> None:
    plugin.create_run("mid-training", "training")
    kubeconfig = tmp_path / "kubeconfig"
    shutil.copy(plugin.cluster.kubeconfig, kubeconfig)
    plugin.cluster.kubectl(
        "config",
        "set-context",
        "--current",
        f"--namespace={plugin.namespace}",
        f"--kubeconfig={kubeconfig}",
    )

    result = kubectl(plugin, "dflash", "list", f"--kubeconfig={kubeconfig}")

    assert result.returncode == 0, result.stderr
    assert "mid-training" in result.stdout


def test_an_unknown_context_or_kubeconfig_is_a_clear_error(plugin: Any, tmp_path: Path) -> None:
    context = plugin.run("list", "--context", "no-such-context")
    missing = kubectl(plugin, "dflash", "list", f"--kubeconfig={tmp_path / 'nothing'}")

    assert context.code == 1
    assert (
        "error: cannot load the kubeconfig" in context.err
        and "(context 'no-such-context')" in context.err
    )
    assert missing.returncode == 1
    assert f"error: cannot load the kubeconfig {tmp_path / 'nothing'}" in missing.stderr


def test_an_unreachable_api_server_is_named_in_the_error(plugin: Any, tmp_path: Path) -> None:
    kubeconfig = tmp_path / "kubeconfig"
    shutil.copy(plugin.cluster.kubeconfig, kubeconfig)
    # Port 9 (discard) on loopback: nothing listens there.
    plugin.cluster.kubectl(
        "config",
        "set-cluster",
        "dead",
        "--server=https://127.0.0.1:9",
        f"--kubeconfig={kubeconfig}",
    )
    plugin.cluster.kubectl(
        "config", "set-context", "--current", "--cluster=dead", f"--kubeconfig={kubeconfig}"
    )

    result = kubectl(plugin, "dflash", "list", f"--kubeconfig={kubeconfig}")

    assert result.returncode == 1
    assert "error: cannot reach the Kubernetes API server at https://127.0.0.1:9" in result.stderr


def test_kubectl_flags_work_before_the_command_too(plugin: Any) -> None:
    plugin.create_run("mid-training", "training")

    result = kubectl(
        plugin, "dflash", "-n", plugin.namespace, "status", "mid-training", "-o", "yaml"
    )

    assert result.returncode == 0, result.stderr
    assert "phase: Training" in result.stdout
