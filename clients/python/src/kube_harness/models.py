"""The JSON of the worker API and of trace events (lh.trace.v2), as TypedDicts: what the worker
sends, keys as on the wire (camelCase). Generated from protocol/schema/*.json by
protocol/tests/suite/codegen (`KH_REGENERATE=1 cargo test -p kube-harness-protocol --test all
generated::`); do not edit."""

from typing import Any, Dict, List, Literal, NotRequired, Optional, TypedDict, Union



class AdoptRequest(TypedDict):
    """`POST /v1/adopt`: binds a pooled worker (started with `--adopt-token-file`, before any session existed) to one session, once. The bearer is the pool's token, never a session's. Everything session-specific travels here; the worker then runs exactly as one started with these arguments and files (docs/operator.md "Warm pool")."""

    #: `kube-harness worker` arguments for the session (`WorkerArgs::to_args`); `--listen`, `--workspace-root` and `--adopt-token-file` are ignored (the pooled worker keeps its socket and layout, and cannot be adopted twice), and so are the paths of `--token-file` and `--session-log-token-file`: the tokens below go where the pooled worker's own arguments say (`--session-log-token-file` only says whether a session-log token comes).
    args: List[str]
    #: The session's bearer token (written to the pooled worker's `--token-file`): visible ASCII, one piece.
    token: str
    #: The session's session-log token (written beside it as `session-log-token`, or to the pooled worker's own `--session-log-token-file`): visible ASCII, one piece.
    sessionLogToken: NotRequired[Optional[str]]
    #: The session's skills, written under `/.agents` before the first command.
    skills: NotRequired[List["SkillFile"]]


class AdoptResponse(TypedDict):
    """`POST /v1/adopt`'s answer: the session now served and [`adoption_settings`] of the request."""

    session: str
    settings: str


class ArchiveWritten(TypedDict):
    """The answer to `PUT /v1/archive?path=…`: how many entries were placed, and their events."""

    bytes: int
    #: Entries created or changed (directories that were there already are not counted).
    entries: int
    #: The `harness.file.*` events (bounded as a command's are; `harness.file.truncated` counts the rest).
    events: List["TraceEvent"]
    path: str
    logPending: NotRequired[int]
    #: Entries whose mode was not set as the archive has it, one line each (the setuid, setgid and sticky bits are never set; a directory stays open to its owner; a directory that was there keeps its mode): at most 100, then a line counting the rest. Absent when none.
    warnings: NotRequired[List[str]]


class Classification(TypedDict):
    """The classifier's answer for one script (an explained exec's `classification`)."""

    decision: "Decision"
    matrixVersion: str
    reasons: List["Reason"]


class CommandCompleted(TypedDict):
    """`harness.runtime.command.completed`: the result. Output is inline (`stdout`, `stderr`, cut and flagged `…Truncated` when it could not be stored) or a reference to a file under `/artifacts/trace/` (`stdoutRef`, `stderrRef`)."""

    command: str
    cwd: str
    durationMs: int
    exitCode: int
    tier: int
    timedOut: bool
    truncated: bool
    fileTrackingSkipped: NotRequired[Optional["TrackingSkipped"]]
    stderr: NotRequired[Optional[str]]
    stderrRef: NotRequired[Optional["ContentRef"]]
    #: The schema allows only `true`: absent when false.
    stderrTruncated: NotRequired[Literal[True]]
    stdout: NotRequired[Optional[str]]
    stdoutRef: NotRequired[Optional["ContentRef"]]
    #: The schema allows only `true`: absent when false.
    stdoutTruncated: NotRequired[Literal[True]]
    #: The caller's step key (see `command.started`).
    stepKey: NotRequired[Optional[str]]


class CommandCounts(TypedDict):
    tier0: int
    tier1: int


class CommandStarted(TypedDict):
    """`harness.runtime.command.started`: emitted before the command runs (and, with a session log, made durable first)."""

    command: str
    cwd: str
    tier: int
    #: The caller's step key (worker exec with runId and stepKey): replay finds a step's started and completed events by it.
    stepKey: NotRequired[Optional[str]]


class CommitRequest(TypedDict):
    """`POST /v1/persistent/commit`: write a kept turn of a dir to its source."""

    dir: str
    turnId: str


