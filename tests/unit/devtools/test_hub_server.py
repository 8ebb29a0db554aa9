"""The local Hub speaks the Hub's protocol: metadata with hashes, LFS redirects to a CDN on
another origin, ranges, the error codes huggingface_hub maps, and byte counting."""

from __future__ import annotations

import hashlib
import http.client
import json
from collections.abc import Iterator
from pathlib import Path
from urllib.parse import urlsplit

import pytest
from dflash_dev.hub_server import FAKE_COMMIT, HubServer, git_blob_sha1, lfs_pointer

WEIGHTS = bytes(range(256)) * 100
CONFIG = b'{"model_type": "qwen3"}\n'


@pytest.fixture
def server(tmp_path: Path) -> Iterator[HubServer]:
    (tmp_path / "model.safetensors").write_bytes(WEIGHTS)
    (tmp_path / "config.json").write_bytes(CONFIG)
    with HubServer() as hub:
        hub.add_repo("org/m", tmp_path)
        yield hub


def request(
    url: str, method: str = "GET", headers: dict[str, str] | None = None
) -> tuple[int, dict[str, str], bytes]:
    parts = urlsplit(url)
    conn = http.client.HTTPConnection(parts.netloc, timeout=10)
    conn.request(
        method, parts.path + (f"?{parts.query}" if parts.query else ""), headers=headers or {}
    )
    response = conn.getresponse()
    body = response.read()
    conn.close()
    return response.status, dict(response.getheaders()), body


def test_model_info_lists_sizes_blob_ids_and_lfs_hashes(server: HubServer) -> None:
    status, _, body = request(f"{server.url}/api/models/org/m/revision/main?blobs=True")
    assert status == 200
    info = json.loads(body)
    assert info["sha"] == FAKE_COMMIT
    siblings = {s["rfilename"]: s for s in info["siblings"]}
    sha = hashlib.sha256(WEIGHTS).hexdigest()
    assert siblings["model.safetensors"]["lfs"] == {
        "size": len(WEIGHTS),
        "sha256": sha,
        "pointerSize": len(lfs_pointer(sha, len(WEIGHTS))),
    }
    assert siblings["model.safetensors"]["blobId"] == git_blob_sha1(lfs_pointer(sha, len(WEIGHTS)))
    assert siblings["config.json"] == {
        "rfilename": "config.json",
        "size": len(CONFIG),
        "blobId": git_blob_sha1(CONFIG),
    }


def test_lfs_files_redirect_to_a_cdn_origin_that_serves_ranges_and_counts_bytes(
    server: HubServer,
) -> None:
    status, headers, _ = request(
        f"{server.url}/org/m/resolve/{FAKE_COMMIT}/model.safetensors", "HEAD"
    )
    assert status == 302
    assert headers["X-Linked-Etag"] == f'"{hashlib.sha256(WEIGHTS).hexdigest()}"'
    assert headers["X-Linked-Size"] == str(len(WEIGHTS))
    assert headers["X-Repo-Commit"] == FAKE_COMMIT
    location = headers["Location"]
    assert urlsplit(location).netloc != urlsplit(server.url).netloc
    assert not any(k.lower().startswith("x-xet") for k in headers)

    status, headers, body = request(location, headers={"Range": "bytes=100-199"})
    assert status == 206 and body == WEIGHTS[100:200]
    assert headers["Content-Range"] == f"bytes 100-199/{len(WEIGHTS)}"
    assert server.served == {"org/m/model.safetensors": 100}


def test_plain_files_are_served_with_their_blob_etag(server: HubServer) -> None:
    status, headers, body = request(f"{server.url}/org/m/resolve/main/config.json")
    assert status == 200 and body == CONFIG
    assert headers["ETag"] == f'"{git_blob_sha1(CONFIG)}"'
    assert server.served_bytes == len(CONFIG)


def test_a_corrupted_file_has_the_same_size_and_other_bytes(server: HubServer) -> None:
    server.corrupt("org/m", "config.json")
    _, _, body = request(f"{server.url}/org/m/resolve/main/config.json")
    assert len(body) == len(CONFIG) and body != CONFIG


def test_errors_carry_the_hubs_error_codes(server: HubServer, tmp_path: Path) -> None:
    status, headers, _ = request(f"{server.url}/api/models/org/none")
    assert (status, headers["X-Error-Code"]) == (404, "RepoNotFound")
    status, headers, _ = request(f"{server.url}/api/models/org/m/revision/v2")
    assert (status, headers["X-Error-Code"]) == (404, "RevisionNotFound")
    status, headers, _ = request(f"{server.url}/org/m/resolve/main/missing.json")
    assert (status, headers["X-Error-Code"]) == (404, "EntryNotFound")

    server.add_repo("org/private", tmp_path, token="hf_x")
    status, headers, _ = request(f"{server.url}/api/models/org/private")
    assert (status, headers["X-Error-Code"]) == (401, "RepoNotFound")
    status, _, _ = request(
        f"{server.url}/api/models/org/private", headers={"Authorization": "Bearer hf_x"}
    )
    assert status == 200

    server.add_repo("org/gated", tmp_path, token="hf_x", gated=True)
    assert request(f"{server.url}/api/models/org/gated")[0] == 200
    status, headers, _ = request(f"{server.url}/org/gated/resolve/main/config.json")
    assert (status, headers["X-Error-Code"]) == (401, "GatedRepo")
    assert server.served_bytes == 0
