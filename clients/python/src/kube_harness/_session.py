"""Session (sync) and AsyncSession: one session's worker, reached at a URL with its token.

Both speak the worker API (docs/worker-api.md): POST /v1/exec (plain, or streamed as NDJSON
with Accept: application/x-ndjson), PUT/GET /v1/files, PUT/GET /v1/archive, POST /v1/turns/end,
GET /v1/status. Reads are retried on transport failures; an exec only with a step_key (the worker
answers a completed step from its session log), never without. create/attach find or make a
HarnessSession through the Kubernetes API (_cluster.py).
"""

import asyncio
import json
import os
import tarfile
import tempfile
import time
import warnings
from typing import (
    Any,
    AsyncIterator,
    BinaryIO,
    Dict,
    Iterator,
    Optional,
    Type,
    TypeVar,
    Union,
)
from urllib.parse import quote

import httpx

from . import _lifecycle
from ._errors import ClusterError, TransportError, api_error
from ._models import Chunk, ExecResult, FileWritten, TurnSummary

NDJSON = "application/x-ndjson"
Data = Union[bytes, BinaryIO]
S = TypeVar("S", "Session", "AsyncSession")
# Bound on a call other than exec (files, archives, status, end of turn): the wait for the answer.
REQUEST_TIMEOUT = 300.0
# Transport failures of a call that is safe to repeat: attempts, and the waits between them.
RETRY_WAITS = (0.2, 1.0)


def _exec_body(
    script: str,
    timeout: Optional[float],
    run_id: Optional[str],
    step_key: Optional[str],
    turn_id: Optional[str],
) -> Dict[str, Any]:
    body: Dict[str, Any] = {"script": script}
    if turn_id is not None:
        body["turnId"] = turn_id
    if timeout is not None:
        body["timeoutMs"] = max(1, int(timeout * 1000))
    if run_id is not None:
        body["runId"] = run_id
    if step_key is not None:
        body["stepKey"] = step_key
    return body


def _open_body(client: Optional[str]) -> Dict[str, Any]:
    return {} if client is None else {"client": client}


def _end_body(run_id: Optional[str], turn_id: Optional[str]) -> Dict[str, Any]:
    body: Dict[str, Any] = {}
    if run_id is not None:
        body["runId"] = run_id
    if turn_id is not None:
        body["turnId"] = turn_id
    return body


def _summary(answer: Dict[str, Any]) -> Optional[TurnSummary]:
    turn = answer.get("turn")
    return None if turn is None else TurnSummary.from_json(turn)


def _raise_for(status: int, raw: bytes) -> None:
    """Turns a worker error answer into the typed error (never returns for status != 200)."""
    try:
        error = json.loads(raw)["error"]
        raise api_error(status, error["code"], error["message"])
    except (ValueError, KeyError, TypeError):
        raise api_error(status, "", raw.decode("utf-8", "replace")) from None


def _line(raw: bytes) -> Union[Chunk, ExecResult, None]:
    """One NDJSON line of a streamed exec: a Chunk, the final ExecResult, or None (keepalive)."""
    line = json.loads(raw)
    kind = line.get("type")
    if kind in ("stdout", "stderr"):
        return Chunk(kind, line["data"])
    if kind == "result":
        return ExecResult.from_json(line)
    if kind == "error":
        error = line["error"]
        raise api_error(line["status"], error["code"], error["message"])
    return None


def _path_url(route: str, path: str, turn_id: Optional[str] = None) -> str:
    """`route?path=<path>`: the worker reads ?path= as plain percent-encoding (a `+` is a plus),
    so the path is quoted here (a space as %20, a plus as %2B) rather than given to httpx as a
    form parameter, which would write a space as `+`."""
    url = f"{route}?path={quote(path, safe='/')}"
    # An upload belongs to the client's turn, if it opened one (else 409 turn-busy meanwhile).
    return url if turn_id is None else f"{url}&turnId={quote(turn_id, safe='')}"


