"""Session.from_kubeconfig's process handling, with a fake `kubectl` (a script written into
tmp_path) in front of the loopback worker: it answers `get` with a session and its Secret, and
`port-forward` by printing the Forwarding line for the worker's port, then sleeping. This checks
the waiting, waking, parsing and that no kubectl is left behind; the real-kubectl path is covered
by the cluster e2e (test_cluster.py, run against a session on the test cluster)."""

import asyncio
import json
import os
import sys
from pathlib import Path
from urllib.parse import urlsplit

import pytest

import kube_harness as kh
from kube_harness import _kube
from conftest import TOKEN

FAKE_KUBECTL = f"""#!{sys.executable}
import base64, json, os, sys, time
here = os.path.dirname(os.path.abspath(__file__))
config = json.load(open(os.path.join(here, "config.json")))
args = sys.argv[1:]
with open(os.path.join(here, "calls.jsonl"), "a") as log:
    log.write(json.dumps(args) + "\\n")
if args[:2] == ["get", "harnesssessions.kubeharness.dev"]:
    statuses = config["statuses"]
    if not statuses:
        print('Error from server (NotFound): harnesssessions.kubeharness.dev "%s" not found'
              % args[2], file=sys.stderr)
        sys.exit(1)
    calls = [json.loads(line) for line in open(os.path.join(here, "calls.jsonl"))]
    gets = sum(1 for c in calls if c[:2] == args[:2])
    status = dict(statuses[min(gets, len(statuses)) - 1])
    spec = status.pop("_spec", {{}})
    print(json.dumps({{"kind": "HarnessSession", "spec": spec, "status": status}}))
elif args[:2] == ["get", "secret"]:
    token = base64.b64encode(config["token"].encode()).decode()
    print(json.dumps({{"kind": "Secret", "data": {{"token": token}}}}))
elif args[0] == "port-forward":
    open(os.path.join(here, "forward.pid"), "w").write(str(os.getpid()))
    if config["forward"] == "fail":
        print("error: unable to forward: pod is not running", file=sys.stderr)
        sys.exit(1)
    if config["forward"] == "ok":
        print("Forwarding from 127.0.0.1:%d -> 8080" % config["port"], flush=True)
        print("Forwarding from [::1]:%d -> 8080" % config["port"], flush=True)
    time.sleep(600)
"""

READY = {
    "phase": "Ready",
    "conditions": [{"type": "Ready", "status": "True", "reason": "WorkerReady", "message": ""}],
    "workerPod": "demo-worker",
    "tokenSecret": "demo-token",
}
HIBERNATED = {
    "phase": "Hibernated",
    "conditions": [
        {"type": "Ready", "status": "False", "reason": "Hibernated", "message": "idle"}
    ],
    "tokenSecret": "demo-token",
}
# spec.suspend: true (the fake prints `_spec` as the object's spec).
SUSPENDED = dict(HIBERNATED, _spec={"suspend": True})
EXPIRED = {
    "phase": "Expired",
    "conditions": [
        {"type": "Ready", "status": "False", "reason": "Expired", "message": "ttl passed"}
    ],
}
STARTING = {
    "phase": "Provisioning",
    "conditions": [
        {"type": "Ready", "status": "False", "reason": "WorkerStarting", "message": "pod pending"}
    ],
}


