"""The executor's documented rules, table by table (no cluster needed): path rewriting,
$(VAR) expansion, the image's Python, taints, restart policy, log fallback."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from dflash_dev.executor.env import expand
from dflash_dev.executor.errors import PodStartError
from dflash_dev.executor.logs import FALLBACK_BYTES, FALLBACK_LINES, fallback_message
from dflash_dev.executor.nodes import build_taints
from dflash_dev.executor.process import (
    CONTAINER_ENV,
    build_argv,
    container_pids,
    is_image_python,
    signal_group,
)
from dflash_dev.executor.sandbox import Sandbox
from dflash_dev.executor.status import should_restart

LOCAL = Path("/state/pods/ns/p/uid")
SANDBOX = Sandbox(
    root=LOCAL,
    mounts={
        "/data": LOCAL / "volumes/data",
        "/data/cache": LOCAL / "volumes/cache",
        "/etc/dflash/": LOCAL / "volumes/config",
    },
)


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        ("/data", f"{LOCAL}/volumes/data"),
        ("/data/shard-1.parquet", f"{LOCAL}/volumes/data/shard-1.parquet"),
        ("--out=/data/x", f"--out={LOCAL}/volumes/data/x"),
        ("/data/cache/tok", f"{LOCAL}/volumes/cache/tok"),  # the longer mount wins
        ("/etc/dflash/train.yaml", f"{LOCAL}/volumes/config/train.yaml"),
        ("a:/data:b", f"a:{LOCAL}/volumes/data:b"),
        ("/dev/termination-log", f"{LOCAL}/termination-log"),
        ("s3://bucket/data/x", "s3://bucket/data/x"),  # a URI is never a path
        ("/mnt/data", "/mnt/data"),  # not where a path starts
        ("/data2/x", "/data2/x"),  # not where the mount path ends
        ("/database", "/database"),
        ("relative/data", "relative/data"),
    ],
)
def test_a_mount_path_is_rewritten_only_where_it_starts_a_path(value: str, expected: str) -> None:
    assert SANDBOX.rewrite(value) == expected


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        ("$(A)", "1"),
        ("x-$(A)-$(B)", "x-1-two"),
        ("$$(A)", "$(A)"),  # $$ escapes
        ("$(MISSING)", "$(MISSING)"),  # unknown names stay as written
        ("$A", "$A"),  # only the $(NAME) form expands
        ("cost: $$5", "cost: $5"),
    ],
)
def test_variable_references_expand_like_kubelet(value: str, expected: str) -> None:
    assert expand(value, {"A": "1", "B": "two"}) == expected


@pytest.mark.parametrize(
    ("program", "is_python"),
    [
        ("python", True),
        ("python3", True),
        ("python3.11", True),
        ("/usr/bin/python3", True),
        ("/usr/local/bin/python", True),
        ("/opt/conda/bin/python", True),
        ("torchrun", False),
        ("/work/venv-of-mine/bin/python", False),  # a real local path runs as is
        ("pythonic", False),
    ],
)
def test_the_images_python_is_recognised(program: str, is_python: bool) -> None:
    assert is_image_python(program) is is_python


def test_taints_keep_others_and_add_not_ready_only_when_the_node_is_not_ready() -> None:
    gpu = {"key": "nvidia.com/gpu", "value": "present", "effect": "NoSchedule"}
    not_ready = {"key": "node.kubernetes.io/not-ready", "effect": "NoSchedule"}
    ours = {"key": "dflash.dev/executor", "value": "local", "effect": "NoSchedule"}
    assert build_taints([gpu, not_ready], ready=True) == [gpu, ours]
    assert build_taints([gpu], ready=False) == [gpu, ours, not_ready]


@pytest.mark.parametrize(
    ("policy", "exit_code", "restarts"),
    [
        ("Never", 1, False),
        ("Never", 0, False),
        ("OnFailure", 1, True),
        ("OnFailure", 137, True),
        ("OnFailure", 0, False),
        ("Always", 0, True),
    ],
)
def test_restart_policy_decides_like_kubelet(policy: str, exit_code: int, restarts: bool) -> None:
    assert should_restart(policy, exit_code) is restarts


def test_the_log_fallback_keeps_at_most_80_lines_and_2048_bytes_of_this_run(
    tmp_path: Path,
) -> None:
    log = tmp_path / "main.log"
    log.write_text("previous run's output\n")
    start = log.stat().st_size
    with log.open("a") as out:
        out.writelines(f"line {i}\n" for i in range(100))
    message = fallback_message(log, start)
    assert message.splitlines()[0] == "line 20" and len(message.splitlines()) == FALLBACK_LINES
    long_lines = tmp_path / "long.log"
    long_lines.write_text("x" * 5000 + "\nthe end\n")
    tail = fallback_message(long_lines, 0)
    assert tail.endswith("the end\n") and len(tail.encode()) == FALLBACK_BYTES


def test_a_container_with_args_and_no_command_runs_its_args_as_an_image_without_entrypoint() -> (
    None
):
    python = Path("/venv/bin/python")
    container = {"name": "main", "args": ["python", "-m", "dflash_trainer.eval", "--x", "$(A)"]}
    argv = build_argv(container, {"A": "1"}, python, lambda part: part)
    assert argv == [str(python), "-m", "dflash_trainer.eval", "--x", "1"]


def test_a_container_with_neither_command_nor_args_cannot_start() -> None:
    with pytest.raises(PodStartError, match="has no command"):
        build_argv({"name": "main"}, {}, Path("/venv/bin/python"), lambda part: part)


def test_killing_a_container_also_kills_processes_that_left_its_process_group(
    tmp_path: Path,
) -> None:
    # torchrun starts its workers in new sessions: a crash of the container must take them too.
    marker = str(tmp_path / "sandbox")
    script = (
        "import subprocess, sys, time\n"
        "child = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(60)'],"
        " start_new_session=True)\n"
        "print(child.pid, flush=True)\n"
        "time.sleep(60)\n"
    )
    env = {**os.environ, CONTAINER_ENV: marker}
    parent = subprocess.Popen(
        [sys.executable, "-c", script], stdout=subprocess.PIPE, env=env, start_new_session=True
    )
    assert parent.stdout is not None
    child = int(parent.stdout.readline())
    assert os.getpgid(child) != os.getpgid(parent.pid)
    assert sorted(container_pids(marker)) == sorted([parent.pid, child])

    signal_group(parent.pid, signal.SIGKILL, marker)
    assert parent.wait(timeout=10) == -signal.SIGKILL
    deadline = time.monotonic() + 10
    while container_pids(marker) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert container_pids(marker) == []