class Session:
    """A session's worker at `url` (http://127.0.0.1:PORT through a port-forward, or its
    in-cluster address), authenticated with the session's token. Session.create makes a
    HarnessSession and deletes it on close; Session.attach finds one."""

    def __init__(
        self,
        url: str,
        token: str,
        *,
        connect_timeout: float = 10.0,
        request_timeout: float = REQUEST_TIMEOUT,
    ):
        self._client = httpx.Client(
            base_url=url.rstrip("/"),
            headers={"Authorization": f"Bearer {token}"},
            timeout=httpx.Timeout(request_timeout, connect=connect_timeout),
        )
        # An exec's answer comes when its command ends: bounded by the worker's own limits.
        self._long = httpx.Timeout(None, connect=connect_timeout)
        self._reached: Optional[_lifecycle.Reached] = None
        #: The HarnessSession's name and namespace (None for a session given by URL).
        self.name: Optional[str] = None
        self.namespace: Optional[str] = None
        #: The turn open_turn opened, carried by exec, stream and end_turn until it ends.
        self.turn_id: Optional[str] = None

    @classmethod
    def create(
        cls,
        namespace: Optional[str] = None,
        spec: Optional[Dict[str, Any]] = None,
        tier: Optional[str] = None,
        ttl_seconds: Optional[int] = None,
        generate_name: str = "agent-",
        *,
        keep: bool = False,
        labels: Optional[Dict[str, str]] = None,
        timeout: float = 180.0,
        delete_timeout: float = 120.0,
        kubeconfig: Optional[str] = None,
        context: Optional[str] = None,
    ) -> "Session":
        """Creates a HarnessSession (`spec` as in `kubectl explain harnesssession.spec`; `tier`
        its workerTier, `ttl_seconds` its lifetime.ttlSeconds) named `generate_name` plus a
        suffix, waits up to `timeout` seconds for it to be Ready, and reaches its worker.
        Closing the session (or leaving its `with` block, also by an exception) deletes it and
        waits up to `delete_timeout` seconds until it and its children are gone; `keep=True`
        leaves it. The cluster is the ambient kubeconfig's (`kubeconfig`/`context` choose
        another), or the pod's service account inside a pod; namespace None is the context's."""
        found = _lifecycle.reach(
            name=None,
            create=_lifecycle.body(spec, tier, ttl_seconds, generate_name, labels),
            namespace=namespace,
            keep=keep,
            timeout=timeout,
            delete_timeout=delete_timeout,
            kubeconfig=kubeconfig,
            context=context,
        )
        return _adopt(cls, found)

    @classmethod
    def attach(
        cls,
        name: str,
        namespace: Optional[str] = None,
        *,
        timeout: float = 180.0,
        kubeconfig: Optional[str] = None,
        context: Optional[str] = None,
    ) -> "Session":
        """The existing HarnessSession `name`: wakes it if hibernated, waits up to `timeout`
        seconds for Ready (NotReadyError), reads its token Secret, and reaches its worker at its
        in-cluster address from inside a pod, else through a port-forward in this process, which
        close() stops. close() never deletes an attached session. SessionNotFound when there is
        no such session, ClusterError when the API refuses or cannot be reached."""
        found = _lifecycle.reach(
            name=name,
            create=None,
            namespace=namespace,
            keep=True,
            timeout=timeout,
            delete_timeout=0.0,
            kubeconfig=kubeconfig,
            context=context,
        )
        return _adopt(cls, found)

    @classmethod
    def from_kubeconfig(
        cls,
        name: str,
        namespace: Optional[str] = None,
        *,
        kubectl: Optional[str] = None,
        timeout: float = 180.0,
    ) -> "Session":
        """The old name of attach (kubectl is no longer used: `kubectl` is ignored)."""
        _ignored_kubectl(kubectl)
        return cls.attach(name, namespace, timeout=timeout)

    def __enter__(self) -> "Session":
        return self

    def __exit__(self, kind: Any, error: Optional[BaseException], tb: Any) -> None:
        try:
            self.close()
        except ClusterError as e:
            if error is None:
                raise
            # The block's own exception goes on; the failed deletion is noted on it.
            error.add_note(f"kube_harness: closing the session failed too: {e}")

    def close(self) -> None:
        """Closes the connections, stops the port-forward, and deletes the session if create made
        it (not kept), waiting until it is gone. Idempotent."""
        reached, self._reached = self._reached, None
        try:
            self._client.close()
        finally:
            if reached is not None:
                _lifecycle.release(reached)

    def exec(
        self,
        script: str,
        timeout: Optional[float] = None,
        run_id: Optional[str] = None,
        step_key: Optional[str] = None,
    ) -> ExecResult:
        """Runs one command; its outcome, whatever its exit code. timeout is in seconds."""
        body = _exec_body(script, timeout, run_id, step_key, self.turn_id)
        answer = self._json(
            "POST", "/v1/exec", json=body, timeout=self._long, retry=step_key is not None
        )
        return ExecResult.from_json(answer)

    def stream(
        self,
        script: str,
        timeout: Optional[float] = None,
        run_id: Optional[str] = None,
        step_key: Optional[str] = None,
    ) -> Iterator[Union[Chunk, ExecResult]]:
        """Runs one command and yields its output as Chunk(type, data) while it runs, then its
        ExecResult (type == "result"). Closing the iterator early cancels the command."""
        body = _exec_body(script, timeout, run_id, step_key, self.turn_id)
        try:
            with self._client.stream(
                "POST", "/v1/exec", json=body, headers={"Accept": NDJSON}, timeout=self._long
            ) as response:
                if response.status_code != 200:
                    _raise_for(response.status_code, response.read())
                for raw in response.iter_lines():
                    if not raw:
                        continue
                    item = _line(raw.encode() if isinstance(raw, str) else raw)
                    if item is not None:
                        yield item
                        if isinstance(item, ExecResult):
                            return
        except httpx.HTTPError as e:
            raise TransportError(str(e)) from e
        raise TransportError("the stream ended without a result")

    def write_file(self, path: str, data: Data) -> FileWritten:
        """Writes one file of the session (bytes, or a binary file object, streamed)."""
        content = data if isinstance(data, (bytes, bytearray)) else _chunks(data)
        body = self._json(
            "PUT",
            _path_url("/v1/files", path, self.turn_id),
            content=content,
            headers={"Content-Type": "application/octet-stream"},
        )
        return FileWritten.from_json(body)

    def read_file(self, path: str) -> bytes:
        """Reads one file of the session."""
        return self._request("GET", _path_url("/v1/files", path), retry=True).content

    def upload_dir(self, local_dir: Union[str, "os.PathLike[str]"], path: str) -> Dict[str, Any]:
        """Uploads a local directory into the session's directory `path` (created if missing) as
        one tar (PUT /v1/archive): symlinks go as symlinks. Returns the worker's answer
        (entries, bytes, events, and "warnings" naming entries whose modes it did not keep,
        such as setuid bits)."""
        with tempfile.TemporaryFile() as spool:
            _pack(local_dir, spool)
            spool.seek(0)
            return self._json(
                "PUT",
                _path_url("/v1/archive", path, self.turn_id),
                content=_chunks(spool),
                headers={"Content-Type": "application/x-tar"},
            )

    def download_dir(self, path: str, local_dir: Union[str, "os.PathLike[str]"]) -> None:
        """Downloads the session's directory `path` into `local_dir` (created if missing). The tar
        is unpacked with the "data" filter: no absolute paths, no `..`, no links out of it."""
        with tempfile.TemporaryFile() as spool:
            for wait in (*RETRY_WAITS, None):
                spool.seek(0)
                spool.truncate()
                try:
                    with self._client.stream("GET", _path_url("/v1/archive", path)) as r:
                        if r.status_code != 200:
                            _raise_for(r.status_code, r.read())
                        for block in r.iter_bytes():
                            spool.write(block)
                    break
                except httpx.HTTPError as e:
                    if wait is None:
                        raise TransportError(str(e)) from e
                    time.sleep(wait)
            spool.seek(0)
            _unpack(spool, local_dir)

    def open_turn(self, client: Optional[str] = None) -> str:
        """Opens a turn of this client's own and returns its id (also `self.turn_id`, which exec,
        stream and end_turn then carry): until it ends, other clients' commands get `TurnBusy`
        (409 `turn-busy`, naming `client`), and so does this one's open_turn while another
        client's turn is open. The worker ends it after its idle bound (`TurnEnded` then)."""
        answer = self._json("POST", "/v1/turns", json=_open_body(client))
        self.turn_id = answer["turnId"]
        return self.turn_id

    def end_turn(self, run_id: Optional[str] = None) -> Optional[TurnSummary]:
        """Ends the open turn (a Tier-1 sandbox merges back and is released); None when no turn
        was open. After open_turn, ends that turn (and forgets its id)."""
        turn = self._json("POST", "/v1/turns/end", json=_end_body(run_id, self.turn_id))
        self.turn_id = None
        return _summary(turn)

    def status(self) -> Dict[str, Any]:
        return self._json("GET", "/v1/status", retry=True)

    def _json(self, method: str, url: str, **kwargs: Any) -> Dict[str, Any]:
        return self._request(method, url, **kwargs).json()

    def _request(
        self, method: str, url: str, *, retry: bool = False, **kwargs: Any
    ) -> httpx.Response:
        """One call; with `retry` (safe to repeat), again after RETRY_WAITS on transport
        failures. An error answer raises its typed error, never retried."""
        for wait in (*RETRY_WAITS, None) if retry else (None,):
            try:
                response = self._client.request(method, url, **kwargs)
                break
            except httpx.HTTPError as e:
                if wait is None:
                    raise TransportError(str(e)) from e
                time.sleep(wait)
        if response.status_code != 200:
            _raise_for(response.status_code, response.content)
        return response


