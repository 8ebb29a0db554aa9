"""Free loopback ports: a busy port is never fatal, we ask the kernel for another one."""

from __future__ import annotations

import socket


def free_port(avoid: set[int] | None = None) -> int:
    """A TCP port on 127.0.0.1 that nothing listens on right now (and not in `avoid`)."""
    if avoid is None:  # not `avoid or set()`: an empty set passed in must collect the ports
        avoid = set()
    for _ in range(100):
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
            sock.bind(("127.0.0.1", 0))
            port = int(sock.getsockname()[1])
        # Some servers derive a gRPC port as port + 10000: keep both below 65535.
        if port not in avoid and port + 10000 < 65535:
            avoid.add(port)
            return port
    raise RuntimeError("could not find a free port on 127.0.0.1")


def free_ports(count: int) -> list[int]:
    taken: set[int] = set()
    return [free_port(taken) for _ in range(count)]


def is_listening(port: int, host: str = "127.0.0.1") -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.settimeout(0.2)
        return sock.connect_ex((host, port)) == 0
