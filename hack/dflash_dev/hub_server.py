"""A local stand-in for the Hugging Face Hub: serves folders as model repos over HTTP.

Tests and benchmarks never reach huggingface.co; they point HF_ENDPOINT here. Implemented is
exactly what huggingface_hub 2.4's `HfApi.model_info(files_metadata=True)` and
`hf_hub_download` use, with the real Hub's headers and error codes:

    GET  /api/models/<repo>[/revision/<rev>][?blobs=True]
         -> {"id", "sha", "siblings": [{"rfilename", "size", "blobId", "lfs": {...}}], ...}
    HEAD|GET /<repo>/resolve/<rev>/<path>
         plain git files: 200, ETag = git blob sha1, X-Repo-Commit, the content
         LFS files (*.safetensors, *.bin, ...): 302 to the "CDN" (a second port, so a different
         origin, as cdn-lfs.hf.co is: the client drops its Authorization header there), with
         X-Linked-Etag = sha256, X-Linked-Size, X-Repo-Commit
    HEAD|GET <cdn>/lfs/<repo>/<path>   the content (Range supported)
    errors: X-Error-Code RepoNotFound / GatedRepo / RevisionNotFound / EntryNotFound

No Xet headers are sent, so clients use the plain HTTP path. Every repo is served at one fixed
fake commit. The server counts the content bytes it serves per file (`served`), and a repo
can require a token (private: everything 401; gated: metadata public, files 401), serve a
corrupted file (same size, one byte flipped) or be missing (404).
"""

from __future__ import annotations

import contextlib
import fnmatch
import hashlib
import json
import re
import threading
from collections import Counter
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import quote, unquote, urlsplit

FAKE_COMMIT = "d1f1a5b0c0ffee00000000000000000000000001"
LFS_PATTERNS = ("*.safetensors", "*.bin", "*.pth", "*.pt", "*.gguf", "*.model", "tokenizer.json")
CHUNK = 1024 * 1024
RANGE = re.compile(r"^bytes=(\d+)-(\d*)$")


def git_blob_sha1(data: bytes) -> str:
    return hashlib.sha1(b"blob %d\0" % len(data) + data, usedforsecurity=False).hexdigest()


def lfs_pointer(sha256: str, size: int) -> bytes:
    return (
        f"version https://git-lfs.github.com/spec/v1\noid sha256:{sha256}\nsize {size}\n".encode()
    )


@dataclass(frozen=True)
class RepoFile:
    path: str
    size: int
    lfs: bool
    sha256: str
    blob_id: str  # git blob of the content, or of the LFS pointer for LFS files

    def sibling(self) -> dict[str, Any]:
        entry: dict[str, Any] = {"rfilename": self.path, "size": self.size, "blobId": self.blob_id}
        if self.lfs:
            entry["lfs"] = {
                "size": self.size,
                "sha256": self.sha256,
                "pointerSize": len(lfs_pointer(self.sha256, self.size)),
            }
        return entry

    @property
    def etag(self) -> str:
        return self.sha256 if self.lfs else self.blob_id


def describe_file(root: Path, path: Path) -> RepoFile:
    rel = path.relative_to(root).as_posix()
    sha256 = hashlib.sha256()
    size = path.stat().st_size
    blob = hashlib.sha1(b"blob %d\0" % size, usedforsecurity=False)
    with path.open("rb") as handle:
        while chunk := handle.read(CHUNK):
            sha256.update(chunk)
            blob.update(chunk)
    lfs = any(fnmatch.fnmatch(rel.rsplit("/", 1)[-1], p) for p in LFS_PATTERNS)
    digest = sha256.hexdigest()
    blob_id = git_blob_sha1(lfs_pointer(digest, size)) if lfs else blob.hexdigest()
    return RepoFile(rel, size, lfs, digest, blob_id)


@dataclass
class HubRepo:
    repo_id: str
    folder: Path
    commit: str = FAKE_COMMIT
    token: str | None = None  # the token it requires, if any
    gated: bool = False  # with a token: metadata public, files refused (else: private)
    corrupt: set[str] = field(default_factory=set)
    files: dict[str, RepoFile] = field(default_factory=dict)

    def scan(self) -> None:
        self.files = {
            f.path: f
            for f in (
                describe_file(self.folder, p) for p in sorted(self.folder.rglob("*")) if p.is_file()
            )
        }

    def resolves(self, revision: str | None) -> bool:
        return revision in (None, "main", self.commit)