class AsyncSession:
    """Session's surface for asyncio: the same methods, awaited; stream is an async iterator.
    create and attach run their Kubernetes API calls in a worker thread."""

    def __init__(
        self,
        url: str,
        token: str,
        *,
        connect_timeout: float = 10.0,
        request_timeout: float = REQUEST_TIMEOUT,
    ):
        self._client = httpx.AsyncClient(
            base_url=url.rstrip("/"),
            headers={"Authorization": f"Bearer {token}"},
            timeout=httpx.Timeout(request_timeout, connect=connect_timeout),
        )
        # An exec's answer comes when its command ends: bounded by the worker's own limits.
        self._long = httpx.Timeout(None, connect=connect_timeout)
        self._reached: Optional[_lifecycle.Reached] = None
        self.name: Optional[str] = None
        self.namespace: Optional[str] = None
        self.turn_id: Optional[str] = None

    @classmethod
    async def create(
        cls,
        namespace: Optional[str] = None,
        spec: Optional[Dict[str, Any]] = None,
        tier: Optional[str] = None,
        ttl_seconds: Optional[int] = None,
        generate_name: str = "agent-",
        *,
        keep: bool = False,
        labels: Optional[Dict[str, str]] = None,
        timeout: float = 180.0,
        delete_timeout: float = 120.0,
        kubeconfig: Optional[str] = None,
        context: Optional[str] = None,
    ) -> "AsyncSession":
        """Session.create, awaited: `async with await AsyncSession.create(...) as s:`."""
        body = _lifecycle.body(spec, tier, ttl_seconds, generate_name, labels)
        return await _reach_async(
            cls,
            name=None,
            create=body,
            namespace=namespace,
            keep=keep,
            timeout=timeout,
            delete_timeout=delete_timeout,
            kubeconfig=kubeconfig,
            context=context,
        )

    @classmethod
    async def attach(
        cls,
        name: str,
        namespace: Optional[str] = None,
        *,
        timeout: float = 180.0,
        kubeconfig: Optional[str] = None,
        context: Optional[str] = None,
    ) -> "AsyncSession":
        """Session.attach, awaited."""
        return await _reach_async(
            cls,
            name=name,
            create=None,
            namespace=namespace,
            keep=True,
            timeout=timeout,
            delete_timeout=0.0,
            kubeconfig=kubeconfig,
            context=context,
        )

    @classmethod
    async def from_kubeconfig(
        cls,
        name: str,
        namespace: Optional[str] = None,
        *,
        kubectl: Optional[str] = None,
        timeout: float = 180.0,
    ) -> "AsyncSession":
        """The old name of attach (`kubectl` is ignored)."""
        _ignored_kubectl(kubectl)
        return await cls.attach(name, namespace, timeout=timeout)

    async def __aenter__(self) -> "AsyncSession":
        return self

    async def __aexit__(self, kind: Any, error: Optional[BaseException], tb: Any) -> None:
        try:
            await self.close()
        except ClusterError as e:
            if error is None:
                raise
            error.add_note(f"kube_harness: closing the session failed too: {e}")

    async def close(self) -> None:
        """Session.close, awaited (the deletion and its wait run in a worker thread)."""
        reached, self._reached = self._reached, None
        try:
            await self._client.aclose()
        finally:
            if reached is not None:
                await asyncio.to_thread(_lifecycle.release, reached)

    async def exec(
        self,
        script: str,
        timeout: Optional[float] = None,
        run_id: Optional[str] = None,
        step_key: Optional[str] = None,
    ) -> ExecResult:
        body = _exec_body(script, timeout, run_id, step_key, self.turn_id)
        answer = await self._json(
            "POST", "/v1/exec", json=body, timeout=self._long, retry=step_key is not None
        )
        return ExecResult.from_json(answer)

    async def stream(
        self,
        script: str,
        timeout: Optional[float] = None,
        run_id: Optional[str] = None,
        step_key: Optional[str] = None,
    ) -> AsyncIterator[Union[Chunk, ExecResult]]:
        body = _exec_body(script, timeout, run_id, step_key, self.turn_id)
        try:
            async with self._client.stream(
                "POST", "/v1/exec", json=body, headers={"Accept": NDJSON}, timeout=self._long
            ) as response:
                if response.status_code != 200:
                    _raise_for(response.status_code, await response.aread())
                async for raw in response.aiter_lines():
                    if not raw:
                        continue
                    item = _line(raw.encode())
                    if item is not None:
                        yield item
                        if isinstance(item, ExecResult):
                            return
        except httpx.HTTPError as e:
            raise TransportError(str(e)) from e
        raise TransportError("the stream ended without a result")

    async def write_file(self, path: str, data: bytes) -> FileWritten:
        body = await self._json(
            "PUT",
            _path_url("/v1/files", path, self.turn_id),
            content=data,
            headers={"Content-Type": "application/octet-stream"},
        )
        return FileWritten.from_json(body)

    async def read_file(self, path: str) -> bytes:
        return (await self._request("GET", _path_url("/v1/files", path), retry=True)).content

    async def upload_dir(
        self, local_dir: Union[str, "os.PathLike[str]"], path: str
    ) -> Dict[str, Any]:
        """Session.upload_dir, awaited (the tar is packed in a worker thread)."""
        with tempfile.TemporaryFile() as spool:
            await asyncio.to_thread(_pack, local_dir, spool)
            spool.seek(0)
            return await self._json(
                "PUT",
                _path_url("/v1/archive", path, self.turn_id),
                content=_achunks(spool),
                headers={"Content-Type": "application/x-tar"},
            )

    async def download_dir(self, path: str, local_dir: Union[str, "os.PathLike[str]"]) -> None:
        """Session.download_dir, awaited (unpacked in a worker thread)."""
        with tempfile.TemporaryFile() as spool:
            for wait in (*RETRY_WAITS, None):
                spool.seek(0)
                spool.truncate()
                try:
                    async with self._client.stream("GET", _path_url("/v1/archive", path)) as r:
                        if r.status_code != 200:
                            _raise_for(r.status_code, await r.aread())
                        async for block in r.aiter_bytes():
                            spool.write(block)
                    break
                except httpx.HTTPError as e:
                    if wait is None:
                        raise TransportError(str(e)) from e
                    await asyncio.sleep(wait)
            spool.seek(0)
            await asyncio.to_thread(_unpack, spool, local_dir)

    async def open_turn(self, client: Optional[str] = None) -> str:
        """Session.open_turn, awaited."""
        answer = await self._json("POST", "/v1/turns", json=_open_body(client))
        self.turn_id = answer["turnId"]
        return self.turn_id

    async def end_turn(self, run_id: Optional[str] = None) -> Optional[TurnSummary]:
        turn = await self._json("POST", "/v1/turns/end", json=_end_body(run_id, self.turn_id))
        self.turn_id = None
        return _summary(turn)

    async def status(self) -> Dict[str, Any]:
        return await self._json("GET", "/v1/status", retry=True)

    async def _json(self, method: str, url: str, **kwargs: Any) -> Dict[str, Any]:
        return (await self._request(method, url, **kwargs)).json()

    async def _request(
        self, method: str, url: str, *, retry: bool = False, **kwargs: Any
    ) -> httpx.Response:
        """Session._request, awaited."""
        for wait in (*RETRY_WAITS, None) if retry else (None,):
            try:
                response = await self._client.request(method, url, **kwargs)
                break
            except httpx.HTTPError as e:
                if wait is None:
                    raise TransportError(str(e)) from e
                await asyncio.sleep(wait)
        if response.status_code != 200:
            _raise_for(response.status_code, response.content)
        return response


