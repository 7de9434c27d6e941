"""A real `kube-harness worker` on loopback over a temporary workspace, per test.

KH_BIN names the binary (scripts/test.sh sets it to the one cargo built). The worker's sandbox
presents the workspace in a private mount namespace, so the tests run as root (as in CI)."""

import os
import socket
import subprocess
import time
from pathlib import Path

import httpx
import pytest

TOKEN = "py-sdk-token-0123"


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Worker:
    def __init__(self, url: str, root: Path, process: subprocess.Popen):
        self.url = url
        self.root = root
        self.process = process

    def host(self, harness: str) -> Path:
        return self.root / harness.lstrip("/")


@pytest.fixture
def worker(tmp_path: Path):
    binary = os.environ.get("KH_BIN")
    if not binary:
        pytest.skip("KH_BIN is not set (scripts/test.sh sets it to the built kube-harness)")
    root = tmp_path / "ws"
    for d in ("session", "artifacts", "persistent", ".agents/skills"):
        (root / d).mkdir(parents=True)
    token = tmp_path / "token"
    token.write_text(TOKEN + "\n")
    port = _free_port()
    process = subprocess.Popen(
        [
            binary,
            "worker",
            "--session",
            "py",
            "--token-file",
            str(token),
            "--listen",
            f"127.0.0.1:{port}",
            "--workspace-root",
            str(root),
            "--max-file-bytes",
            str(8 << 20),
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 30
    while True:
        try:
            if httpx.get(f"{url}/readyz", timeout=1).status_code == 200:
                break
        except httpx.HTTPError:
            pass
        if process.poll() is not None or time.monotonic() > deadline:
            process.kill()
            pytest.fail("the worker did not become ready")
        time.sleep(0.05)
    yield Worker(url, root, process)
    process.kill()
    process.wait()
