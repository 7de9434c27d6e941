"""Session.create / Session.attach against a fake Kubernetes API (fake_api.py) in front of the
real loopback worker, reached at the session's in-cluster address (the tests pose as a pod):
the watch for Ready, waking, the typed failures, and the deletion on close with its uid
precondition and its wait. The port-forward and the real API server are the cluster e2e's
(test_cluster.py)."""

import asyncio
import threading
import time

import pytest

import kube_harness as kh
from conftest import TOKEN
from fake_api import FakeApi

SPEC = {"workspace": {"size": "1Gi"}}


def ready(url: str) -> dict:
    return {
        "phase": "Ready",
        "conditions": [{"type": "Ready", "status": "True", "reason": "WorkerReady"}],
        "workerPod": "w",
        "tokenSecret": "tok",
        "address": url,
    }


PENDING = {
    "phase": "Pending",
    "conditions": [{"type": "Ready", "status": "False", "reason": "WorkerStarting",
                    "message": "the worker pod is starting"}],
}


@pytest.fixture
def fake(tmp_path, monkeypatch):
    api = FakeApi()
    api.secret("tok", TOKEN)
    monkeypatch.setenv("KUBERNETES_SERVICE_HOST", "10.0.0.1")
    monkeypatch.delenv("KUBECONFIG", raising=False)
    api.config = api.kubeconfig(str(tmp_path / "kubeconfig"))
    yield api
    api.close()


def calls(api: FakeApi, method: str) -> list:
    return [c for c in api.calls if c["method"] == method]


def later(seconds: float, fn, *args) -> None:
    threading.Timer(seconds, fn, args).start()


def test_create_waits_for_ready_by_a_watch_runs_and_deletes_on_exit(worker, fake):
    fake.status_on_create = PENDING

    def operator():
        fake.wait_for(lambda: any(c["query"].get("watch") for c in fake.calls))
        name = next(iter(fake.objects))
        fake.set_status(name, ready(worker.url))

    threading.Thread(target=operator, daemon=True).start()
    with kh.Session.create(spec=SPEC, tier="tier0", ttl_seconds=600,
                           kubeconfig=fake.config) as s:
        assert s.namespace == "team" and s.name.startswith("agent-")
        assert s.exec("echo hi").stdout == "hi\n"
        made = calls(fake, "POST")[0]["body"]
        assert made["spec"] == {**SPEC, "workerTier": "tier0", "lifetime": {"ttlSeconds": 600}}
        assert made["metadata"] == {"generateName": "agent-"}
        uid = fake.objects[s.name]["metadata"]["uid"]
        # A watch, not reads in a loop: one read before it.
        gets = [c for c in calls(fake, "GET") if "/harnesssessions/" in c["path"]]
        assert len(gets) == 1, gets
    (delete,) = calls(fake, "DELETE")
    assert delete["body"]["propagationPolicy"] == "Foreground"
    assert delete["body"]["preconditions"] == {"uid": uid}
    assert fake.objects == {}


def test_close_waits_until_the_session_is_gone(worker, fake):
    fake.status_on_create = ready(worker.url)
    fake.delete_at_once = False
    s = kh.Session.create(spec=SPEC, kubeconfig=fake.config)
    name = s.name
    later(1.0, fake.remove, name)
    started = time.monotonic()
    s.close()
    assert time.monotonic() - started >= 0.9
    assert name not in fake.objects
    s.close()  # idempotent
    assert len(calls(fake, "DELETE")) == 1


def test_a_session_still_there_after_delete_timeout_is_a_cluster_error(worker, fake):
    fake.status_on_create = ready(worker.url)
    fake.delete_at_once = False
    s = kh.Session.create(spec=SPEC, kubeconfig=fake.config, delete_timeout=1.0)
    with pytest.raises(kh.ClusterError, match="not gone within 1 s"):
        s.close()


def test_the_block_raising_still_deletes_and_its_error_goes_on(worker, fake):
    fake.status_on_create = ready(worker.url)
    with pytest.raises(RuntimeError, match="the agent failed"):
        with kh.Session.create(spec=SPEC, kubeconfig=fake.config):
            raise RuntimeError("the agent failed")
    assert len(calls(fake, "DELETE")) == 1 and fake.objects == {}


def test_a_failed_deletion_is_noted_on_the_blocks_own_error(worker, fake):
    fake.status_on_create = ready(worker.url)
    fake.delete_at_once = False
    with pytest.raises(RuntimeError) as raised:
        with kh.Session.create(spec=SPEC, kubeconfig=fake.config, delete_timeout=0.5):
            raise RuntimeError("the agent failed")
    assert any("closing the session failed too" in n for n in raised.value.__notes__)


def test_keep_leaves_the_session(worker, fake):
    fake.status_on_create = ready(worker.url)
    with kh.Session.create(spec=SPEC, kubeconfig=fake.config, keep=True) as s:
        name = s.name
    assert calls(fake, "DELETE") == [] and name in fake.objects