class ContentRef(TypedDict):
    """Output stored under `/artifacts/trace/`; replay returns it only if it still matches."""

    bytes: int
    contentRef: str
    #: SHA-256 of the payload (lowercase hex). Replay returns the file only if it still matches; refs recorded before it was added have none.
    sha256: NotRequired[Optional[str]]


class DisposeFailed(TypedDict):
    """`harness.runtime.dispose.failed`: releasing a tier (or part of its merge-back) failed."""

    error: str
    tier: int


class EmulationGap(TypedDict):
    """An emulation gap found in a finished Tier-0 run: a command or an option Tier-0 lacks."""

    command: str
    kind: "GapKind"
    signal: "GapSignal"
    option: NotRequired[Optional[str]]


class EndTurnRequest(TypedDict):
    """`POST /v1/turns/end` (body optional)."""

    #: The run the turn's closing events (usage, dispose failures) go to; default: the session.
    runId: NotRequired[Optional[str]]
    #: The turn to end, as `POST /v1/turns` gave it: a turn opened that way is ended only by a request naming it (409 `turn-busy` otherwise). Naming a turn that already ended answers `turn: null`, so ending twice is safe.
    turnId: NotRequired[Optional[str]]


class EndTurnResponse(TypedDict):
    """The answer to `POST /v1/turns/end`. `turn` is `None` when no turn was open."""

    turn: NotRequired[Optional["TurnSummary"]]


class ErrorBody(TypedDict):
    """Every error body of every service: `{"error": {"code", "message"}}`. The worker's `Refusal`, the kit's [`ApiError`] and the clients that read them all use this one type."""

    error: "ErrorDetail"


class ErrorDetail(TypedDict):
    """The inside of an [`ErrorBody`]."""

    code: str
    message: str


class ExecRequest(TypedDict):
    """`POST /v1/exec`."""

    script: str
    #: Also return the classifier's decision and reasons (costs one more classification).
    explain: NotRequired[bool]
    #: The session log run the command's events go to; defaults to the worker's session name.
    runId: NotRequired[Optional[str]]
    #: With `runId` (or the default run): the step's identity for replay.
    stepKey: NotRequired[Optional[str]]
    #: Wall-clock limit of this command; at most the worker's `--max-timeout`.
    timeoutMs: NotRequired[Optional[int]]
    #: The turn this command belongs to, as `POST /v1/turns` gave it: while a turn opened that way is open, a command without its id is refused with 409 `turn-busy` (one client's turn at a time); a command naming a turn that ended gets 409 `turn-ended`. Without it, and with no such turn open, the command runs in the session's shared turn (opened if none is).
    turnId: NotRequired[Optional[str]]


class ExecResponse(TypedDict):
    """The answer to `POST /v1/exec`: the command's outcome and the trace events it emitted."""

    #: Events of this command (empty for a replayed step: they are in the session log already).
    events: List["TraceEvent"]
    exitCode: int
    #: The result was read from the session log; nothing ran.
    replayed: bool
    runId: str
    stderr: str
    stdout: str
    tier: int
    timedOut: bool
    truncated: bool
    #: With `explain`: the classifier's decision and reasons.
    classification: NotRequired[Optional["Classification"]]
    #: Events of this worker not yet in the session log (appended before the next command runs).
    logPending: NotRequired[int]
    #: Streamed exec only: why output past the cap was not (wholly) kept, one line per stream.
    outputProblems: NotRequired[List[str]]
    #: A replayed step whose recorded output could not be returned (its `/artifacts/trace/…` payload is gone, or was changed after it was recorded): why, one line per stream. The stream is empty and `truncated` is set.
    replayProblems: NotRequired[List[str]]
    #: Streamed exec only: the same for stderr.
    stderrFile: NotRequired[Optional["OutputFile"]]
    #: Streamed exec only: the file holding all of stdout, when it outgrew the result's cap.
    stdoutFile: NotRequired[Optional["OutputFile"]]


class FileChangeSummary(TypedDict):
    #: `created`, `modified` or `deleted`.
    change: str
    path: str


class FileEvent(TypedDict):
    """`harness.file.created`, `.modified` or `.deleted` (the variant says which)."""

    kind: "FileKind"
    mode: int
    #: The harness path (`/session/…`, `/artifacts/…`, `/persistent/…`).
    path: str
    size: int
    source: "FileSource"
    tier: int


