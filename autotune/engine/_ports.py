"""Free loopback ports for engines."""

from __future__ import annotations

import socket
import time


def free_port(host: str = "127.0.0.1") -> int:
    """A port that is free now. It can be taken before the engine binds it: the launcher
    detects "address already in use" in the engine log and retries on another port."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((host, 0))
        return int(sock.getsockname()[1])


def port_is_free(port: int, host: str = "127.0.0.1") -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind((host, port))
        except OSError:
            return False
    return True


def wait_port_free(port: int, host: str, timeout_s: float) -> bool:
    """Wait until `port` can be bound again; False if it is still taken after `timeout_s`."""
    deadline = time.monotonic() + timeout_s
    while not port_is_free(port, host):
        if time.monotonic() > deadline:
            return False
        time.sleep(0.1)
    return True
