"""Moving files in and out of a session through a real `kube-harness worker` on loopback, with
the worker's peak memory. Prints each transfer's time and throughput and its ratio against the
same bytes copied on the local disk in the same run (the baseline: what the machine does without
HTTP, the worker or the SDK).

    KH_BIN=target/debug/kube-harness python3 clients/python/bench/files.py   # as root

Checks as it goes: every round trip's digests are equal; exits 1 otherwise."""

import hashlib
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))
import httpx  # noqa: E402

import kube_harness as kh  # noqa: E402

TOKEN = "bench-token-0123"
BIG = 100 << 20
FILES = 10_000


def digest_file(path: Path) -> str:
    h = hashlib.sha256()
    with path.open("rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def digest_tree(root: Path) -> str:
    h = hashlib.sha256()
    for p in sorted(root.rglob("*")):
        if p.is_file():
            h.update(str(p.relative_to(root)).encode())
            h.update(p.read_bytes())
    return h.hexdigest()


def peak_rss_kib(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1])
    return 0


def main() -> int:
    binary = os.environ["KH_BIN"]
    work = Path(tempfile.mkdtemp(prefix="kh-bench-files-"))
    try:
        root = work / "ws"
        for d in ("session", "artifacts", "persistent"):
            (root / d).mkdir(parents=True)
        (work / "token").write_text(TOKEN)
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]
        worker = subprocess.Popen(
            [binary, "worker", "--session", "bench", "--token-file", str(work / "token"),
             "--listen", f"127.0.0.1:{port}", "--workspace-root", str(root)],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        url = f"http://127.0.0.1:{port}"
        deadline = time.monotonic() + 30
        while True:
            try:
                if httpx.get(f"{url}/readyz", timeout=1).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            if time.monotonic() > deadline:
                raise SystemExit("the worker did not become ready")
            time.sleep(0.05)
        idle_kib = peak_rss_kib(worker.pid)
        ok = True
        rows = []

        def row(what, seconds, nbytes, baseline):
            rows.append((what, seconds, nbytes, baseline))

        # One 100 MiB file.
        big = work / "big.bin"
        with big.open("wb") as f:
            for i in range(BIG >> 20):
                f.write(hashlib.sha256(str(i).encode()).digest() * (1 << 15))
        t = time.monotonic()
        shutil.copyfile(big, work / "big.copy")
        base = time.monotonic() - t
        with kh.Session(url, TOKEN) as s:
            t = time.monotonic()
            with big.open("rb") as f:
                s.write_file("/session/big.bin", f)
            row("file 100 MiB up", time.monotonic() - t, BIG, base)
            t = time.monotonic()
            back = work / "big.back"
            with back.open("wb") as out, httpx.stream(
                "GET", f"{url}/v1/files", params={"path": "/session/big.bin"},
                headers={"Authorization": f"Bearer {TOKEN}"}, timeout=None) as r:
                for block in r.iter_bytes():
                    out.write(block)
            row("file 100 MiB down", time.monotonic() - t, BIG, base)
            same = digest_file(big) == digest_file(back) == digest_file(root / "session/big.bin")
            ok &= same
            print(f"file digests equal: {same}")

            # 10,000 files in 100 directories.
            tree = work / "tree"
            for i in range(FILES):
                d = tree / f"d{i % 100:03}"
                d.mkdir(parents=True, exist_ok=True)
                (d / f"f{i:05}.txt").write_bytes(hashlib.sha256(str(i).encode()).hexdigest().encode() * 8)
            tree_bytes = sum(p.stat().st_size for p in tree.rglob("*") if p.is_file())
            t = time.monotonic()
            shutil.copytree(tree, work / "tree.copy")
            base = time.monotonic() - t
            t = time.monotonic()
            up = s.upload_dir(tree, "/session/tree")
            row(f"dir {FILES} files up", time.monotonic() - t, tree_bytes, base)
            t = time.monotonic()
            s.download_dir("/session/tree", work / "tree.back")
            row(f"dir {FILES} files down", time.monotonic() - t, tree_bytes, base)
            same = digest_tree(tree) == digest_tree(work / "tree.back") == digest_tree(root / "session/tree")
            ok &= same and up["entries"] == FILES + 100
            print(f"tree digests equal: {same} ({up['entries']} entries)")
        peak_kib = peak_rss_kib(worker.pid)
        worker.kill()
        worker.wait()
        print()
        print(f"{'transfer':<24}{'seconds':>9}{'MiB/s':>9}{'local copy s':>14}{'ratio':>8}")
        for what, seconds, nbytes, baseline in rows:
            print(f"{what:<24}{seconds:>9.2f}{nbytes / seconds / (1 << 20):>9.1f}{baseline:>14.2f}{seconds / max(baseline, 1e-6):>8.1f}")
        print(f"\nworker peak RSS: {peak_kib / 1024:.0f} MiB (idle after start: {idle_kib / 1024:.0f} MiB); moved 2 x 100 MiB and 2 x {FILES} files")
        return 0 if ok else 1
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