class FileTruncated(TypedDict):
    """`harness.file.truncated`: stands for the file events of one command (or one merge-back) past the emitter's limits (a count, and a budget of path bytes); emitted after the last listed one. `byteLimit` and `listedBytes` are there when the byte budget, not the count, stopped the listing."""

    limit: int
    listed: int
    omitted: "OmittedFiles"
    source: "FileSource"
    tier: int
    byteLimit: NotRequired[Optional[int]]
    listedBytes: NotRequired[Optional[int]]


class FileWritten(TypedDict):
    """The answer to `PUT /v1/files?path=…`: what was written and the file event it made."""

    bytes: int
    #: `created` or `modified`.
    change: str
    #: The upload's `harness.file.*` event (also appended to the session log).
    events: List["TraceEvent"]
    path: str
    #: Events of this worker not yet in the session log.
    logPending: NotRequired[int]


class Health(TypedDict):
    """`GET /healthz` and `GET /readyz`."""

    status: str
    reason: NotRequired[Optional[str]]


class LocalUsage(TypedDict):
    """The local host's Tier-1 usage of one turn."""

    bytesHandedOver: int
    bytesReturned: int
    commands: int
    durationMs: int
    provisionMs: int


class LogPage(TypedDict):
    """The answer to `GET /v1/log?run=R&after=N&limit=L`: one page of a run of the session's log, as the session log keeps it (`kube-harness trace` and `doctor` read sessions through it)."""

    events: List["LoggedEvent"]
    #: The run as asked (`run`, or the session's default run), without the worker's scope.
    run: str
    #: Pass as `after` for the next page; absent at the end.
    next: NotRequired[Optional[int]]


class LoggedEvent(TypedDict):
    """One event of the session log: a trace event's `type` and `data` with the log's own position and commit time (the log keeps no more of the trace line: not its turn or its time)."""

    data: Any
    #: When the log committed it, milliseconds since the Unix epoch.
    recordedAtMs: int
    #: Position in the run, from 1, gapless.
    sequence: int
    type: str


class OmittedFiles(TypedDict):
    """How many file events of each change were left out."""

    created: int
    deleted: int
    modified: int
    total: int


class OpenTurnRequest(TypedDict):
    """`POST /v1/turns` (body optional): opens a turn for one client. The session runs one turn at a time: while it is open, commands and end-turn requests that do not carry its id are refused with 409 `turn-busy`, and opening another is too."""

    #: Who opens it (a host name, a program, an agent's name: at most 128 bytes, no control characters), named in the `turn-busy` answers other clients get.
    client: NotRequired[Optional[str]]


class OpenTurnResponse(TypedDict):
    """The answer to `POST /v1/turns`."""

    #: A turn with no command for this long is ended by the worker (as by `POST /v1/turns/end`, its changes merged back), so an abandoned turn does not hold the session.
    idleTimeoutMs: int
    #: What the turn's commands and its end carry as `turnId`.
    turnId: str


class OutputFile(TypedDict):
    """A stream's whole output, kept under `/artifacts/trace/` when it outgrew the result's cap."""

    #: Bytes in the file.
    bytes: int
    #: The file holds all the stream printed; false when it stopped at `--max-file-bytes` or a write failed.
    complete: bool
    #: Harness path of the file (`/artifacts/trace/<id>.stdout.txt`).
    path: str
    #: SHA-256 of the file's bytes, hex.
    sha256: str


class PersistentCommit(TypedDict):
    """One Persistent Dir at the end of a turn, or answering `POST /v1/persistent/commit`."""

    #: The dir's name (`/persistent/<dir>`).
    dir: str
    outcome: "CommitOutcome"
    #: The turn whose end state this is.
    turnId: str
    #: Why, for `conflict` and `failed`.
    message: NotRequired[Optional[str]]


class PodUsage(TypedDict):
    """A Tier-1 pod's usage of one turn."""

    bytesHandedOver: int
    bytesReturned: int
    commands: int
    durationMs: int
    pod: str
    #: From the sandbox's opening to its release.
    podMs: int
    #: Pod start and workspace handoff.
    provisionMs: int
    missReason: NotRequired[Optional[str]]
    #: As in the escalation's `sandbox`.
    source: NotRequired[Optional["SandboxSource"]]


