"""The sources Argo CD pulls from on the local control plane: Git repositories over smart HTTP
(`git http-backend`, what Argo CD's own e2e fixture serves through nginx) under `/git/`, and a
Helm chart repository (`index.yaml` and packaged charts, as static files) under `/charts/`.

`python -m dflash_dev.gitserver --root DIR --port N` serves `DIR/git/*.git` and `DIR/charts/`;
`gitops.py` starts it as a tracked process. Pushes are refused: commits go into the bare
repositories from a local clone (`git push` over the file system).
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
from functools import partial
from http.server import SimpleHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

GIT_PREFIX = "/git/"
CHARTS_PREFIX = "/charts/"


class SourcesHandler(SimpleHTTPRequestHandler):
    """`/git/<repo>.git/...` through git http-backend (CGI); `/charts/...` as static files."""

    root: Path

    def __init__(self, *args: object, root: Path, **kwargs: object) -> None:
        self.root = root
        super().__init__(*args, directory=str(root), **kwargs)  # type: ignore[arg-type]

    def do_GET(self) -> None:
        if self.path.startswith(GIT_PREFIX):
            self._git()
        elif self.path.startswith(CHARTS_PREFIX):
            super().do_GET()
        else:
            self.send_error(404, f"only {GIT_PREFIX} and {CHARTS_PREFIX} are served")

    def do_HEAD(self) -> None:
        if self.path.startswith(CHARTS_PREFIX):
            super().do_HEAD()
        else:
            self.send_error(404)

    def do_POST(self) -> None:
        if self.path.startswith(GIT_PREFIX) and not self.path.endswith("/git-receive-pack"):
            self._git()
        else:
            self.send_error(403, "read only: commit through a local clone")

    def _git(self) -> None:
        path, _, query = self.path[len(GIT_PREFIX) - 1 :].partition("?")
        length = int(self.headers.get("Content-Length") or 0)
        body = self.rfile.read(length) if length else b""
        env = {
            "PATH": os.environ.get("PATH", ""),
            "GIT_PROJECT_ROOT": str(self.root / "git"),
            "GIT_HTTP_EXPORT_ALL": "1",
            "REQUEST_METHOD": self.command,
            "PATH_INFO": path,
            "QUERY_STRING": query,
            "CONTENT_TYPE": self.headers.get("Content-Type", ""),
            "CONTENT_LENGTH": str(len(body)),
            "REMOTE_ADDR": self.client_address[0],
            "HTTP_GIT_PROTOCOL": self.headers.get("Git-Protocol", ""),
        }
        result = subprocess.run(
            ["git", "http-backend"], input=body, env=env, capture_output=True, check=False
        )
        head, _, payload = result.stdout.partition(b"\r\n\r\n")
        if result.returncode != 0 or not head:
            self.send_error(500, result.stderr.decode(errors="replace")[:200])
            return
        status = 200
        headers: list[tuple[str, str]] = []
        for line in head.decode("latin-1").split("\r\n"):
            key, _, value = line.partition(":")
            if key.lower() == "status":
                status = int(value.strip().split()[0])
            else:
                headers.append((key, value.strip()))
        self.send_response(status)
        for key, value in headers:
            self.send_header(key, value)
        self.send_header("Content-Length", str(len(payload)))
        self.end_headers()
        self.wfile.write(payload)

    def log_message(self, format: str, *args: object) -> None:  # quiet: one line per request
        sys.stderr.write(f"{self.command} {self.path} -> {args[1] if len(args) > 1 else ''}\n")


def _git(cwd: Path, *args: str) -> str:
    result = subprocess.run(
        ["git", "-c", "user.name=dflash-dev", "-c", "user.email=dev@dflash.local", *args],
        cwd=cwd, capture_output=True, text=True, check=False,
    )  # fmt: skip
    if result.returncode != 0:
        raise RuntimeError(f"git {' '.join(args)} in {cwd} failed: {result.stderr.strip()}")
    return result.stdout.strip()


class LocalRepo:
    """A bare repository served at `<url>/git/<name>.git` and a clone to commit from."""

    def __init__(self, root: Path, name: str, base_url: str) -> None:
        self.bare = root / "git" / f"{name}.git"
        self.work = root / "work" / name
        self.url = f"{base_url}{GIT_PREFIX}{name}.git"

    def create(self) -> LocalRepo:
        """An empty repository with branch main (replacing one of the same name)."""
        shutil.rmtree(self.bare, ignore_errors=True)
        shutil.rmtree(self.work, ignore_errors=True)
        self.bare.mkdir(parents=True)
        _git(self.bare, "init", "--quiet", "--bare", "--initial-branch=main")
        self.work.mkdir(parents=True)
        _git(self.work, "init", "--quiet", "--initial-branch=main")
        _git(self.work, "remote", "add", "origin", str(self.bare))
        return self

    def write(self, relative: str, text: str) -> None:
        path = self.work / relative
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)

    def copy_tree(self, source: Path, relative: str) -> None:
        shutil.copytree(source, self.work / relative, dirs_exist_ok=True)

    def remove(self, relative: str) -> None:
        (self.work / relative).unlink()

    def commit(self, message: str) -> str:
        """Commit everything in the clone and push it; the new commit's sha."""
        _git(self.work, "add", "--all")
        _git(self.work, "commit", "--quiet", "--allow-empty", "-m", message)
        _git(self.work, "push", "--quiet", "origin", "main")
        return _git(self.work, "rev-parse", "HEAD")


def publish_chart(helm: Path, chart: Path, root: Path, base_url: str) -> str:
    """`helm package` the chart into `<root>/charts/` and index it; the repository's URL."""
    charts = root / "charts"
    charts.mkdir(parents=True, exist_ok=True)
    url = f"{base_url}{CHARTS_PREFIX}".rstrip("/")
    for argv in (
        [str(helm), "package", str(chart), "--destination", str(charts)],
        [str(helm), "repo", "index", str(charts), "--url", url],
    ):
        result = subprocess.run(argv, capture_output=True, text=True, check=False)
        if result.returncode != 0:
            raise RuntimeError(f"{' '.join(argv[:3])} failed: {result.stderr.strip()}")
    return url


def serve(root: Path, port: int) -> None:
    if shutil.which("git") is None:
        raise SystemExit("git is not installed: apt-get install git")
    handler = partial(SourcesHandler, root=root)
    server = ThreadingHTTPServer(("127.0.0.1", port), handler)
    server.serve_forever()


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m dflash_dev.gitserver", description=__doc__)
    parser.add_argument("--root", type=Path, required=True)
    parser.add_argument("--port", type=int, required=True)
    args = parser.parse_args(argv)
    serve(args.root.resolve(), args.port)


if __name__ == "__main__":
    main()
