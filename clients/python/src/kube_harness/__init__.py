"""Client of a Kube Harness session: run shell commands in it (whole or streamed), move files in
and out, end its turns. The worker's wire protocol is docs/worker-api.md; `models` types its JSON
(generated from the protocol's schemas)."""

from ._errors import (
    ApiError,
    BadPath,
    ClusterError,
    KubeHarnessError,
    NotAFile,
    NotFound,
    NotReadyError,
    PayloadTooLarge,
    ReadOnly,
    SessionBusy,
    SessionNotFound,
    SessionSuspended,
    TransportError,
    TurnBusy,
    TurnEnded,
    TurnEscalated,
    Unauthorized,
)
from . import models
from ._models import Chunk, ExecResult, FileWritten, TurnSummary
from ._session import AsyncSession, Session

__all__ = [
    "ApiError",
    "AsyncSession",
    "BadPath",
    "Chunk",
    "ClusterError",
    "ExecResult",
    "FileWritten",
    "KubeHarnessError",
    "NotAFile",
    "NotFound",
    "NotReadyError",
    "PayloadTooLarge",
    "ReadOnly",
    "Session",
    "SessionBusy",
    "SessionNotFound",
    "SessionSuspended",
    "TransportError",
    "TurnBusy",
    "TurnEnded",
    "TurnEscalated",
    "TurnSummary",
    "Unauthorized",
    "models",
]