def test_a_create_that_never_gets_ready_deletes_what_it_made(fake):
    fake.status_on_create = PENDING
    with pytest.raises(kh.NotReadyError) as raised:
        kh.Session.create(spec=SPEC, kubeconfig=fake.config, timeout=1.5)
    assert raised.value.phase == "Pending" and raised.value.reason == "WorkerStarting"
    assert len(calls(fake, "DELETE")) == 1 and fake.objects == {}


def test_attach_wakes_a_hibernated_session_and_never_deletes_it(worker, fake):
    fake.put("demo", SPEC, {"phase": "Hibernated", "conditions": []})

    def operator():
        fake.wait_for(lambda: calls(fake, "PATCH"))
        fake.set_status("demo", ready(worker.url))

    threading.Thread(target=operator, daemon=True).start()
    with kh.Session.attach("demo", kubeconfig=fake.config) as s:
        assert s.exec("echo woke").stdout == "woke\n"
    (patch,) = calls(fake, "PATCH")
    assert "kubeharness.dev/wake-requested" in patch["body"]["metadata"]["annotations"]
    assert calls(fake, "DELETE") == [] and "demo" in fake.objects


def test_a_client_that_may_not_watch_reads_instead(worker, fake):
    fake.forbid_watch = True
    fake.put("demo", SPEC, PENDING)
    later(1.0, fake.set_status, "demo", ready(worker.url))
    with kh.Session.attach("demo", kubeconfig=fake.config, timeout=10) as s:
        assert s.exec("true").exit_code == 0


def test_failures_are_typed(fake):
    with pytest.raises(kh.SessionNotFound):
        kh.Session.attach("nope", kubeconfig=fake.config)
    fake.put("off", {**SPEC, "suspend": True}, PENDING)
    with pytest.raises(kh.SessionSuspended, match="suspended"):
        kh.Session.attach("off", kubeconfig=fake.config)
    fake.put("gone", SPEC, {"phase": "Expired", "observedGeneration": 1})
    with pytest.raises(kh.SessionSuspended, match="expired"):
        kh.Session.attach("gone", kubeconfig=fake.config)
    fake.put("slow", SPEC, PENDING)
    with pytest.raises(kh.NotReadyError, match="not Ready after 1 s"):
        kh.Session.attach("slow", kubeconfig=fake.config, timeout=1)
    status = ready("http://127.0.0.1:9")
    status["tokenSecret"] = "missing"
    fake.put("nosecret", SPEC, status)
    with pytest.raises(kh.ClusterError) as raised:
        kh.Session.attach("nosecret", kubeconfig=fake.config)
    assert raised.value.status == 404


def test_an_unreachable_api_is_a_cluster_error(tmp_path, monkeypatch):
    api = FakeApi()
    config = api.kubeconfig(str(tmp_path / "kubeconfig"))
    api.close()
    with pytest.raises(kh.ClusterError):
        kh.Session.attach("demo", kubeconfig=config, timeout=2)
    with pytest.raises(kh.ClusterError, match="no usable Kubernetes configuration"):
        kh.Session.attach("demo", kubeconfig=str(tmp_path / "missing"))


def test_from_kubeconfig_is_attach_and_warns_about_kubectl(worker, fake, monkeypatch):
    fake.put("demo", SPEC, ready(worker.url))
    # $KUBECONFIG as set after the import (the `kubernetes` package reads it at import).
    monkeypatch.setenv("KUBECONFIG", fake.config)
    with pytest.warns(DeprecationWarning, match="kubectl"):
        s = kh.Session.from_kubeconfig("demo", "team", kubectl="/usr/bin/kubectl")
    with s:
        assert s.name == "demo" and s.exec("echo old").stdout == "old\n"


def test_the_async_twins(worker, fake):
    fake.status_on_create = ready(worker.url)
    fake.put("demo", SPEC, ready(worker.url))

    async def run():
        async with await kh.AsyncSession.create(spec=SPEC, kubeconfig=fake.config) as s:
            assert (await s.exec("echo a")).stdout == "a\n"
            made = s.name
        async with await kh.AsyncSession.attach("demo", kubeconfig=fake.config) as s:
            assert (await s.exec("echo b")).stdout == "b\n"
        return made

    made = asyncio.run(run())
    assert made not in fake.objects and "demo" in fake.objects
    assert len(calls(fake, "DELETE")) == 1


def test_a_cancelled_async_create_still_deletes_what_it_made(fake):
    fake.status_on_create = PENDING

    async def run():
        job = asyncio.ensure_future(
            kh.AsyncSession.create(spec=SPEC, kubeconfig=fake.config, timeout=2)
        )
        await asyncio.to_thread(fake.wait_for, lambda: fake.objects)
        job.cancel()
        with pytest.raises(asyncio.CancelledError):
            await job

    asyncio.run(run())
    # The thread gives up at its timeout and deletes what it made.
    fake.wait_for(lambda: calls(fake, "DELETE"), timeout=10)
    assert fake.objects == {}
