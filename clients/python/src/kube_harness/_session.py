"""Session (sync) and AsyncSession: one session's worker, reached at a URL with its token.

Both speak the worker API (docs/worker-api.md): POST /v1/exec (plain, or streamed as NDJSON
with Accept: application/x-ndjson), PUT/GET /v1/files, POST /v1/turns/end, GET /v1/status.
Nothing is retried here: an exec without a step_key is not idempotent; with one, retrying is
safe (the worker answers a completed step from its session log). from_kubeconfig finds a
session on a cluster with kubectl (_kube.py).
"""

import asyncio
import json
import os
import tarfile
import tempfile
from typing import (
    Any,
    AsyncIterator,
    BinaryIO,
    Dict,
    Iterator,
    Optional,
    Tuple,
    Type,
    TypeVar,
    Union,
)
from urllib.parse import quote

import httpx

from . import _kube
from ._errors import TransportError, api_error
from ._models import Chunk, ExecResult, FileWritten, TurnSummary

NDJSON = "application/x-ndjson"
Data = Union[bytes, BinaryIO]
S = TypeVar("S", "Session", "AsyncSession")


def _exec_body(
    script: str,
    timeout: Optional[float],
    run_id: Optional[str],
    step_key: Optional[str],
) -> Dict[str, Any]:
    body: Dict[str, Any] = {"script": script}
    if timeout is not None:
        body["timeoutMs"] = max(1, int(timeout * 1000))
    if run_id is not None:
        body["runId"] = run_id
    if step_key is not None:
        body["stepKey"] = step_key
    return body


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


def _path_url(route: str, path: str) -> str:
    """`route?path=<path>`: the worker reads ?path= as plain percent-encoding (a `+` is a plus),
    so the path is quoted here (a space as %20, a plus as %2B) rather than given to httpx as a
    form parameter, which would write a space as `+`."""
    return f"{route}?path={quote(path, safe='/')}"


class Session:
    """A session's worker at `url` (http://127.0.0.1:PORT through a port-forward, or its
    in-cluster address), authenticated with the session's token."""

    def __init__(self, url: str, token: str, *, connect_timeout: float = 10.0):
        self._client = httpx.Client(
            base_url=url.rstrip("/"),
            headers={"Authorization": f"Bearer {token}"},
            # No overall limit: a command may run up to the worker's own.
            timeout=httpx.Timeout(None, connect=connect_timeout),
        )
        self._forward: Optional[_kube.PortForward] = None

    @classmethod
    def from_kubeconfig(
        cls,
        name: str,
        namespace: Optional[str] = None,
        *,
        kubectl: Optional[str] = None,
        timeout: float = 180.0,
    ) -> "Session":
        """The HarnessSession `name` on the cluster of the ambient kubeconfig, through `kubectl`
        (the argument, else $KH_KUBECTL, else `kubectl` on PATH; namespace None: kubectl's
        current one). Wakes it if hibernated and waits up to `timeout` seconds for Ready
        (NotReadyError), reads its token Secret, and reaches its worker at its in-cluster address
        from inside a pod, else through `kubectl port-forward`, which close() stops.
        SessionNotFound when there is no such session, ClusterError when kubectl fails."""
        return _attach(cls, *_kube.connect(name, namespace, kubectl, timeout))

    def __enter__(self) -> "Session":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def close(self) -> None:
        """Closes the connections, and stops the port-forward of from_kubeconfig if any."""
        try:
            self._client.close()
        finally:
            if self._forward is not None:
                self._forward.close()

    def exec(
        self,
        script: str,
        timeout: Optional[float] = None,
        run_id: Optional[str] = None,
        step_key: Optional[str] = None,
    ) -> ExecResult:
        """Runs one command; its outcome, whatever its exit code. timeout is in seconds."""
        body = _exec_body(script, timeout, run_id, step_key)
        return ExecResult.from_json(self._json("POST", "/v1/exec", json=body))

    def stream(
        self,
        script: str,
        timeout: Optional[float] = None,
        run_id: Optional[str] = None,
        step_key: Optional[str] = None,
    ) -> Iterator[Union[Chunk, ExecResult]]:
        """Runs one command and yields its output as Chunk(type, data) while it runs, then its
        ExecResult (type == "result"). Closing the iterator early cancels the command."""
        body = _exec_body(script, timeout, run_id, step_key)
        try:
            with self._client.stream(
                "POST", "/v1/exec", json=body, headers={"Accept": NDJSON}
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
            _path_url("/v1/files", path),
            content=content,
            headers={"Content-Type": "application/octet-stream"},
        )
        return FileWritten.from_json(body)

    def read_file(self, path: str) -> bytes:
        """Reads one file of the session."""
        try:
            response = self._client.get(_path_url("/v1/files", path))
        except httpx.HTTPError as e:
            raise TransportError(str(e)) from e
        if response.status_code != 200:
            _raise_for(response.status_code, response.content)
        return response.content

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
                _path_url("/v1/archive", path),
                content=_chunks(spool),
                headers={"Content-Type": "application/x-tar"},
            )

    def download_dir(self, path: str, local_dir: Union[str, "os.PathLike[str]"]) -> None:
        """Downloads the session's directory `path` into `local_dir` (created if missing). The tar
        is unpacked with the "data" filter: no absolute paths, no `..`, no links out of it."""
        with tempfile.TemporaryFile() as spool:
            try:
                with self._client.stream("GET", _path_url("/v1/archive", path)) as r:
                    if r.status_code != 200:
                        _raise_for(r.status_code, r.read())
                    for block in r.iter_bytes():
                        spool.write(block)
            except httpx.HTTPError as e:
                raise TransportError(str(e)) from e
            spool.seek(0)
            _unpack(spool, local_dir)

    def end_turn(self, run_id: Optional[str] = None) -> Optional[TurnSummary]:
        """Ends the open turn (a Tier-1 sandbox merges back and is released); None when no turn
        was open."""
        body = {} if run_id is None else {"runId": run_id}
        turn = self._json("POST", "/v1/turns/end", json=body).get("turn")
        return None if turn is None else TurnSummary.from_json(turn)

    def status(self) -> Dict[str, Any]:
        return self._json("GET", "/v1/status")

    def _json(self, method: str, url: str, **kwargs: Any) -> Dict[str, Any]:
        try:
            response = self._client.request(method, url, **kwargs)
        except httpx.HTTPError as e:
            raise TransportError(str(e)) from e
        if response.status_code != 200:
            _raise_for(response.status_code, response.content)
        return response.json()