class Fake:
    def __init__(self, root: Path):
        self.root = root
        self.kubectl = str(root / "kubectl")

    def configure(self, statuses, forward="ok", port=0):
        config = {"statuses": statuses, "forward": forward, "port": port, "token": TOKEN + "\n"}
        (self.root / "config.json").write_text(json.dumps(config))

    def calls(self):
        path = self.root / "calls.jsonl"
        return [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []

    def forward_pid(self):
        path = self.root / "forward.pid"
        return int(path.read_text()) if path.exists() else None


def gone(pid) -> bool:
    """The process has exited and was reaped (no zombie left either)."""
    return not os.path.exists(f"/proc/{pid}")


@pytest.fixture
def fake(tmp_path, monkeypatch):
    monkeypatch.delenv("KUBERNETES_SERVICE_HOST", raising=False)
    monkeypatch.delenv("KH_KUBECTL", raising=False)
    root = tmp_path / "fake-kubectl"
    root.mkdir()
    (root / "kubectl").write_text(FAKE_KUBECTL)
    (root / "kubectl").chmod(0o755)
    return Fake(root)


def test_a_hibernated_session_is_woken_then_reached_through_a_port_forward(worker, fake):
    fake.configure([HIBERNATED, READY], port=urlsplit(worker.url).port)
    with kh.Session.from_kubeconfig("demo", "agents", kubectl=fake.kubectl, timeout=10) as s:
        assert s.exec("echo hi").stdout == "hi\n"
        pid = fake.forward_pid()
        assert not gone(pid)
    assert gone(pid)
    calls = fake.calls()
    assert all(c[-2:] == ["-n", "agents"] for c in calls), calls
    annotate = [c for c in calls if c[0] == "annotate"]
    assert len(annotate) == 1
    assert annotate[0][:3] == ["annotate", "--overwrite", "harnesssessions.kubeharness.dev"]
    assert annotate[0][4].startswith("kubeharness.dev/wake-requested=20")
    assert ["get", "secret", "demo-token", "-o", "json", "-n", "agents"] in calls
    assert calls[-1] == ["port-forward", "pod/demo-worker", ":8080", "-n", "agents"]


def test_inside_a_pod_the_address_is_used_without_a_port_forward(worker, fake, monkeypatch):
    monkeypatch.setenv("KUBERNETES_SERVICE_HOST", "10.0.0.1")
    monkeypatch.setenv("KH_KUBECTL", fake.kubectl)
    fake.configure([dict(READY, address=worker.url)])
    with kh.Session.from_kubeconfig("demo") as s:
        assert s.exec("echo in-pod").stdout == "in-pod\n"
    calls = fake.calls()
    assert [c[0] for c in calls] == ["get", "get"]
    assert not any("-n" in c for c in calls)


def test_the_async_session_stops_its_port_forward_on_close(worker, fake):
    fake.configure([READY], port=urlsplit(worker.url).port)

    async def run():
        async with await kh.AsyncSession.from_kubeconfig("demo", kubectl=fake.kubectl) as s:
            assert (await s.exec("echo async")).stdout == "async\n"
            assert not gone(fake.forward_pid())

    asyncio.run(run())
    assert gone(fake.forward_pid())


@pytest.mark.parametrize(
    "statuses, forward, error, text",
    [
        ([], None, kh.SessionNotFound, "not found"),
        ([STARTING], None, kh.NotReadyError, "phase Provisioning; WorkerStarting: pod pending"),
        ([SUSPENDED, READY], None, kh.SessionSuspended, "suspended"),
        ([EXPIRED], None, kh.SessionSuspended, "expired"),
        ([READY], "fail", kh.ClusterError, "exited with 1: error: unable to forward"),
        ([READY], "silent", kh.ClusterError, "said nothing usable"),
    ],
)
def test_failures_are_typed_and_leave_no_kubectl_behind(
    fake, monkeypatch, statuses, forward, error, text
):
    monkeypatch.setattr(_kube, "FORWARD_WAIT", 1.0)
    fake.configure(statuses, forward=forward or "ok")
    with pytest.raises(error, match=text):
        kh.Session.from_kubeconfig("demo", kubectl=fake.kubectl, timeout=0.6)
    pid = fake.forward_pid()
    if forward is None:  # failed before the port-forward
        assert pid is None
    else:
        assert gone(pid)


def test_a_missing_kubectl_is_a_cluster_error(monkeypatch, tmp_path):
    monkeypatch.setenv("KH_KUBECTL", str(tmp_path / "no-kubectl"))
    with pytest.raises(kh.ClusterError, match="no-kubectl"):
        kh.Session.from_kubeconfig("demo")