class SandboxOrigin(TypedDict):
    """Where a higher tier's sandbox came from, as the tier reports it when it opens."""

    #: Why an ordinary pod serves a pooled tier (`stock_empty`, `workspace_too_large`, `slot_unavailable`, `unreported`), as the tier API reports it.
    missReason: NotRequired[Optional[str]]
    pod: NotRequired[Optional[str]]
    #: The pod was kept from an earlier turn of the session (the tier's idleTimeoutSeconds); absent otherwise.
    reused: NotRequired[bool]
    #: `prepared` (the tier's warm pool) or `ordinary`; null when the tier did not say.
    source: NotRequired[Optional["SandboxSource"]]


class SkillFile(TypedDict):
    """One file under `/.agents`: `path` relative to it (plain names, no `..`), content base64."""

    contentBase64: str
    path: str


class Status(TypedDict):
    """`GET /v1/status`: what the operator copies into the HarnessSession status."""

    busy: bool
    commands: "CommandCounts"
    #: RFC 3339, UTC: the last exec or end-turn (the start time before any).
    lastActivity: str
    ready: bool
    refusals: int
    session: str
    #: Current tier: 0, or the higher tier a turn escalated to.
    tier: int
    #: Turns ended since the worker started.
    turns: int
    #: This worker process's id: its counters start at zero, so the operator adds a new instance's counters to what earlier ones counted.
    instance: NotRequired[Optional[str]]
    #: A worker adopted from a warm pool: [`adoption_settings`] of what it was bound to, so the operator can check the pod serves exactly its session before calling it Ready. Absent on a worker started for its session.
    settings: NotRequired[Optional[str]]
    #: RFC 3339, UTC: when this worker process started.
    startedAt: NotRequired[Optional[str]]


class TierEscalated(TypedDict):
    """`harness.tier.escalated`, and one entry of the turn usage's `escalations`."""

    #: The classifier's reasons (`classification`) or the emulation gap (`emulation-gap`).
    detail: "EscalationDetail"
    provisionMs: int
    signal: "EscalationSignal"
    toTier: int
    #: The sandbox that serves the rest of the turn (Tier-1 pods): where it came from, reported before its first command runs.
    sandbox: NotRequired[Optional["SandboxOrigin"]]


class TierFigures(TypedDict):
    """Commands run on a tier and their summed duration."""

    commands: int
    durationMs: int


class TierRefused(TypedDict):
    """`harness.tier.refused`: a command not run (exit code 126). A policy refusal carries the classifier's `reasons`; a failed retry after an emulation gap carries `signal` and `gap`."""

    command: str
    reason: str
    tier: int
    gap: NotRequired[Optional["EmulationGap"]]
    reasons: NotRequired[Optional[List["Reason"]]]
    signal: NotRequired[Optional["EscalationSignal"]]
    #: The caller's step key (see `command.started`).
    stepKey: NotRequired[Optional[str]]


class TrackingSkipped(TypedDict):
    """What the file tracking newly could not follow after a command (names that are not UTF-8, trees too deep, special files): how many, and the first 20."""

    count: int
    first: List[str]


class TurnSummary(TypedDict):
    """A finished turn: the runtime's usage report and the files its commands changed."""

    commands: int
    #: Events of the turn's end (usage, dispose failures).
    events: List["TraceEvent"]
    #: Last change per harness path during the turn, sorted by path; at most the worker's `--max-file-events` paths.
    fileChanges: List["FileChangeSummary"]
    turnId: str
    #: `Turn::end`'s value, the data of the turn's `harness.turn.usage` event: stayedOnTier0, tier0 figures, higherTier, escalations, refusals. Kept as the runtime returns it (the readers index it); its schema is [`TurnUsage`].
    usage: "TurnUsage"
    #: File changes of the turn not in `fileChanges`: left out of a command's (or the merge-back's) events past `--max-file-events` (`harness.file.truncated`), or to paths past the list's bound.
    fileChangesOmitted: NotRequired[int]
    #: What became of each writable Persistent Dir at the turn's end (none without them).
    persistent: NotRequired[List["PersistentCommit"]]


class TurnUsage(TypedDict):
    """`harness.turn.usage`: closes the turn."""

    escalations: List["TierEscalated"]
    refusals: int
    stayedOnTier0: bool
    tier0: "TierFigures"
    #: The higher tier's usage as it reports it, `null` when the turn stayed on Tier-0.
    higherTier: NotRequired[Optional["HigherTierUsage"]]