class AsyncSession:
    """Session's surface for asyncio: the same methods, awaited; stream is an async iterator."""

    def __init__(self, url: str, token: str, *, connect_timeout: float = 10.0):
        self._client = httpx.AsyncClient(
            base_url=url.rstrip("/"),
            headers={"Authorization": f"Bearer {token}"},
            timeout=httpx.Timeout(None, connect=connect_timeout),
        )
        self._forward: Optional[_kube.PortForward] = None

    @classmethod
    async def from_kubeconfig(
        cls,
        name: str,
        namespace: Optional[str] = None,
        *,
        kubectl: Optional[str] = None,
        timeout: float = 180.0,
    ) -> "AsyncSession":
        """Session.from_kubeconfig, awaited (kubectl's calls run in a worker thread)."""
        job = asyncio.ensure_future(
            asyncio.to_thread(_kube.connect, name, namespace, kubectl, timeout)
        )
        try:
            found = await asyncio.shield(job)
        except asyncio.CancelledError:
            # The thread runs on: stop the port-forward it may still open.
            job.add_done_callback(_close_abandoned)
            raise
        return _attach(cls, *found)

    async def __aenter__(self) -> "AsyncSession":
        return self

    async def __aexit__(self, *exc: Any) -> None:
        await self.close()

    async def close(self) -> None:
        """Closes the connections, and stops the port-forward of from_kubeconfig if any."""
        try:
            await self._client.aclose()
        finally:
            if self._forward is not None:
                self._forward.close()

    async def exec(
        self,
        script: str,
        timeout: Optional[float] = None,
        run_id: Optional[str] = None,
        step_key: Optional[str] = None,
    ) -> ExecResult:
        body = _exec_body(script, timeout, run_id, step_key)
        return ExecResult.from_json(await self._json("POST", "/v1/exec", json=body))

    async def stream(
        self,
        script: str,
        timeout: Optional[float] = None,
        run_id: Optional[str] = None,
        step_key: Optional[str] = None,
    ) -> AsyncIterator[Union[Chunk, ExecResult]]:
        body = _exec_body(script, timeout, run_id, step_key)
        try:
            async with self._client.stream(
                "POST", "/v1/exec", json=body, headers={"Accept": NDJSON}
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
            _path_url("/v1/files", path),
            content=data,
            headers={"Content-Type": "application/octet-stream"},
        )
        return FileWritten.from_json(body)

    async def read_file(self, path: str) -> bytes:
        try:
            response = await self._client.get(_path_url("/v1/files", path))
        except httpx.HTTPError as e:
            raise TransportError(str(e)) from e
        if response.status_code != 200:
            _raise_for(response.status_code, response.content)
        return response.content

    async def end_turn(self, run_id: Optional[str] = None) -> Optional[TurnSummary]:
        body = {} if run_id is None else {"runId": run_id}
        turn = (await self._json("POST", "/v1/turns/end", json=body)).get("turn")
        return None if turn is None else TurnSummary.from_json(turn)

    async def status(self) -> Dict[str, Any]:
        return await self._json("GET", "/v1/status")

    async def _json(self, method: str, url: str, **kwargs: Any) -> Dict[str, Any]:
        try:
            response = await self._client.request(method, url, **kwargs)
        except httpx.HTTPError as e:
            raise TransportError(str(e)) from e
        if response.status_code != 200:
            _raise_for(response.status_code, response.content)
        return response.json()


def _attach(
    cls: Type[S], url: str, token: str, forward: Optional[_kube.PortForward]
) -> S:
    """A session of class `cls` at `url` that owns `forward` (closed with it, or now on error)."""
    try:
        session = cls(url, token)
    except BaseException:
        if forward is not None:
            forward.close()
        raise
    session._forward = forward
    return session


def _close_abandoned(job: "asyncio.Future[Tuple[str, str, Optional[_kube.PortForward]]]") -> None:
    if not job.cancelled() and job.exception() is None and job.result()[2] is not None:
        job.result()[2].close()


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
