"""HarnessSessions on a cluster through the Kubernetes API (the `kubernetes` client, no kubectl):
create one, wait for it to be Ready by a watch (waking it once if hibernated), read its token,
reach its worker (the in-cluster address from inside a pod, else an in-process port-forward),
and delete it.

The calls are blocking; AsyncSession runs them in a worker thread.
"""

import base64
import os
import select
import socket
import threading
import time
from datetime import datetime, timezone
from typing import Any, Dict, Optional, Tuple

import urllib3
from kubernetes import client as k8s
from kubernetes import config as k8s_config
from kubernetes import watch as k8s_watch
from kubernetes.client.rest import ApiException
from kubernetes.stream import portforward

from ._errors import ClusterError, NotReadyError, SessionNotFound, SessionSuspended

GROUP, VERSION, PLURAL = "kubeharness.dev", "v1alpha1", "harnesssessions"
KIND = "HarnessSession"
WAKE_ANNOTATION = "kubeharness.dev/wake-requested"
WORKER_PORT = 8080
# Bound on one API call (not on a watch, which has its own server-side timeout).
CALL_TIMEOUT = 30.0
# Between reads when watching is not allowed (a client with only `get`, as docs/operator.md
# promises is enough to use a session).
POLL = 0.5
_SA_NAMESPACE = "/var/run/secrets/kubernetes.io/serviceaccount/namespace"


def in_a_pod() -> bool:
    """Inside a pod (the API server's address is in the environment): a session's in-cluster
    address is routable from here, so no port-forward is needed."""
    return bool(os.environ.get("KUBERNETES_SERVICE_HOST"))


def _kubeconfig(given: Optional[str]) -> Optional[str]:
    """The kubeconfig to load: the argument, else $KUBECONFIG (read now: the `kubernetes` package
    reads it once at import), else ~/.kube/config when it exists; None: the pod's service
    account."""
    found = given or os.environ.get("KUBECONFIG")
    if found:
        return found
    default = os.path.expanduser("~/.kube/config")
    return default if os.path.exists(default) else None