def _adopt(cls: Type[S], reached: _lifecycle.Reached) -> S:
    """A session of class `cls` at the reached worker, owning what closing it lets go (let go now
    when making the client fails)."""
    try:
        session = cls(reached.url, reached.token)
    except BaseException:
        _lifecycle.release(reached)
        raise
    session._reached = reached
    session.name, session.namespace = reached.name, reached.namespace
    return session


async def _reach_async(cls: Type[S], **how: Any) -> S:
    job = asyncio.ensure_future(asyncio.to_thread(lambda: _lifecycle.reach(**how)))
    try:
        reached = await asyncio.shield(job)
    except asyncio.CancelledError:
        # The thread runs on: let go of what it reaches (stop the forward, delete a made session).
        job.add_done_callback(_release_abandoned)
        raise
    return _adopt(cls, reached)


def _release_abandoned(job: "asyncio.Future[_lifecycle.Reached]") -> None:
    if not job.cancelled() and job.exception() is None:
        _lifecycle.release_later(job.result())


def _ignored_kubectl(kubectl: Optional[str]) -> None:
    if kubectl is not None:
        warnings.warn(
            "kube_harness no longer runs kubectl (it uses the Kubernetes API): `kubectl` is "
            "ignored; use Session.attach",
            DeprecationWarning,
            stacklevel=3,
        )


def _pack(local_dir: Union[str, "os.PathLike[str]"], out: BinaryIO) -> None:
    """A tar of the directory's contents (names relative to it; symlinks not followed)."""
    root = os.fspath(local_dir)
    if not os.path.isdir(root):
        raise NotADirectoryError(root)
    with tarfile.open(fileobj=out, mode="w", format=tarfile.GNU_FORMAT) as tar:
        for name in sorted(os.listdir(root)):
            tar.add(os.path.join(root, name), arcname=name, recursive=True)


def _unpack(spool: BinaryIO, local_dir: Union[str, "os.PathLike[str]"]) -> None:
    os.makedirs(local_dir, exist_ok=True)
    with tarfile.open(fileobj=spool, mode="r:") as tar:
        tar.extractall(local_dir, filter="data")


def _chunks(file: BinaryIO, size: int = 512 * 1024) -> Iterator[bytes]:
    """A file object's bytes in chunks, for a streamed upload."""
    while True:
        block = file.read(size)
        if not block:
            return
        yield block


async def _achunks(file: BinaryIO, size: int = 512 * 1024) -> AsyncIterator[bytes]:
    """_chunks for an async upload (reads of a local spool file: short, in the loop)."""
    for block in _chunks(file, size):
        yield block
