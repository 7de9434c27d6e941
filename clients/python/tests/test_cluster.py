"""The SDK against a real cluster, through the Kubernetes API (no kubectl): Session.attach to the
HarnessSession KH_E2E_SESSION (the port-forward in this process, or the in-cluster address from
inside a pod), and Session.create making sessions of its own and deleting them with everything
they own. Skipped unless KH_E2E_SESSION is set; the cluster e2e sets it with KH_E2E_NAMESPACE and
KUBECONFIG, runs with no kubectl on PATH (KH_E2E_NO_KUBECTL=1) and runs
`clients/python/test.sh tests/test_cluster.py`."""

import asyncio
import os
import shutil
import time
import uuid
from glob import glob

import pytest
from kubernetes import client as k8s
from kubernetes import config as k8s_config

import kube_harness as kh

NAME = os.environ.get("KH_E2E_SESSION")
NAMESPACE = os.environ.get("KH_E2E_NAMESPACE") or None
pytestmark = pytest.mark.skipif(not NAME, reason="KH_E2E_SESSION is not set (the cluster e2e)")
# What the demo example asks for (examples/demo.yaml).
SPEC = {
    "workerTier": "tier0",
    "workspace": {"size": "1Gi"},
    "runtime": {"python": True, "javascript": True, "network": False},
}


def open_session() -> kh.Session:
    return kh.Session.attach(NAME, NAMESPACE)


def children() -> set:
    """Pids of this process's children (from /proc): there should be none, kubectl or other."""
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


def owned(name: str, uid: str) -> list:
    """What in the namespace is the session's: owned by its uid or labelled with its name."""
    api = k8s_config.new_client_from_config(config_file=os.environ.get("KUBECONFIG"))
    core, custom = k8s.CoreV1Api(api), k8s.CustomObjectsApi(api)
    found = []
    lists = {
        "pod": core.list_namespaced_pod,
        "secret": core.list_namespaced_secret,
        "service": core.list_namespaced_service,
        "persistentvolumeclaim": core.list_namespaced_persistent_volume_claim,
        "configmap": core.list_namespaced_config_map,
    }
    for kind, list_them in lists.items():
        for item in list_them(NAMESPACE).items:
            refs = item.metadata.owner_references or []
            labels = item.metadata.labels or {}
            if any(r.uid == uid for r in refs) or labels.get("kubeharness.dev/session") == name:
                found.append(f"{kind}/{item.metadata.name}")
    turns = custom.list_namespaced_custom_object(
        "kubeharness.dev", "v1alpha1", NAMESPACE, "harnessturns"
    )
    for item in turns["items"]:
        if item["spec"].get("session") == name:
            found.append(f"harnessturn/{item['metadata']['name']}")
    try:
        custom.get_namespaced_custom_object(
            "kubeharness.dev", "v1alpha1", NAMESPACE, "harnesssessions", name
        )
        found.append(f"harnesssession/{name}")
    except k8s.ApiException as e:
        assert e.status == 404, e
    api.close()
    return found


def assert_all_gone(name: str, uid: str) -> None:
    """The session and its children are gone (PVCs may take a moment after their pod)."""
    deadline = time.monotonic() + 120
    while left := owned(name, uid):
        assert time.monotonic() < deadline, f"still there after 120 s: {left}"
        time.sleep(1)


def uid_of(s: kh.Session) -> str:
    return s._reached.delete_uid  # the uid the deletion is conditioned on


def test_no_kubectl_is_needed():
    if os.environ.get("KH_E2E_NO_KUBECTL") == "1":
        assert shutil.which("kubectl") is None, shutil.which("kubectl")


def test_create_runs_commands_and_deletes_the_session_and_its_children():
    before = children()
    with kh.Session.create(namespace=NAMESPACE, spec=SPEC, ttl_seconds=3600) as s:
        name, uid = s.name, uid_of(s)
        assert name.startswith("agent-") and s.namespace == NAMESPACE
        assert owned(name, uid), "the session has no children while it runs"
        r = s.exec("echo hi > /session/a.txt && cat /session/a.txt")
        assert (r.stdout, r.exit_code) == ("hi\n", 0)
        assert s.write_file("/session/b.bin", b"b\0data").change == "created"
        assert s.read_file("/session/b.bin") == b"b\0data"
        assert s.exec("cat /session/a.txt").stdout == "hi\n"
    assert_all_gone(name, uid)
    assert children() == before


def test_create_deletes_when_the_block_raised():
    with pytest.raises(RuntimeError, match="the agent failed"):
        with kh.Session.create(namespace=NAMESPACE, spec=SPEC, generate_name="agent-raise-") as s:
            name, uid = s.name, uid_of(s)
            assert s.exec("true").exit_code == 0
            raise RuntimeError("the agent failed")
    assert_all_gone(name, uid)


def test_the_async_create():
    async def run():
        async with await kh.AsyncSession.create(namespace=NAMESPACE, spec=SPEC) as s:
            assert (await s.exec("echo async")).stdout == "async\n"
            return s.name, uid_of(s)

    name, uid = asyncio.run(run())
    assert_all_gone(name, uid)


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


def test_closing_an_attached_session_leaves_nothing_running_and_the_session_there():
    before = children()
    s = open_session()
    try:
        assert s.exec("true").exit_code == 0
    finally:
        s.close()
    assert children() == before
    with open_session() as again:
        assert again.exec("true").exit_code == 0


def test_the_async_session(scratch):
    before = children()

    async def run():
        async with await kh.AsyncSession.attach(NAME, NAMESPACE) as s:
            assert (await s.exec("echo async")).stdout == "async\n"
            items = [i async for i in s.stream("echo one")]
            assert items[-1].exit_code == 0 and kh.Chunk("stdout", "one\n") in items
            await s.write_file(f"{scratch}/b.bin", b"b\0e")
            assert await s.read_file(f"{scratch}/b.bin") == b"b\0e"
            assert (await s.end_turn()).commands >= 1
            assert (await s.status())["session"] == NAME

    asyncio.run(run())
    assert children() == before


def test_two_clients_one_turn():
    with open_session() as a, open_session() as b:
        turn = a.open_turn("e2e-client-a")
        assert a.exec("echo mine").stdout == "mine\n"
        with pytest.raises(kh.TurnBusy) as busy:
            b.exec("echo theirs")
        assert busy.value.status == 409 and "e2e-client-a" in busy.value.message
        assert turn in busy.value.message
        with pytest.raises(kh.TurnBusy):
            b.end_turn()
        assert a.end_turn().commands == 1
        assert b.exec("echo free").stdout == "free\n"
        assert b.end_turn().commands == 1
