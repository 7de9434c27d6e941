"""Making or finding a HarnessSession and letting it go: what Session.create / Session.attach do
on the cluster before the first request, and what close() does after the last. Blocking; the
async twins run these in a worker thread."""

import threading
from dataclasses import dataclass
from typing import Any, Dict, Optional

from ._cluster import Cluster, PortForward, connect


@dataclass
class Reached:
    """A Ready session's worker: where it answers, and what closing lets go."""

    url: str
    token: str
    name: str
    namespace: str
    cluster: Cluster
    forward: Optional[PortForward]
    #: The uid of a session this client created and deletes on close (None: attached, or kept).
    delete_uid: Optional[str]
    delete_timeout: float


def body(
    spec: Optional[Dict[str, Any]],
    tier: Optional[str],
    ttl_seconds: Optional[int],
    generate_name: str,
    labels: Optional[Dict[str, str]],
) -> Dict[str, Any]:
    """The HarnessSession to create: `spec` as given, with `tier` as its workerTier (the level-0
    tier whose warm pool serves it) and `ttl_seconds` as lifetime.ttlSeconds when set."""
    full = dict(spec or {})
    if tier is not None:
        full["workerTier"] = tier
    if ttl_seconds is not None:
        full["lifetime"] = {**(full.get("lifetime") or {}), "ttlSeconds": int(ttl_seconds)}
    metadata: Dict[str, Any] = {"generateName": generate_name}
    if labels:
        metadata["labels"] = dict(labels)
    return {
        "apiVersion": "kubeharness.dev/v1alpha1",
        "kind": "HarnessSession",
        "metadata": metadata,
        "spec": full,
    }


def reach(
    *,
    name: Optional[str],
    create: Optional[Dict[str, Any]],
    namespace: Optional[str],
    keep: bool,
    timeout: float,
    delete_timeout: float,
    kubeconfig: Optional[str],
    context: Optional[str],
) -> Reached:
    """Creates the session `create` (a body) or finds `name`, waits for it to be Ready and
    reaches its worker. A created session is deleted again when this fails (unless `keep`)."""
    cluster = Cluster(namespace, kubeconfig=kubeconfig, context=context)
    uid: Optional[str] = None
    try:
        if create is not None:
            made = cluster.create(create)
            name, uid = made["metadata"]["name"], made["metadata"]["uid"]
        assert name is not None
        try:
            url, token, forward, _status = connect(cluster, name, timeout)
        except BaseException:
            if uid is not None and not keep:
                cluster.delete(name, uid)
            raise
    except BaseException:
        cluster.close()
        raise
    return Reached(
        url=url,
        token=token,
        name=name,
        namespace=cluster.namespace,
        cluster=cluster,
        forward=forward,
        delete_uid=None if keep else uid,
        delete_timeout=delete_timeout,
    )


def release(reached: Reached) -> None:
    """Stops the port-forward, then deletes the session this client created (in the foreground,
    waiting until it and its children are gone, up to delete_timeout: ClusterError after)."""
    try:
        if reached.forward is not None:
            reached.forward.close()
    finally:
        try:
            if reached.delete_uid is not None:
                reached.cluster.delete(reached.name, reached.delete_uid)
                reached.cluster.wait_gone(reached.name, reached.delete_uid, reached.delete_timeout)
        finally:
            reached.cluster.close()


def release_later(reached: Reached) -> None:
    """release() on a thread of its own: for a session reached by an async call that was
    cancelled meanwhile (nobody awaits it any more)."""
    threading.Thread(target=release, args=(reached,), name="kh-release", daemon=True).start()
