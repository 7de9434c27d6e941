"""Reaching a HarnessSession on a cluster with kubectl, as `kube-harness exec` does: find the
session, wake it if hibernated, wait for Ready, read its token, then either use its in-cluster
address (from inside a pod) or open `kubectl port-forward` to its worker pod.

Everything goes through the `kubectl` binary and the ambient kubeconfig (KUBECONFIG, the current
context and namespace), so it works wherever kubectl does, including on kind.
"""

import base64
import json
import os
import re
import subprocess
import tempfile
import time
from datetime import datetime, timezone
from typing import Any, Dict, List, Optional, Tuple

from ._errors import ClusterError, NotReadyError, SessionNotFound, SessionSuspended

RESOURCE = "harnesssessions.kubeharness.dev"
WAKE_ANNOTATION = "kubeharness.dev/wake-requested"
WORKER_PORT = 8080
POLL = 0.25
# How long `kubectl port-forward` may take to say where it listens.
FORWARD_WAIT = 30.0
# Bound on one `kubectl get`/`annotate` call.
CALL_TIMEOUT = 60.0
_FORWARDING = re.compile(rf"Forwarding from 127\.0\.0\.1:(\d+) -> {WORKER_PORT}\b")


class Kubectl:
    """The kubectl binary with the namespace flag (none: kubectl's current namespace)."""

    def __init__(self, kubectl: Optional[str], namespace: Optional[str]):
        self.binary = kubectl or os.environ.get("KH_KUBECTL") or "kubectl"
        self.namespace_args = ["-n", namespace] if namespace else []

    def argv(self, *args: str) -> List[str]:
        return [self.binary, *args, *self.namespace_args]

    def run(self, *args: str) -> str:
        argv = self.argv(*args)
        try:
            done = subprocess.run(
                argv,
                stdin=subprocess.DEVNULL,
                capture_output=True,
                text=True,
                timeout=CALL_TIMEOUT,
            )
        except (OSError, subprocess.TimeoutExpired) as e:
            raise ClusterError(f"{' '.join(argv)}: {e}") from e
        if done.returncode != 0:
            raise ClusterError(f"{' '.join(argv)} failed: {done.stderr.strip()}", done.stderr)
        return done.stdout

    def get(self, kind: str, name: str) -> Dict[str, Any]:
        return json.loads(self.run("get", kind, name, "-o", "json"))


def _ready_condition(status: Dict[str, Any]) -> Dict[str, Any]:
    return next((c for c in status.get("conditions") or [] if c.get("type") == "Ready"), {})


def wait_ready(kube: Kubectl, name: str, timeout: float) -> Dict[str, Any]:
    """The session's status once it is Ready with a worker pod, waking it (once) if it is
    hibernated."""
    deadline = time.monotonic() + timeout
    woke = False
    while True:
        try:
            session = kube.get(RESOURCE, name)
        except ClusterError as e:
            if "(NotFound)" in e.stderr:
                raise SessionNotFound(f"no HarnessSession {name!r}: {e.stderr.strip()}") from None
            raise
        status = session.get("status") or {}
        if (session.get("spec") or {}).get("suspend"):
            # Waking it would go against its spec: the operator would suspend it again.
            raise SessionSuspended(
                f"HarnessSession {name!r} is suspended (spec.suspend: true); set spec.suspend to "
                "false to run commands in it"
            )
        generation = (session.get("metadata") or {}).get("generation")
        if status.get("phase") == "Expired" and status.get("observedGeneration") == generation:
            raise SessionSuspended(
                f"HarnessSession {name!r} expired (lifetime.ttlSeconds passed): its worker and "
                "workspace were released"
            )
        ready = _ready_condition(status)
        if ready.get("status") == "True" and status.get("workerPod"):
            return status
        if status.get("phase") == "Hibernated" and not woke:
            now = datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%S.%fZ")
            kube.run("annotate", "--overwrite", RESOURCE, name, f"{WAKE_ANNOTATION}={now}")
            woke = True
        if time.monotonic() >= deadline:
            raise NotReadyError(name, timeout, status.get("phase"), ready)
        time.sleep(POLL)


def token(kube: Kubectl, name: str, status: Dict[str, Any]) -> str:
    secret = status.get("tokenSecret")
    if not secret:
        raise ClusterError(f"HarnessSession {name!r} names no token Secret")
    encoded = (kube.get("secret", secret).get("data") or {}).get("token")
    if not encoded:
        raise ClusterError(f"Secret {secret!r} has no `token`")
    return base64.b64decode(encoded).decode().strip()


class PortForward:
    """`kubectl port-forward pod/POD :8080`, running until close(). Its output goes to unlinked
    temporary files (read with pread, so kubectl's writes are never disturbed), not pipes: kubectl
    prints a line per connection, and a pipe nobody drains would eventually block it."""

    def __init__(self, kube: Kubectl, pod: str):
        self._out = tempfile.TemporaryFile()
        self._err = tempfile.TemporaryFile()
        argv = kube.argv("port-forward", f"pod/{pod}", f":{WORKER_PORT}")
        try:
            self.process = subprocess.Popen(
                argv, stdin=subprocess.DEVNULL, stdout=self._out, stderr=self._err
            )
        except OSError as e:
            self._out.close()
            self._err.close()
            raise ClusterError(f"{' '.join(argv)}: {e}") from e
        try:
            self.url = f"http://127.0.0.1:{self._wait_port(' '.join(argv))}"
        except BaseException:
            self.close()
            raise

    def _wait_port(self, command: str) -> int:
        deadline = time.monotonic() + FORWARD_WAIT
        while True:
            found = _FORWARDING.search(_contents(self._out))
            if found:
                return int(found.group(1))
            exited = self.process.poll()
            if exited is not None or time.monotonic() >= deadline:
                if exited is not None:
                    why = f"exited with {exited}"
                else:
                    why = f"said nothing usable in {FORWARD_WAIT:g} s"
                stderr = _contents(self._err).strip()
                raise ClusterError(f"{command} {why}: {stderr}", stderr)
            time.sleep(0.05)

    def close(self) -> None:
        """Stops kubectl (SIGTERM, then SIGKILL after 5 s) and reaps it; idempotent."""
        if self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(5)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        self._out.close()
        self._err.close()


def _contents(file: Any) -> str:
    return os.pread(file.fileno(), 1 << 16, 0).decode("utf-8", "replace")


def connect(
    name: str, namespace: Optional[str], kubectl: Optional[str], timeout: float
) -> Tuple[str, str, Optional[PortForward]]:
    """(url, token, the port-forward to close or None) for the session `name`."""
    kube = Kubectl(kubectl, namespace)
    status = wait_ready(kube, name, timeout)
    secret = token(kube, name, status)
    if os.environ.get("KUBERNETES_SERVICE_HOST") and status.get("address"):
        return status["address"], secret, None
    forward = PortForward(kube, status["workerPod"])
    return forward.url, secret, forward