class Cluster:
    """The API of the ambient kubeconfig (KUBECONFIG or ~/.kube/config, its current context) or,
    without one, the pod's service account; `namespace` None is the context's namespace (the
    pod's own with its service account), else `default`."""

    def __init__(
        self,
        namespace: Optional[str] = None,
        *,
        kubeconfig: Optional[str] = None,
        context: Optional[str] = None,
    ):
        kubeconfig = _kubeconfig(kubeconfig)
        try:
            if kubeconfig is None and in_a_pod():
                configuration = k8s.Configuration()
                k8s_config.load_incluster_config(client_configuration=configuration)
                self.api = k8s.ApiClient(configuration)
                found = _read(_SA_NAMESPACE)
            else:
                self.api = k8s_config.new_client_from_config(
                    config_file=kubeconfig, context=context
                )
                found = _context_namespace(kubeconfig, context)
        except (k8s_config.ConfigException, OSError, ValueError) as e:
            raise ClusterError(f"no usable Kubernetes configuration: {e}") from e
        self.namespace = namespace or found or "default"
        self.custom = k8s.CustomObjectsApi(self.api)
        self.core = k8s.CoreV1Api(self.api)

    def close(self) -> None:
        self.api.close()

    def create(self, body: Dict[str, Any]) -> Dict[str, Any]:
        return self._call(
            "create",
            body.get("metadata", {}).get("name") or body["metadata"].get("generateName", ""),
            self.custom.create_namespaced_custom_object,
            GROUP, VERSION, self.namespace, PLURAL, body,
        )

    def get(self, name: str) -> Dict[str, Any]:
        return self._call(
            "get", name, self.custom.get_namespaced_custom_object,
            GROUP, VERSION, self.namespace, PLURAL, name,
        )

    def wake(self, name: str) -> None:
        now = datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%S.%fZ")
        patch = {"metadata": {"annotations": {WAKE_ANNOTATION: now}}}
        self._call(
            "wake", name, self.custom.patch_namespaced_custom_object,
            GROUP, VERSION, self.namespace, PLURAL, name, patch,
        )

    def delete(self, name: str, uid: Optional[str]) -> None:
        """Deletes the session in the foreground (its children first); gone already is fine. The
        uid precondition keeps a session made later under the same name."""
        body = k8s.V1DeleteOptions(
            propagation_policy="Foreground",
            preconditions=k8s.V1Preconditions(uid=uid) if uid else None,
        )
        try:
            self._call(
                "delete", name, self.custom.delete_namespaced_custom_object,
                GROUP, VERSION, self.namespace, PLURAL, name, body=body,
            )
        except SessionNotFound:
            pass
        except ClusterError as e:
            # 409 on the uid precondition: that name is another session now; ours is gone.
            if e.status != 409:
                raise

    def wait_gone(self, name: str, uid: Optional[str], timeout: float) -> None:
        """Returns once no session `name` with this uid exists (ClusterError after `timeout`)."""
        def gone(obj: Optional[Dict[str, Any]]) -> bool:
            return obj is None or (uid is not None and obj["metadata"].get("uid") != uid)

        if self._watch(name, timeout, gone) is _TIMED_OUT:
            raise ClusterError(
                f"HarnessSession {name!r} in {self.namespace!r} was not gone within "
                f"{timeout:g} s of its deletion (a finalizer or a child still held it)"
            )

    def wait_ready(self, name: str, timeout: float) -> Dict[str, Any]:
        """The session's status once it is Ready with a worker pod, waking it (once) if it is
        hibernated. Watches it (list/watch on harnesssessions), or reads it every POLL seconds
        when the client may only `get`."""
        woke = [False]
        last: Dict[str, Any] = {}

        def ready(obj: Optional[Dict[str, Any]]) -> bool:
            if obj is None:
                raise SessionNotFound(f"no HarnessSession {name!r} in {self.namespace!r}")
            status = obj.get("status") or {}
            last.clear()
            last.update(status)
            _refuse_stopped(name, obj)
            condition = _ready_condition(status)
            if condition.get("status") == "True" and status.get("workerPod"):
                return True
            if status.get("phase") == "Hibernated" and not woke[0]:
                self.wake(name)
                woke[0] = True
            return False

        found = self._watch(name, timeout, ready)
        if found is _TIMED_OUT:
            raise NotReadyError(name, timeout, last.get("phase"), _ready_condition(last))
        return found["status"]

    def token(self, name: str, status: Dict[str, Any]) -> str:
        secret = status.get("tokenSecret")
        if not secret:
            raise ClusterError(f"HarnessSession {name!r} names no token Secret")
        try:
            found = self.core.read_namespaced_secret(
                secret, self.namespace, _request_timeout=CALL_TIMEOUT
            )
        except ApiException as e:
            raise _api_error("read the token Secret of", name, e) from None
        except (OSError, urllib3.exceptions.HTTPError) as e:
            raise ClusterError(f"read the token Secret of {name!r}: {e}") from e
        encoded = (found.data or {}).get("token")
        if not encoded:
            raise ClusterError(f"Secret {secret!r} has no `token`")
        return base64.b64decode(encoded).decode().strip()

    def _watch(self, name: str, timeout: float, done: Any) -> Any:
        """Calls done(object or None when absent) on the current object and on every change
        until it returns true (that object, or None when absent) or `timeout` passes
        (_TIMED_OUT). A watch when allowed, else reads every POLL seconds."""
        deadline = time.monotonic() + timeout
        while True:
            # A read first, and again whenever a watch ends (its time-out, a closed connection,
            # a version too old) or may not be made.
            current = self._find(name)
            if done(current):
                return current
            left = deadline - time.monotonic()
            if left <= 0:
                return _TIMED_OUT
            version = current["metadata"]["resourceVersion"] if current else None
            try:
                for obj in self._changes(name, version, left):
                    if done(obj):
                        return obj
            except _Expired:
                pass
            except _NoWatch:
                time.sleep(min(POLL, max(0.0, deadline - time.monotonic())))

    def _find(self, name: str) -> Optional[Dict[str, Any]]:
        try:
            return self.get(name)
        except SessionNotFound:
            return None

    def _changes(self, name: str, version: Optional[str], left: float) -> Any:
        """The object after each change (None once deleted), from a watch of `name`."""
        w = k8s_watch.Watch()
        kwargs: Dict[str, Any] = {
            "field_selector": f"metadata.name={name}",
            "timeout_seconds": max(1, int(left)),
            "_request_timeout": left + 5,
        }
        if version:
            kwargs["resource_version"] = version
        try:
            for event in w.stream(
                self.custom.list_namespaced_custom_object,
                GROUP, VERSION, self.namespace, PLURAL, **kwargs,
            ):
                kind = event.get("type")
                if kind == "ERROR":
                    raise _Expired()
                yield None if kind == "DELETED" else event["object"]
        except ApiException as e:
            if e.status == 410:
                raise _Expired() from None
            if e.status == 403:
                raise _NoWatch() from None
            raise _api_error("watch", name, e) from None
        except (_Expired, _NoWatch):
            raise
        except (OSError, ValueError, urllib3.exceptions.HTTPError):
            # A read time-out or a dropped connection ends this watch: read, watch again.
            return
        finally:
            w.stop()

    def _call(self, verb: str, name: str, method: Any, *args: Any, **kwargs: Any) -> Any:
        try:
            return method(*args, _request_timeout=CALL_TIMEOUT, **kwargs)
        except ApiException as e:
            raise _api_error(verb, name, e) from None
        except (OSError, urllib3.exceptions.HTTPError) as e:
            raise ClusterError(f"{verb} HarnessSession {name!r}: {e}") from e


class _Expired(Exception):
    """The watch's resource version is too old: start again from a read."""


class _NoWatch(Exception):
    """The client may not watch harnesssessions: read instead."""


_TIMED_OUT = object()


