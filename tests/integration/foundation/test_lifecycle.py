"""Start is idempotent, and a test session killed outright leaves no server behind."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

from dflash_dev import cluster as local_cluster
from dflash_dev import procs
from dflash_dev.kube_wait import wait_for
from dflash_dev.pytest_plugin import ClusterHandle

OWNER = """
import os, sys, time
from dflash_dev import s3server, watchdog
s3server.up()
watchdog.spawn(os.getpid(), ["s3"])
print("up", flush=True)
time.sleep(600)
"""


def test_cluster_up_on_a_healthy_cluster_returns_the_same_processes(cluster: ClusterHandle) -> None:
    info = local_cluster.read_info()
    assert info is not None, (
        "this test needs the checkout's own cluster (not an external KUBECONFIG)"
    )
    before = procs.read_tracked(Path(info.state_dir), "kube-apiserver")
    again = local_cluster.up()
    assert again.server == info.server
    assert procs.read_tracked(Path(again.state_dir), "kube-apiserver") == before


def test_a_killed_session_does_not_leave_its_s3_server_running(tmp_path: Path) -> None:
    env = dict(os.environ, DFLASH_STATE_DIR=str(tmp_path / "state"))
    owner = subprocess.Popen(
        [sys.executable, "-c", OWNER], env=env, stdout=subprocess.PIPE, text=True
    )
    assert owner.stdout is not None
    assert owner.stdout.readline().strip() == "up"
    server = procs.read_tracked(tmp_path / "state" / "s3", "s3")
    assert server is not None and server.is_alive()
    owner.send_signal(signal.SIGKILL)
    owner.wait()
    info_file = tmp_path / "state" / "s3" / "s3.json"
    wait_for(
        "the watchdog to stop the orphaned S3 server and remove its state",
        lambda: not server.is_alive() and not info_file.exists(),
        30,
    )
