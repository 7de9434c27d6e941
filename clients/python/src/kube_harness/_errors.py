"""Typed errors. A command that ran and failed is not an error: it is an ExecResult with its exit
code. These are for what the caller must handle differently: a refusal by the worker (ApiError
and its subclasses, one per stable error code), a worker that could not be reached
(TransportError), or a session on a cluster that could not be reached (ClusterError)."""

from typing import Any, Dict, Optional, Type


class KubeHarnessError(Exception):
    """Base of every error this package raises."""


class TransportError(KubeHarnessError):
    """The worker could not be reached, or the connection broke mid-answer. A command's fate is
    then unknown: retry with a step_key to find out (the worker replays a completed step)."""


class ClusterError(KubeHarnessError):
    """A call to the Kubernetes API failed (Session.create, Session.attach, deleting a session):
    no usable kubeconfig, the API server refused or could not be reached, the session's token
    Secret is unusable, or the port-forward did not start. `status` is the API server's HTTP
    status when it answered (403: RBAC), `detail` its message."""

    def __init__(self, message: str, detail: str = "", status: Optional[int] = None):
        super().__init__(message)
        self.detail = detail
        self.status = status


class SessionNotFound(ClusterError):
    """There is no HarnessSession of that name (in that namespace)."""


class SessionSuspended(ClusterError):
    """The session's spec.suspend is true, or its TTL passed (phase Expired): it declines commands
    until its spec changes, so it is neither woken nor waited for (docs/gitops.md)."""


class NotReadyError(ClusterError):
    """The session did not become Ready (with a worker pod) in time."""

    def __init__(self, name: str, timeout: float, phase: Optional[str], ready: Dict[str, Any]):
        self.phase = phase
        self.reason = ready.get("reason")
        self.condition_message = ready.get("message")
        why = f"{self.reason}: {self.condition_message}" if ready else "no Ready condition yet"
        phase_text = phase or "none"
        super().__init__(
            f"HarnessSession {name!r} not Ready after {timeout:g} s (phase {phase_text}; {why})"
        )


class ApiError(KubeHarnessError):
    """The worker refused the request: HTTP status, stable code, message."""

    code: Optional[str] = None

    def __init__(self, status: int, code: str, message: str):
        super().__init__(f"{status} {code}: {message}")
        self.status = status
        self.code = code
        self.message = message


class Unauthorized(ApiError):
    code = "unauthorized"


class SessionBusy(ApiError):
    code = "session-busy"


class TurnBusy(ApiError):
    """Another client's turn is open (Session.open_turn): the session runs one turn at a time."""

    code = "turn-busy"


class TurnEnded(ApiError):
    """This session's turn id is not open any more (ended, or idle past the worker's bound)."""

    code = "turn-ended"


class NotFound(ApiError):
    code = "not-found"


class BadPath(ApiError):
    code = "bad-path"


class NotAFile(ApiError):
    code = "not-a-file"


class ReadOnly(ApiError):
    code = "read-only"


class TurnEscalated(ApiError):
    code = "turn-escalated"


class PayloadTooLarge(ApiError):
    code = "payload-too-large"


_BY_CODE: Dict[str, Type[ApiError]] = {
    cls.code: cls
    for cls in (
        Unauthorized,
        SessionBusy,
        TurnBusy,
        TurnEnded,
        NotFound,
        BadPath,
        NotAFile,
        ReadOnly,
        TurnEscalated,
        PayloadTooLarge,
    )
    if cls.code
}


def api_error(status: int, code: str, message: str) -> ApiError:
    """The most specific error class for a worker's error code."""
    return _BY_CODE.get(code, ApiError)(status, code, message)