def _api_error(verb: str, name: str, e: ApiException) -> Exception:
    detail = (e.body or e.reason or "").strip() if isinstance(e.body, (str, type(None))) else e.reason
    if e.status == 404 and verb != "read the token Secret of":
        return SessionNotFound(f"no HarnessSession {name!r}: {detail}")
    return ClusterError(f"{verb} HarnessSession {name!r}: {e.status} {detail}", detail, e.status)


def _refuse_stopped(name: str, obj: Dict[str, Any]) -> None:
    status = obj.get("status") or {}
    if (obj.get("spec") or {}).get("suspend"):
        # Waking it would go against its spec: the operator would suspend it again.
        raise SessionSuspended(
            f"HarnessSession {name!r} is suspended (spec.suspend: true); set spec.suspend to "
            "false to run commands in it"
        )
    generation = (obj.get("metadata") or {}).get("generation")
    if status.get("phase") == "Expired" and status.get("observedGeneration") == generation:
        raise SessionSuspended(
            f"HarnessSession {name!r} expired (lifetime.ttlSeconds passed): its worker and "
            "workspace were released"
        )


def _ready_condition(status: Dict[str, Any]) -> Dict[str, Any]:
    return next((c for c in status.get("conditions") or [] if c.get("type") == "Ready"), {})


def _read(path: str) -> Optional[str]:
    try:
        with open(path) as f:
            return f.read().strip() or None
    except OSError:
        return None


def _context_namespace(kubeconfig: Optional[str], context: Optional[str]) -> Optional[str]:
    contexts, active = k8s_config.list_kube_config_contexts(config_file=kubeconfig)
    chosen = next((c for c in contexts if c.get("name") == context), None) if context else active
    return ((chosen or {}).get("context") or {}).get("namespace")


class PortForward:
    """The worker pod's port 8080 at http://127.0.0.1:PORT, in this process: a loopback listener
    whose every connection is carried by its own port-forward stream of the API server (the
    `kubernetes` client's websocket port-forward). close() stops it and every connection."""

    def __init__(self, cluster: Cluster, pod: str):
        self._cluster, self._pod = cluster, pod
        self._listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self._listener.bind(("127.0.0.1", 0))
        self._listener.listen(64)
        self.url = f"http://127.0.0.1:{self._listener.getsockname()[1]}"
        self._closed = threading.Event()
        self._lock = threading.Lock()
        self._open: set = set()
        # Fails now, not on the first request, when the pod cannot be reached.
        self._open_stream().close()
        threading.Thread(target=self._accept, name="kh-port-forward", daemon=True).start()

    def _open_stream(self) -> Any:
        try:
            return portforward(
                self._cluster.core.connect_get_namespaced_pod_portforward,
                self._pod,
                self._cluster.namespace,
                ports=str(WORKER_PORT),
            )
        except Exception as e:
            raise ClusterError(f"port-forward to pod {self._pod!r}: {e}") from e

    def _accept(self) -> None:
        while not self._closed.is_set():
            try:
                local, _ = self._listener.accept()
            except OSError:
                return
            threading.Thread(
                target=self._carry, args=(local,), name="kh-port-forward-conn", daemon=True
            ).start()

    def _carry(self, local: socket.socket) -> None:
        try:
            stream = self._open_stream()
        except ClusterError:
            local.close()
            return
        remote = stream.socket(WORKER_PORT)
        with self._lock:
            self._open.update((local, remote))
        try:
            _pump(local, remote, self._closed)
        finally:
            with self._lock:
                self._open.discard(local)
                self._open.discard(remote)
            for s in (local, remote):
                try:
                    s.close()
                except OSError:
                    pass

    def close(self) -> None:
        """Stops listening and closes every connection; idempotent."""
        self._closed.set()
        try:
            self._listener.close()
        except OSError:
            pass
        with self._lock:
            for s in list(self._open):
                try:
                    s.shutdown(socket.SHUT_RDWR)
                except OSError:
                    pass


def _pump(a: Any, b: Any, closed: threading.Event) -> None:
    """Copies bytes both ways until both directions ended (a half-close is passed on)."""
    peers = {a.fileno(): (a, b), b.fileno(): (b, a)}
    reading = set(peers)
    while reading and not closed.is_set():
        ready, _, _ = select.select(list(reading), [], [], 0.5)
        for fd in ready:
            src, dst = peers[fd]
            try:
                data = src.recv(65536)
            except OSError:
                data = b""
            if data:
                try:
                    dst.sendall(data)
                    continue
                except OSError:
                    return
            reading.discard(fd)
            try:
                dst.shutdown(socket.SHUT_WR)
            except OSError:
                return


def connect(
    cluster: Cluster, name: str, timeout: float
) -> Tuple[str, str, Optional[PortForward], Dict[str, Any]]:
    """(url, token, the port-forward to close or None, the Ready status) of session `name`."""
    status = cluster.wait_ready(name, timeout)
    secret = cluster.token(name, status)
    if in_a_pod() and status.get("address"):
        return status["address"], secret, None, status
    forward = PortForward(cluster, status["workerPod"])
    return forward.url, secret, forward, status
