"""A private S3 server (SeaweedFS) that can be stopped and started again on the same data, port
and credentials, as a real store comes back after an outage: for resilience tests, which must
never restart the shared server of `make s3-up` (dflash_dev.s3server starts fresh each time)."""

from __future__ import annotations

import os
import secrets
import time
from dataclasses import dataclass
from pathlib import Path

from dflash_dev import procs, s3server
from dflash_dev.errors import DevError
from dflash_dev.ports import free_ports, is_listening

NAME = "private-s3"
START_SECONDS = 60.0


@dataclass
class PrivateS3:
    """`weed mini` on fixed ports under `state_dir`; `stop()` then `start()` keeps everything."""

    state_dir: Path
    bucket: str = s3server.DEFAULT_BUCKET

    def __post_init__(self) -> None:
        self.ports = free_ports(8)
        self.info = s3server.S3Info(
            endpoint_url=f"http://127.0.0.1:{self.ports[0]}",
            access_key="private" + secrets.token_hex(4),
            secret_key=secrets.token_urlsafe(24),
            region=s3server.REGION,
            bucket=self.bucket,
            data_dir=str(self.state_dir / "data"),
        )

    def _argv(self) -> list[str]:
        s3, master, volume, filer, admin, webdav, metrics, debug = self.ports
        return [
            str(s3server.weed_binary()), "mini", f"-dir={self.info.data_dir}",
            "-ip=127.0.0.1", "-ip.bind=127.0.0.1", f"-s3.port={s3}", f"-master.port={master}",
            f"-volume.port={volume}", f"-filer.port={filer}", f"-admin.port={admin}",
            f"-webdav.port={webdav}", f"-metricsPort={metrics}", f"-debug.port={debug}",
            "-admin.ui=false", "-webdav=false", f"-bucket={self.bucket}",
        ]  # fmt: skip

    def start(self) -> PrivateS3:
        Path(self.info.data_dir).mkdir(parents=True, exist_ok=True)
        env = dict(
            os.environ,
            AWS_ACCESS_KEY_ID=self.info.access_key,
            AWS_SECRET_ACCESS_KEY=self.info.secret_key,
        )
        tracked = procs.start(
            self.state_dir, NAME, self._argv(), env=env, cwd=Path(self.info.data_dir)
        )
        deadline = time.monotonic() + START_SECONDS
        while time.monotonic() < deadline:
            if not tracked.is_alive():
                raise DevError(f"the private S3 server exited at start:\n{procs.tail(tracked.log)}")
            if is_listening(self.ports[0]) and s3server.is_healthy(self.info):
                try:
                    self.info.client().head_bucket(Bucket=self.bucket)
                    return self
                except Exception:  # noqa: S110 - the bucket appears a moment after the port
                    pass
            time.sleep(0.3)
        raise DevError(
            f"the private S3 server did not answer in {START_SECONDS:.0f}s:\n{procs.tail(tracked.log)}"
        )

    def stop(self) -> None:
        procs.stop(self.state_dir, NAME)
