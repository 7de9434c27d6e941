"""What the worker answers, as small immutable records (the JSON's camelCase in snake_case). The
JSON inside them (events, classification, usage) is typed by the generated `models`."""

from dataclasses import dataclass, field
from typing import Any, Dict, List, Optional, cast

from .models import Classification, FileChangeSummary, OutputFile, TraceEvent, TurnUsage


@dataclass(frozen=True)
class Chunk:
    """Output of a streamed command as it was written: type is "stdout" or "stderr"."""

    type: str
    data: str


@dataclass(frozen=True)
class ExecResult:
    """One command's outcome. The last item of Session.stream is one too (type == "result")."""

    stdout: str
    stderr: str
    exit_code: int
    tier: int
    timed_out: bool
    truncated: bool
    run_id: str = ""
    replayed: bool = False
    events: List[TraceEvent] = field(default_factory=list)
    classification: Optional[Classification] = None
    #: Streamed exec only: where all of stdout (stderr) went when it outgrew the result's 1 MiB
    #: cap: {"path": "/artifacts/trace/…", "bytes": n, "sha256": hex, "complete": bool}.
    stdout_file: Optional[OutputFile] = None
    stderr_file: Optional[OutputFile] = None
    #: Why output past the cap was not (wholly) kept.
    output_problems: List[str] = field(default_factory=list)
    type: str = "result"

    @classmethod
    def from_json(cls, body: Dict[str, Any]) -> "ExecResult":
        return cls(
            stdout=body["stdout"],
            stderr=body["stderr"],
            exit_code=body["exitCode"],
            tier=body["tier"],
            timed_out=body["timedOut"],
            truncated=body["truncated"],
            run_id=body.get("runId", ""),
            replayed=body.get("replayed", False),
            events=body.get("events", []),
            classification=body.get("classification"),
            stdout_file=body.get("stdoutFile"),
            stderr_file=body.get("stderrFile"),
            output_problems=body.get("outputProblems", []),
        )


@dataclass(frozen=True)
class FileWritten:
    path: str
    change: str
    bytes: int
    events: List[TraceEvent] = field(default_factory=list)

    @classmethod
    def from_json(cls, body: Dict[str, Any]) -> "FileWritten":
        return cls(body["path"], body["change"], body["bytes"], body.get("events", []))


@dataclass(frozen=True)
class TurnSummary:
    turn_id: str
    commands: int
    usage: TurnUsage
    file_changes: List[FileChangeSummary]
    events: List[TraceEvent]

    @classmethod
    def from_json(cls, body: Dict[str, Any]) -> "TurnSummary":
        return cls(
            turn_id=body["turnId"],
            commands=body["commands"],
            usage=cast(TurnUsage, body.get("usage") or {}),
            file_changes=body.get("fileChanges", []),
            events=body.get("events", []),
        )