#: `committed`: the source now holds the turn's version. `unchanged`: an `after-turn` dir the turn did not change (its file events name nothing under it): nothing was copied. `kept`: kept for a manual commit (a `manual` dir, or an `after-turn` dir in `conflict`). `conflict`: another session committed the source after this one loaded it, so this turn's version was kept instead of written (first commit wins; `POST /v1/persistent/commit` writes it anyway). `failed`: nothing was written (the message says why).
CommitOutcome = Literal["committed", "unchanged", "kept", "conflict", "failed"]


#: What the tiered runtime does with a script.
Decision = Literal["tier0", "escalate", "refuse"]


#: What an escalation acted on: the classifier's reasons, or the gap a Tier-0 run showed.
EscalationDetail = Union[List["Reason"], "EmulationGap"]


#: Why a turn escalated to a higher tier.
EscalationSignal = Literal["classification", "emulation-gap"]


class ExecStreamLineStdout(TypedDict):
    data: str
    type: Literal["stdout"]


class ExecStreamLineStderr(TypedDict):
    data: str
    type: Literal["stderr"]


class ExecStreamLineKeepalive(TypedDict):
    type: Literal["keepalive"]


class ExecStreamLineResult(ExecResponse):
    type: Literal["result"]


class ExecStreamLineError(TypedDict):
    error: "ErrorDetail"
    status: int
    type: Literal["error"]


#: One line of a streamed exec: output while the command runs, a `keepalive` during silences (so that a client that went away is noticed and its command cancelled), then exactly one `result` (the exec response, its fields beside `type`) or `error` line, the last.
ExecStreamLine = Union["ExecStreamLineStdout", "ExecStreamLineStderr", "ExecStreamLineKeepalive", "ExecStreamLineResult", "ExecStreamLineError"]


FileKind = Literal["file", "dir", "symlink"]


#: Where a file change was seen: after a Tier-0 command, in a higher tier's merge-back, or in a file written through the worker API (`PUT /v1/files`).
FileSource = Literal["command", "merge", "upload"]


#: Always `"emulation-gap"` (the seed's `kind` of a gap).
GapKind = Literal["emulation-gap"]


#: What kind of emulation gap stderr shows.
GapSignal = Literal["command-not-found", "unsupported-option"]


class HigherTierUsagePod(PodUsage):
    provider: Literal["pod"]


class HigherTierUsageLocalHost(LocalUsage):
    provider: Literal["local-host"]


class HigherTierUsageUnknown(TypedDict):
    commands: int
    durationMs: int
    provider: Literal["unknown"]


#: A higher tier's usage of one turn, by `provider`.
HigherTierUsage = Union["HigherTierUsagePod", "HigherTierUsageLocalHost", "HigherTierUsageUnknown"]


#: Why a command needs a real execution tier.
RealExecReason = Literal["version-control", "containers", "build-toolchain", "package-manager", "network-client"]


class ReasonTier0Supported(TypedDict):
    commands: List[str]
    kind: Literal["tier0-supported"]


class ReasonEmptyScript(TypedDict):
    kind: Literal["empty-script"]


class ReasonUnknownCommand(TypedDict):
    command: str
    kind: Literal["unknown-command"]


class ReasonNeedsRealExec(TypedDict):
    command: str
    kind: Literal["needs-real-exec"]
    reason: "RealExecReason"


class ReasonCapabilityDisabled(TypedDict):
    command: str
    kind: Literal["capability-disabled"]
    toggle: "Toggle"


class ReasonPolicyBlocked(TypedDict):
    command: str
    kind: Literal["policy-blocked"]
    rule: str


class ReasonDynamicCommand(TypedDict):
    command: str
    detail: str
    kind: Literal["dynamic-command"]


class ReasonOpaqueScript(TypedDict):
    command: str
    kind: Literal["opaque-script"]


class ReasonParseFailed(TypedDict):
    detail: str
    kind: Literal["parse-failed"]


class ReasonClassifierUnavailable(TypedDict):
    detail: str
    kind: Literal["classifier-unavailable"]


#: One finding about the script. `kind` is the JSON tag.
Reason = Union["ReasonTier0Supported", "ReasonEmptyScript", "ReasonUnknownCommand", "ReasonNeedsRealExec", "ReasonCapabilityDisabled", "ReasonPolicyBlocked", "ReasonDynamicCommand", "ReasonOpaqueScript", "ReasonParseFailed", "ReasonClassifierUnavailable"]


