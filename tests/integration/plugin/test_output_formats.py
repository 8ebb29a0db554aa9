"""kubectl's output conventions on live runs of the real control plane: -o wide, name and
jsonpath on `list` and `status`, -l label selectors checked by the API server, and completion
of run names, through the plugin and through kubectl's own plugin completion."""

from __future__ import annotations

import io
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

from dflash_dev import binaries
from dflash_operator.cli.main import main

VENV_BIN = Path(sys.executable).parent


def label(plugin: Any, run: str, *labels: str) -> None:
    plugin.cluster.kubectl("label", "dflashrun", run, "-n", plugin.namespace, *labels)


def set_usage(plugin: Any, run: str) -> None:
    """Node pools and GPU-hours as the operator writes them."""
    status = {
        "nodePools": "regen=b200 train=h100",
        "gpuHours": {"total": 3532.5, "byStage": {"regen": 412.5, "train": 3120.0}},
    }
    plugin.cluster.kubectl(
        "patch", "dflashrun", run, "-n", plugin.namespace, "--subresource=status",
        "--type=merge", "-p", json.dumps({"status": status}),
    )  # fmt: skip


def test_list_wide_adds_target_pools_gpu_hours_and_generations(plugin: Any) -> None:
    plugin.create_run("mid-training", "training")
    set_usage(plugin, "mid-training")

    result = plugin.run("list", "-o", "wide")

    header, row = (line.split() for line in result.out.splitlines())
    assert result.code == 0, result.err
    assert header == [
        "NAME", "PHASE", "PROGRESS", "AUDIT", "CHECKPOINT", "ETA", "AGE",
        "TARGET", "POOLS", "GPU-HOURS", "GENERATION",
    ]  # fmt: skip
    assert row[0] == "mid-training"
    assert row[-4:] == ["Qwen/Qwen3-8B", "regen=b200,train=h100", "3532.5", "1/1"]


def test_status_wide_adds_generation_pools_and_gpu_hours_by_stage(plugin: Any) -> None:
    plugin.create_run("mid-training", "training")
    set_usage(plugin, "mid-training")

    result = plugin.run("status", "mid-training", "-o", "wide")

    assert result.code == 0, result.err
    assert "Generation:  1 (observed 1)\n" in result.out
    assert "Pools:       regen=b200 train=h100" in result.out
    assert "GPU-hours:   3532.5 (regen 412.5, train 3120.0)" in result.out
    assert "Phase:       Training" in result.out


def test_name_output_is_kubectls(plugin: Any) -> None:
    plugin.create_run("mid-training", "training")
    plugin.create_run("stub-answers", "audit-failed")
    names = plugin.cluster.kubectl("get", "dflashrun", "-n", plugin.namespace, "-o", "name")

    listed = plugin.run("list", "-o", "name")
    one = plugin.run("status", "stub-answers", "-o", "name")

    assert listed.out == names.stdout
    assert listed.out == "dflashrun.dflash.dev/mid-training\ndflashrun.dflash.dev/stub-answers\n"
    assert one.out == "dflashrun.dflash.dev/stub-answers\n"


def test_jsonpath_reads_the_runs_as_kubectl_get_does(plugin: Any) -> None:
    plugin.create_run("mid-training", "training")
    plugin.create_run("stub-answers", "audit-failed")
    template = '{range .items[*]}{.metadata.name}={.status.phase}{"\\n"}{end}'
    ours = plugin.run("list", "-o", f"jsonpath={template}")
    kubectls = plugin.cluster.kubectl(
        "get", "dflashrun", "-n", plugin.namespace, "-o", f"jsonpath={template}"
    )

    names = plugin.run("list", "-o", "jsonpath={.items[*].metadata.name}")
    phase = plugin.run("status", "mid-training", "-o", "jsonpath={.status.phase}")
    kind = plugin.run("status", "mid-training", "-o", "jsonpath={.apiVersion} {.kind}")
    failed = plugin.run(
        "list", "-o", 'jsonpath={.items[?(@.status.phase=="AuditFailed")].metadata.name}'
    )

    assert ours.code == 0, ours.err
    assert ours.out == kubectls.stdout == "mid-training=Training\nstub-answers=AuditFailed\n"
    assert names.out == "mid-training stub-answers"
    assert phase.out == "Training"
    assert kind.out == "dflash.dev/v1alpha1 DFlashRun"
    assert failed.out == "stub-answers"


