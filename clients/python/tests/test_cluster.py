"""The SDK against a HarnessSession on a real cluster, reached with Session.from_kubeconfig (real
kubectl: the port-forward, or the in-cluster address from inside a pod). Skipped unless
KH_E2E_SESSION is set; the cluster e2e sets it with KH_E2E_NAMESPACE, KUBECONFIG and KH_KUBECTL
and runs `clients/python/test.sh tests/test_cluster.py`."""

import asyncio
import os
import uuid
from glob import glob

import pytest

import kube_harness as kh

NAME = os.environ.get("KH_E2E_SESSION")
NAMESPACE = os.environ.get("KH_E2E_NAMESPACE") or None
pytestmark = pytest.mark.skipif(not NAME, reason="KH_E2E_SESSION is not set (the cluster e2e)")


def open_session() -> kh.Session:
    return kh.Session.from_kubeconfig(NAME, NAMESPACE)


def children() -> set:
    """Pids of this process's children (from /proc: kubectl port-forwards, among others)."""
    me, found = os.getpid(), set()
    for stat in glob("/proc/[0-9]*/stat"):
        try:
            with open(stat) as f:
                fields = f.read().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if int(fields[1]) == me:
            found.add(int(stat.split("/")[2]))
    return found


@pytest.fixture
def session():
    with open_session() as s:
        yield s


@pytest.fixture
def scratch() -> str:
    """A directory of the session's workspace of this test alone."""
    return f"/session/py-e2e/{uuid.uuid4().hex[:12]}"


def test_exec(session):
    r = session.exec("echo hi")
    assert (r.stdout, r.stderr, r.exit_code, r.tier) == ("hi\n", "", 0, 0)


def test_stream_yields_chunks_then_the_result(session):
    items = list(session.stream("echo one; sleep 1; echo two >&2"))
    assert kh.Chunk("stdout", "one\n") in items
    assert kh.Chunk("stderr", "two\n") in items
    result = items[-1]
    assert isinstance(result, kh.ExecResult) and result.type == "result"
    assert (result.stdout, result.stderr, result.exit_code) == ("one\n", "two\n", 0)


def test_files_round_trip(session, scratch):
    data = b"\0" + bytes(range(256)) * 64 + b"\0end"
    w = session.write_file(f"{scratch}/data.bin", data)
    assert (w.change, w.bytes) == ("created", len(data))
    assert session.read_file(f"{scratch}/data.bin") == data
    assert session.exec(f"wc -c < {scratch}/data.bin").stdout.strip() == str(len(data))


def test_directories_round_trip(session, scratch, tmp_path):
    src = tmp_path / "src"
    (src / "a" / "b").mkdir(parents=True)
    (src / "top.txt").write_text("top")
    (src / "a" / "b" / "deep.bin").write_bytes(b"deep\0data")
    assert session.upload_dir(src, f"{scratch}/proj")["entries"] == 4
    session.exec(f"echo new > {scratch}/proj/made-there.txt")
    out = tmp_path / "out"
    session.download_dir(f"{scratch}/proj", out)
    assert (out / "top.txt").read_text() == "top"
    assert (out / "a" / "b" / "deep.bin").read_bytes() == b"deep\0data"
    assert (out / "made-there.txt").read_text() == "new\n"


def test_end_turn_and_status(session, scratch):
    session.exec(f"mkdir -p {scratch} && echo a > {scratch}/a.txt")
    turn = session.end_turn()
    assert turn is not None and turn.commands >= 1
    assert f"{scratch}/a.txt" in [c["path"] for c in turn.file_changes]
    assert session.end_turn() is None
    status = session.status()
    assert status["session"] == NAME and status["ready"] is True


def test_closing_the_session_leaves_no_kubectl_behind():
    before = children()
    s = open_session()
    try:
        assert s.exec("true").exit_code == 0
        if not os.environ.get("KUBERNETES_SERVICE_HOST"):
            assert children() - before, "no kubectl port-forward running"
    finally:
        s.close()
    assert children() == before


def test_the_async_session(scratch):
    before = children()

    async def run():
        async with await kh.AsyncSession.from_kubeconfig(NAME, NAMESPACE) as s:
            assert (await s.exec("echo async")).stdout == "async\n"
            items = [i async for i in s.stream("echo one")]
            assert items[-1].exit_code == 0 and kh.Chunk("stdout", "one\n") in items
            await s.write_file(f"{scratch}/b.bin", b"b\0e")
            assert await s.read_file(f"{scratch}/b.bin") == b"b\0e"
            assert (await s.end_turn()).commands >= 1
            assert (await s.status())["session"] == NAME

    asyncio.run(run())
    assert children() == before