#: The schema of [`Source`] (defined with the tier API, whose `unknown` reads any other value).
SandboxSource = Literal["prepared", "ordinary", "unknown"]


#: Always `lh.trace.v2`.
SchemaName = Literal["lh.trace.v2"]


#: A runtime toggle that gates a Tier-0 command.
Toggle = Literal["network", "python", "javascript"]


class TraceEventHarnessRuntimeCommandStarted(TypedDict):
    #: Milliseconds since the Unix epoch.
    atMs: int
    schema: "SchemaName"
    #: Position within the turn, gapless from 1.
    seq: int
    sessionId: str
    turnId: str
    data: "CommandStarted"
    type: Literal["harness.runtime.command.started"]


class TraceEventHarnessRuntimeCommandCompleted(TypedDict):
    #: Milliseconds since the Unix epoch.
    atMs: int
    schema: "SchemaName"
    #: Position within the turn, gapless from 1.
    seq: int
    sessionId: str
    turnId: str
    data: "CommandCompleted"
    type: Literal["harness.runtime.command.completed"]


class TraceEventHarnessRuntimeDisposeFailed(TypedDict):
    #: Milliseconds since the Unix epoch.
    atMs: int
    schema: "SchemaName"
    #: Position within the turn, gapless from 1.
    seq: int
    sessionId: str
    turnId: str
    data: "DisposeFailed"
    type: Literal["harness.runtime.dispose.failed"]


class TraceEventHarnessFileCreated(TypedDict):
    #: Milliseconds since the Unix epoch.
    atMs: int
    schema: "SchemaName"
    #: Position within the turn, gapless from 1.
    seq: int
    sessionId: str
    turnId: str
    data: "FileEvent"
    type: Literal["harness.file.created"]


class TraceEventHarnessFileModified(TypedDict):
    #: Milliseconds since the Unix epoch.
    atMs: int
    schema: "SchemaName"
    #: Position within the turn, gapless from 1.
    seq: int
    sessionId: str
    turnId: str
    data: "FileEvent"
    type: Literal["harness.file.modified"]


class TraceEventHarnessFileDeleted(TypedDict):
    #: Milliseconds since the Unix epoch.
    atMs: int
    schema: "SchemaName"
    #: Position within the turn, gapless from 1.
    seq: int
    sessionId: str
    turnId: str
    data: "FileEvent"
    type: Literal["harness.file.deleted"]


class TraceEventHarnessFileTruncated(TypedDict):
    #: Milliseconds since the Unix epoch.
    atMs: int
    schema: "SchemaName"
    #: Position within the turn, gapless from 1.
    seq: int
    sessionId: str
    turnId: str
    data: "FileTruncated"
    type: Literal["harness.file.truncated"]


class TraceEventHarnessTierEscalated(TypedDict):
    #: Milliseconds since the Unix epoch.
    atMs: int
    schema: "SchemaName"
    #: Position within the turn, gapless from 1.
    seq: int
    sessionId: str
    turnId: str
    data: "TierEscalated"
    type: Literal["harness.tier.escalated"]


class TraceEventHarnessTierRefused(TypedDict):
    #: Milliseconds since the Unix epoch.
    atMs: int
    schema: "SchemaName"
    #: Position within the turn, gapless from 1.
    seq: int
    sessionId: str
    turnId: str
    data: "TierRefused"
    type: Literal["harness.tier.refused"]


class TraceEventHarnessTurnUsage(TypedDict):
    #: Milliseconds since the Unix epoch.
    atMs: int
    schema: "SchemaName"
    #: Position within the turn, gapless from 1.
    seq: int
    sessionId: str
    turnId: str
    data: "TurnUsage"
    type: Literal["harness.turn.usage"]


#: One line of `trace.ndjson` and of the session log, as the schema describes it: the envelope of [`TraceEvent`] around a typed [`Payload`] (`type` and `data`).
TraceEvent = Union["TraceEventHarnessRuntimeCommandStarted", "TraceEventHarnessRuntimeCommandCompleted", "TraceEventHarnessRuntimeDisposeFailed", "TraceEventHarnessFileCreated", "TraceEventHarnessFileModified", "TraceEventHarnessFileDeleted", "TraceEventHarnessFileTruncated", "TraceEventHarnessTierEscalated", "TraceEventHarnessTierRefused", "TraceEventHarnessTurnUsage"]