def test_label_selectors_go_to_the_api_server(plugin: Any) -> None:
    plugin.create_run("mid-training", "training")
    plugin.create_run("stub-answers", "audit-failed")
    label(plugin, "mid-training", "team=ml", "tier=prod")
    label(plugin, "stub-answers", "team=ml", "tier=test")

    prod = plugin.run("list", "-l", "team=ml,tier!=test", "-o", "name")
    both = plugin.run("list", "--selector", "tier in (prod,test)", "-o", "name")
    everywhere = plugin.run("list", "-A", "-l", "tier=test", namespace=False)
    nothing = plugin.run("list", "-l", "team=infra")

    assert prod.out == "dflashrun.dflash.dev/mid-training\n"
    assert both.out.count("dflashrun.dflash.dev/") == 2
    assert [line.split()[:2] for line in everywhere.out.splitlines()[1:]] == [
        [plugin.namespace, "stub-answers"]
    ]
    assert nothing.code == 0
    assert (
        nothing.err == f"No DFlashRuns found in namespace {plugin.namespace} matching team=infra.\n"
    )


def test_a_bad_selector_is_the_api_servers_error_naming_the_selector(plugin: Any) -> None:
    result = plugin.run("list", "-l", "team in (ml")

    assert result.code == 1
    assert result.err.startswith("error: invalid label selector 'team in (ml' (-l/--selector)")
    assert "the API server says:" in result.err
    assert len(result.err.splitlines()) == 1
    assert "Traceback" not in result.err


def test_bad_output_formats_are_usage_errors_that_name_them(plugin: Any) -> None:
    unknown = subprocess.run(
        [str(VENV_BIN / "kubectl-dflash"), "list", "-o", "table"],
        capture_output=True, text=True, check=False,
    )  # fmt: skip
    template = subprocess.run(
        [str(VENV_BIN / "kubectl-dflash"), "status", "x", "-o", "jsonpath={range .items[*]}"],
        capture_output=True, text=True, check=False,
    )  # fmt: skip

    assert unknown.returncode == 2
    assert unknown.stderr.splitlines()[0] == (
        "error: argument -o/--output: unknown output format 'table'; accepted: wide, name, json, "
        "yaml, jsonpath=TEMPLATE"
    )
    assert template.returncode == 2
    assert (
        "bad jsonpath template '{range .items[*]}': {range ...} without its {end}"
        in template.stderr
    )
    assert "Traceback" not in unknown.stderr + template.stderr


def test_completion_offers_runs_namespaces_and_contexts(plugin: Any) -> None:
    plugin.create_run("mid-training", "training")
    plugin.create_run("stub-answers", "audit-failed")

    where = ["--kubeconfig", str(plugin.cluster.kubeconfig), "-n", plugin.namespace]

    def complete(*words: str) -> str:
        out = io.StringIO()
        assert main(["__complete", *words], out=out) == 0
        return out.getvalue()

    assert complete("status", *where, "") == "mid-training\nstub-answers\n:4\n"
    assert complete("logs", *where, "stu") == "stub-answers\n:4\n"
    kubeconfig = ["--kubeconfig", str(plugin.cluster.kubeconfig)]
    assert plugin.namespace in complete("list", *kubeconfig, "-n", plugin.namespace[:8])
    context = plugin.cluster.kubectl("config", "current-context", *kubeconfig).stdout.strip()
    assert complete("list", *kubeconfig, "--context", "") == f"{context}\n:4\n"
    # No cluster there: no candidates, and no error printed into the shell.
    assert complete("status", "--kubeconfig", "/nonexistent", "") == ":4\n"


def test_kubectl_completes_the_plugin_through_kubectl_complete_dflash(plugin: Any) -> None:
    """kubectl (>= 1.26) runs `kubectl_complete-dflash` from PATH: the console script."""
    plugin.create_run("mid-training", "training")
    env = {**os.environ, "PATH": f"{VENV_BIN}{os.pathsep}{os.environ.get('PATH', '')}"}
    env["KUBECONFIG"] = str(plugin.cluster.kubeconfig)

    def kubectl_complete(*words: str) -> list[str]:
        result = subprocess.run(
            [str(binaries.cached_path("kubectl")), "__complete", "dflash", *words],
            env=env, capture_output=True, text=True, check=True, timeout=60,
        )  # fmt: skip
        return result.stdout.splitlines()

    assert kubectl_complete("st")[:-1] == ["status"]
    assert kubectl_complete("status", "-n", plugin.namespace, "mid")[:-1] == ["mid-training"]
    assert kubectl_complete("list", "-o", "na")[:-1] == ["name"]
