"""A private S3 server (SeaweedFS) that can be stopped and started again on the same data, port
and credentials, as a real store comes back after an outage: for resilience tests, which must
never restart the shared server of `make s3-up` (dflash_dev.s3server starts fresh each time).
It starts as that server does (`s3server.build_mini_argv`: 64 MiB volumes, one grown per
collection at a time, and the free-disk check before it starts)."""

from __future__ import annotations

import secrets
import time
from dataclasses import dataclass, replace
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
        self.ports = s3server.MiniPorts(*free_ports(len(s3server.MiniPorts._fields)))
        self.info = s3server.S3Info(
            endpoint_url=f"http://127.0.0.1:{self.ports.s3}",
            access_key="private" + secrets.token_hex(4),
            secret_key=secrets.token_urlsafe(24),
            region=s3server.REGION,
            bucket=self.bucket,
            data_dir=str(self.state_dir / "data"),
            master_url=f"http://127.0.0.1:{self.ports.master}",
        )

    def build_argv(self) -> list[str]:
        return s3server.build_mini_argv(Path(self.info.data_dir), self.ports, self.bucket)

    def start(self) -> PrivateS3:
        Path(self.info.data_dir).mkdir(parents=True, exist_ok=True)
        s3server.check_free_disk(Path(self.info.data_dir))
        env = s3server.build_mini_env(self.info.access_key, self.info.secret_key)
        tracked = procs.start(
            self.state_dir, NAME, self.build_argv(), env=env, cwd=Path(self.info.data_dir)
        )
        self.info = replace(self.info, log=str(tracked.log))
        deadline = time.monotonic() + START_SECONDS
        while time.monotonic() < deadline:
            if not tracked.is_alive():
                raise DevError(f"the private S3 server exited at start:\n{procs.tail(tracked.log)}")
            if is_listening(self.ports.s3) and s3server.is_healthy(self.info):
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