class HubServer:
    """The Hub on one loopback port and its "CDN" on another; `url` is the HF_ENDPOINT."""

    def __init__(self) -> None:
        self.repos: dict[str, HubRepo] = {}
        self.served: Counter[str] = Counter()  # "<repo>/<path>" -> content bytes sent
        self.requests: list[tuple[str, str, str, bool]] = []  # (server, method, path, auth?)
        self._lock = threading.Lock()
        self._servers: list[ThreadingHTTPServer] = []

    # ---------------------------------------------------------------- repos
    def add_repo(
        self,
        repo_id: str,
        folder: Path,
        *,
        token: str | None = None,
        gated: bool = False,
        commit: str = FAKE_COMMIT,
    ) -> HubRepo:
        repo = HubRepo(repo_id, Path(folder), commit=commit, token=token, gated=gated)
        repo.scan()
        self.repos[repo_id] = repo
        return repo

    def corrupt(self, repo_id: str, path: str) -> None:
        """Serve `path` with one byte flipped (same size), while listing its true hashes."""
        self.repos[repo_id].corrupt.add(path)

    def remove_repo(self, repo_id: str) -> None:
        self.repos.pop(repo_id, None)

    # ---------------------------------------------------------------- counters
    @property
    def served_bytes(self) -> int:
        with self._lock:
            return sum(self.served.values())

    def reset_counters(self) -> None:
        with self._lock:
            self.served.clear()
            self.requests.clear()

    def _count(self, key: str, nbytes: int) -> None:
        with self._lock:
            self.served[key] += nbytes

    def _log(self, server: str, method: str, path: str, auth: bool) -> None:
        with self._lock:
            self.requests.append((server, method, path, auth))

    # ---------------------------------------------------------------- lifecycle
    def start(self) -> HubServer:
        hub = self._serve(_HubHandler)
        cdn = self._serve(_CdnHandler)
        self.url = f"http://127.0.0.1:{hub.server_address[1]}"
        self.cdn_url = f"http://127.0.0.1:{cdn.server_address[1]}"
        return self

    def _serve(self, handler: type[_Handler]) -> ThreadingHTTPServer:
        server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
        server.daemon_threads = True
        server.hub = self  # type: ignore[attr-defined]
        threading.Thread(target=server.serve_forever, daemon=True, name="hub-server").start()
        self._servers.append(server)
        return server

    def stop(self) -> None:
        for server in self._servers:
            server.shutdown()
            server.server_close()
        self._servers.clear()

    def __enter__(self) -> HubServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server_name = "hub"

    @property
    def hub(self) -> HubServer:
        return self.server.hub  # type: ignore[attr-defined,no-any-return]

    def log_message(self, format: str, *args: Any) -> None:
        return  # quiet: tests read the counters, not a log

    def _token(self) -> str | None:
        header = self.headers.get("Authorization", "")
        return header[len("Bearer ") :] if header.startswith("Bearer ") else None

    def _error(self, status: int, code: str, message: str, commit: str | None = None) -> None:
        body = json.dumps({"error": message}).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.send_header("X-Error-Code", code)
        self.send_header("X-Error-Message", message)
        if commit:
            self.send_header("X-Repo-Commit", commit)
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(body)

    def _json(self, value: Any) -> None:
        body = json.dumps(value).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def _content(self, repo: HubRepo, rf: RepoFile, headers: dict[str, str]) -> None:
        """Send the file (or the requested byte range), counting the content bytes sent."""
        start, end = 0, rf.size - 1
        match = RANGE.match(self.headers.get("Range", ""))
        status = 200
        if match:
            start = int(match.group(1))
            end = min(int(match.group(2)), rf.size - 1) if match.group(2) else rf.size - 1
            status = 206
        length = max(0, end - start + 1)
        self.send_response(status)
        for key, value in headers.items():
            self.send_header(key, value)
        self.send_header("Content-Type", "application/octet-stream")
        self.send_header("Content-Length", str(length))
        self.send_header("Accept-Ranges", "bytes")
        if status == 206:
            self.send_header("Content-Range", f"bytes {start}-{end}/{rf.size}")
        self.end_headers()
        if self.command == "HEAD":
            return
        flip = rf.size // 2 if rf.path in repo.corrupt else -1
        key = f"{repo.repo_id}/{rf.path}"
        with (repo.folder / rf.path).open("rb") as handle:
            handle.seek(start)
            offset, left = start, length
            while left > 0:
                chunk = handle.read(min(CHUNK, left))
                if not chunk:
                    break
                if offset <= flip < offset + len(chunk):
                    data = bytearray(chunk)
                    data[flip - offset] ^= 0xFF
                    chunk = bytes(data)
                # Counted before it is sent: a client that has the bytes always finds them
                # counted; a chunk the client never took is taken back.
                self.hub._count(key, len(chunk))
                try:
                    self.wfile.write(chunk)
                except OSError:
                    self.hub._count(key, -len(chunk))
                    raise
                offset += len(chunk)
                left -= len(chunk)

    def _authorized(self, repo: HubRepo, for_files: bool) -> bool:
        """False after answering 401 the way the Hub does for a private or gated repo."""
        if repo.token is None or self._token() == repo.token:
            return True
        if repo.gated and not for_files:
            return True
        if repo.gated:
            self._error(
                401,
                "GatedRepo",
                f"Access to model {repo.repo_id} is restricted. You must have access to it "
                "and be authenticated to access it. Please log in.",
            )
        else:
            self._error(401, "RepoNotFound", "Invalid username or password.")
        return False

    def do_HEAD(self) -> None:
        self.do_GET()

    def do_GET(self) -> None:
        path = urlsplit(self.path).path
        self.hub._log(self.server_name, self.command, path, "Authorization" in self.headers)
        with contextlib.suppress(BrokenPipeError, ConnectionResetError):
            self.route(path)  # (a client that went away mid-download is not an error)

    def route(self, path: str) -> None:
        raise NotImplementedError


