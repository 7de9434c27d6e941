"""A fake Kubernetes API server on loopback for the lifecycle's unit tests: HarnessSessions (get,
create with generateName, merge patch, delete with preconditions, watch by field selector) and
Secrets (get). A test drives what the "operator" does by calling set_status/remove; every change
reaches open watches at once. The real API server is the cluster e2e's (test_cluster.py)."""

import json
import re
import threading
import time
import uuid
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Dict, List, Optional
from urllib.parse import parse_qs, urlsplit

SESSIONS = re.compile(
    r"^/apis/kubeharness\.dev/v1alpha1/namespaces/([^/]+)/harnesssessions(?:/([^/]+))?$"
)
SECRET = re.compile(r"^/api/v1/namespaces/([^/]+)/secrets/([^/]+)$")


class FakeApi:
    def __init__(self) -> None:
        self.lock = threading.Condition()
        self.objects: Dict[str, Dict[str, Any]] = {}
        self.secrets: Dict[str, Dict[str, str]] = {}
        self.version = 1
        # (type, name, object) in the order they happened, for watches.
        self.events: List[tuple] = []
        self.calls: List[Dict[str, Any]] = []
        self.forbid_watch = False
        # On create, the status the new object gets (a dict, or None to leave it without).
        self.status_on_create: Optional[Dict[str, Any]] = None
        # On delete: remove the object at once (else it keeps a deletionTimestamp until remove).
        self.delete_at_once = True
        api = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args: Any) -> None:
                pass

            def do_GET(self) -> None:
                api._handle(self, "GET")

            def do_POST(self) -> None:
                api._handle(self, "POST")

            def do_PATCH(self) -> None:
                api._handle(self, "PATCH")

            def do_DELETE(self) -> None:
                api._handle(self, "DELETE")

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()

    def kubeconfig(self, path: str, namespace: str = "team") -> str:
        config = {
            "apiVersion": "v1",
            "kind": "Config",
            "clusters": [{"name": "fake", "cluster": {"server": self.url}}],
            "users": [{"name": "u", "user": {"token": "fake-token"}}],
            "contexts": [
                {"name": "fake", "context": {"cluster": "fake", "user": "u", "namespace": namespace}}
            ],
            "current-context": "fake",
        }
        with open(path, "w") as f:
            json.dump(config, f)
        return path

    # What the test plays as the operator.

    def put(self, name: str, spec: Dict[str, Any], status: Optional[Dict[str, Any]]) -> None:
        with self.lock:
            obj = {
                "apiVersion": "kubeharness.dev/v1alpha1",
                "kind": "HarnessSession",
                "metadata": {"name": name, "namespace": "team", "uid": str(uuid.uuid4()),
                             "generation": 1},
                "spec": spec,
            }
            if status is not None:
                obj["status"] = status
            self._changed("ADDED", name, obj)

    def set_status(self, name: str, status: Dict[str, Any]) -> None:
        with self.lock:
            obj = json.loads(json.dumps(self.objects[name]))
            obj["status"] = status
            self._changed("MODIFIED", name, obj)

    def remove(self, name: str) -> None:
        with self.lock:
            self._changed("DELETED", name, None)

    def secret(self, name: str, token: str) -> None:
        import base64

        self.secrets[name] = {"token": base64.b64encode(token.encode()).decode()}

    def wait_for(self, predicate: Any, timeout: float = 10.0) -> None:
        deadline = time.monotonic() + timeout
        with self.lock:
            while not predicate():
                left = deadline - time.monotonic()
                assert left > 0, f"the fake API never saw it; calls: {self.calls}"
                self.lock.wait(left)

    def _changed(self, kind: str, name: str, obj: Optional[Dict[str, Any]]) -> None:
        self.version += 1
        if obj is None:
            gone = self.objects.pop(name, None)
            gone = dict(gone or {"metadata": {"name": name}})
            gone["metadata"] = {**gone["metadata"], "resourceVersion": str(self.version)}
            self.events.append((kind, name, gone))
        else:
            obj["metadata"]["resourceVersion"] = str(self.version)
            self.objects[name] = obj
            self.events.append((kind, name, obj))
        self.lock.notify_all()

    # HTTP.

    def _handle(self, h: BaseHTTPRequestHandler, method: str) -> None:
        url = urlsplit(h.path)
        query = {k: v[0] for k, v in parse_qs(url.query).items()}
        length = int(h.headers.get("Content-Length") or 0)
        body = json.loads(h.rfile.read(length)) if length else None
        with self.lock:
            self.calls.append({"method": method, "path": url.path, "query": query, "body": body})
            self.lock.notify_all()
        found = SESSIONS.match(url.path)
        if found and found.group(2) is None and method == "GET" and query.get("watch"):
            return self._watch(h, query)
        with self.lock:
            status, answer = self._answer(method, found, SECRET.match(url.path), body)
        raw = json.dumps(answer).encode()
        h.send_response(status)
        h.send_header("Content-Type", "application/json")
        h.send_header("Content-Length", str(len(raw)))
        h.end_headers()
        h.wfile.write(raw)

    def _answer(self, method: str, found: Any, secret: Any, body: Any) -> tuple:
        if secret:
            data = self.secrets.get(secret.group(2))
            if data is None:
                return 404, _status(404, "NotFound", f'secrets "{secret.group(2)}" not found')
            return 200, {"apiVersion": "v1", "kind": "Secret", "data": data}
        if not found:
            return 404, _status(404, "NotFound", "no such path")
        name = found.group(2)
        obj = self.objects.get(name) if name else None
        if method == "POST":
            name = body["metadata"]["generateName"] + uuid.uuid4().hex[:5]
            made = json.loads(json.dumps(body))
            made["metadata"].update(
                {"name": name, "namespace": found.group(1), "uid": str(uuid.uuid4()),
                 "generation": 1}
            )
            if self.status_on_create is not None:
                made["status"] = dict(self.status_on_create)
            self._changed("ADDED", name, made)
            return 201, made
        if obj is None:
            return 404, _status(404, "NotFound", f'harnesssessions "{name}" not found')
        if method == "GET":
            return 200, obj
        if method == "PATCH":
            changed = json.loads(json.dumps(obj))
            notes = ((body or {}).get("metadata") or {}).get("annotations") or {}
            changed["metadata"].setdefault("annotations", {}).update(notes)
            self._changed("MODIFIED", name, changed)
            return 200, changed
        if method == "DELETE":
            uid = ((body or {}).get("preconditions") or {}).get("uid")
            if uid and uid != obj["metadata"]["uid"]:
                return 409, _status(409, "Conflict", "Precondition failed: UID in precondition")
            if self.delete_at_once:
                self._changed("DELETED", name, None)
            else:
                marked = json.loads(json.dumps(obj))
                marked["metadata"]["deletionTimestamp"] = "2026-01-01T00:00:00Z"
                self._changed("MODIFIED", name, marked)
            return 200, obj
        return 405, _status(405, "MethodNotAllowed", method)

    def _watch(self, h: BaseHTTPRequestHandler, query: Dict[str, str]) -> None:
        if self.forbid_watch:
            raw = json.dumps(_status(403, "Forbidden", "cannot watch harnesssessions")).encode()
            h.send_response(403)
            h.send_header("Content-Type", "application/json")
            h.send_header("Content-Length", str(len(raw)))
            h.end_headers()
            h.wfile.write(raw)
            return
        name = (query.get("fieldSelector") or "").removeprefix("metadata.name=")
        since = int(query.get("resourceVersion") or 0)
        deadline = time.monotonic() + float(query.get("timeoutSeconds") or 30)
        h.send_response(200)
        h.send_header("Content-Type", "application/json")
        h.send_header("Transfer-Encoding", "chunked")
        h.end_headers()
        sent = 0
        try:
            while True:
                with self.lock:
                    pending = [
                        (kind, obj) for kind, n, obj in self.events
                        if n == name and int(obj["metadata"]["resourceVersion"]) > since
                    ][sent:]
                    if not pending:
                        left = deadline - time.monotonic()
                        if left <= 0:
                            break
                        self.lock.wait(min(left, 0.5))
                        continue
                for kind, obj in pending:
                    line = json.dumps({"type": kind, "object": obj}).encode() + b"\n"
                    h.wfile.write(b"%x\r\n%s\r\n" % (len(line), line))
                    h.wfile.flush()
                    sent += 1
            h.wfile.write(b"0\r\n\r\n")
        except OSError:
            pass


def _status(code: int, reason: str, message: str) -> Dict[str, Any]:
    return {"kind": "Status", "apiVersion": "v1", "status": "Failure", "message": message,
            "reason": reason, "code": code}
