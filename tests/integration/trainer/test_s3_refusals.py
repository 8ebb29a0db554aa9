"""A stage's upload to a real S3 server that cannot take it: the model stage copying a Hub model
into a SeaweedFS whose volume slots are all taken, and into an S3 endpoint where no server
runs. Each ends with exit 1 (the Job may retry) and one line, in its log and its result, that
names the server, the cause and what to do; never a traceback."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from dflash_dev import s3server
from dflash_dev.hub_server import HubServer
from dflash_dev.ports import free_port
from dflash_dev.pytest_plugin import FULL_S3_NAME

REPO = "org/tiny"


@pytest.fixture(scope="module")
def tiny_repo(tmp_path_factory: pytest.TempPathFactory) -> Path:
    from dflash_trainer.tiny.build import build_tiny_target

    repo = tmp_path_factory.mktemp("tiny") / "repo"
    build_tiny_target(repo)
    return repo


def model_stage(dest: str, env: dict[str, str], log: Path) -> tuple[int, str, dict[str, Any]]:
    env = {**env, "AWS_MAX_ATTEMPTS": "2"}  # the answer is the same after 8, only slower
    done = subprocess.run(
        [sys.executable, "-m", "dflash_trainer.model.fetch", "--model", REPO, "--dest", dest,
         "--termination-log", str(log)],
        capture_output=True, text=True, env={**os.environ, **env}, timeout=300,
    )  # fmt: skip
    result = json.loads(log.read_text()) if log.exists() else {}
    return done.returncode, done.stdout + done.stderr, result


def error_lines(output: str) -> list[str]:
    return [line for line in output.splitlines() if " ERROR " in line]


def test_an_upload_to_a_full_s3_server_fails_in_one_line_without_a_traceback(
    hub: HubServer, tiny_repo: Path, full_s3: s3server.S3Info, tmp_path: Path
) -> None:
    hub.add_repo(REPO, tiny_repo)
    dest = f"s3://{full_s3.bucket}/runs/r1/model"

    code, output, result = model_stage(dest, full_s3.env(), tmp_path / "result.json")

    assert code == 1, output  # the store failed, not the input: a Job may retry
    assert "Traceback" not in output
    message = result["message"]
    assert result["ok"] is False and "\n" not in message
    assert re.match(rf"copying {REPO} to {dest} failed: (writing|uploading) {dest}/", message)
    assert (
        f"the S3 server at {full_s3.endpoint_url} could not store it (InternalError, HTTP 500, "
        "2 attempts), as a full server does (SeaweedFS: no writable volumes; MinIO: storage full)"
    ) in message
    assert message.endswith("free space on it or raise its quota, then retry the run")
    (logged,) = error_lines(output)
    assert logged.endswith(message)
    # The server's log says the same, which the demo and `make` targets quote.
    assert f"no writable volumes left for bucket {full_s3.bucket}" in (
        s3server.refusal(full_s3, FULL_S3_NAME) or ""
    )


def test_a_stage_against_an_s3_endpoint_where_no_server_runs_fails_in_one_line(
    hub: HubServer, tiny_repo: Path, tmp_path: Path
) -> None:
    hub.add_repo(REPO, tiny_repo)
    endpoint = f"http://127.0.0.1:{free_port()}"
    env = {"AWS_ENDPOINT_URL": endpoint, "AWS_ACCESS_KEY_ID": "k" * 8,
           "AWS_SECRET_ACCESS_KEY": "s" * 16, "DFLASH_S3_PATH_STYLE": "true"}  # fmt: skip

    code, output, result = model_stage("s3://dflash/runs/r1/model", env, tmp_path / "r.json")

    assert code == 1, output
    assert "Traceback" not in output
    message = result["message"]
    assert "\n" not in message
    assert (
        f"no S3 server answers at {endpoint}: check that it runs and that storage.endpoint"
        in message
    )
    (logged,) = error_lines(output)
    assert logged.endswith(message)