class _HubHandler(_Handler):
    server_name = "hub"

    def _repo(self, repo_id: str) -> HubRepo | None:
        repo = self.hub.repos.get(repo_id)
        if repo is None:
            self._error(404, "RepoNotFound", "Repository not found")
        return repo

    def route(self, path: str) -> None:
        if path.startswith("/api/models/"):
            rest = path[len("/api/models/") :]
            repo_id, _, revision = rest.partition("/revision/")
            self.model_info(unquote(repo_id), unquote(revision) if revision else None)
            return
        match = re.match(r"^/(.+?/[^/]+)/resolve/([^/]+)/(.+)$", path)
        if match is None:
            self._error(404, "EntryNotFound", f"no route for {path}")
            return
        self.resolve(match.group(1), unquote(match.group(2)), unquote(match.group(3)))

    def model_info(self, repo_id: str, revision: str | None) -> None:
        repo = self._repo(repo_id)
        if repo is None or not self._authorized(repo, for_files=False):
            return
        if not repo.resolves(revision):
            self._error(404, "RevisionNotFound", f"Invalid rev id: {revision}")
            return
        blobs = "blobs=true" in (urlsplit(self.path).query or "").lower()
        self._json(
            {
                "_id": hashlib.sha1(repo_id.encode(), usedforsecurity=False).hexdigest()[:24],
                "id": repo_id,
                "modelId": repo_id,
                "author": repo_id.split("/")[0],
                "sha": repo.commit,
                "lastModified": "2026-01-01T00:00:00.000Z",
                "private": repo.token is not None and not repo.gated,
                "gated": "auto" if repo.gated else False,
                "disabled": False,
                "tags": ["transformers", "safetensors"],
                "library_name": "transformers",
                "siblings": [
                    f.sibling() if blobs else {"rfilename": f.path} for f in repo.files.values()
                ],
            }
        )

    def resolve(self, repo_id: str, revision: str, path: str) -> None:
        repo = self._repo(repo_id)
        if repo is None or not self._authorized(repo, for_files=True):
            return
        if not repo.resolves(revision):
            self._error(404, "RevisionNotFound", f"Invalid rev id: {revision}")
            return
        rf = repo.files.get(path)
        if rf is None:
            self._error(404, "EntryNotFound", f"{path} does not exist", commit=repo.commit)
            return
        headers = {"X-Repo-Commit": repo.commit, "ETag": f'"{rf.etag}"'}
        if not rf.lfs:
            self._content(repo, rf, headers)
            return
        location = f"{self.hub.cdn_url}/lfs/{quote(repo_id)}/{quote(rf.path)}?X-Amz-Signature=fake"
        self.send_response(302)
        for key, value in headers.items():
            self.send_header(key, value)
        self.send_header("X-Linked-Etag", f'"{rf.sha256}"')
        self.send_header("X-Linked-Size", str(rf.size))
        self.send_header("Location", location)
        self.send_header("Content-Length", "0")
        self.end_headers()


class _CdnHandler(_Handler):
    server_name = "cdn"

    def route(self, path: str) -> None:
        match = re.match(r"^/lfs/(.+?/[^/]+)/(.+)$", path)
        repo = self.hub.repos.get(unquote(match.group(1))) if match else None
        rf = repo.files.get(unquote(match.group(2))) if repo and match else None
        if repo is None or rf is None:
            self._error(404, "EntryNotFound", "no such object")
            return
        self._content(repo, rf, {"ETag": f'"{rf.sha256}"'})
