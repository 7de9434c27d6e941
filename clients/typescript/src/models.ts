/**
 * The JSON of the worker API and of trace events (lh.trace.v2): what the worker sends, keys as on
 * the wire. Generated from protocol/schema/*.json by protocol/tests/suite/codegen
 * (`KH_REGENERATE=1 cargo test -p kube-harness-protocol --test all generated::`); do not edit.
 */

/** `POST /v1/adopt`: binds a pooled worker (started with `--adopt-token-file`, before any session existed) to one session, once. The bearer is the pool's token, never a session's. Everything session-specific travels here; the worker then runs exactly as one started with these arguments and files (docs/operator.md "Warm pool"). */
export interface AdoptRequest {
  /** `kube-harness worker` arguments for the session (`WorkerArgs::to_args`); `--listen`, `--workspace-root` and `--adopt-token-file` are ignored (the pooled worker keeps its socket and layout, and cannot be adopted twice), and so are the paths of `--token-file` and `--session-log-token-file`: the tokens below go where the pooled worker's own arguments say (`--session-log-token-file` only says whether a session-log token comes). */
  args: string[];
  /** The session's bearer token (written to the pooled worker's `--token-file`): visible ASCII, one piece. */
  token: string;
  /** The session's session-log token (written beside it as `session-log-token`, or to the pooled worker's own `--session-log-token-file`): visible ASCII, one piece. */
  sessionLogToken?: string | null;
  /** The session's skills, written under `/.agents` before the first command. */
  skills?: SkillFile[];
}

/** `POST /v1/adopt`'s answer: the session now served and [`adoption_settings`] of the request. */
export interface AdoptResponse {
  session: string;
  settings: string;
}

/** The answer to `PUT /v1/archive?path=…`: how many entries were placed, and their events. */
export interface ArchiveWritten {
  bytes: number;
  /** Entries created or changed (directories that were there already are not counted). */
  entries: number;
  /** The `harness.file.*` events (bounded as a command's are; `harness.file.truncated` counts the rest). */
  events: TraceEvent[];
  path: string;
  logPending?: number;
  /** Entries whose mode was not set as the archive has it, one line each (the setuid, setgid and sticky bits are never set; a directory stays open to its owner; a directory that was there keeps its mode): at most 100, then a line counting the rest. Absent when none. */
  warnings?: string[];
}

/** The classifier's answer for one script (an explained exec's `classification`). */
export interface Classification {
  decision: Decision;
  matrixVersion: string;
  reasons: Reason[];
}

/** `harness.runtime.command.completed`: the result. Output is inline (`stdout`, `stderr`, cut and flagged `…Truncated` when it could not be stored) or a reference to a file under `/artifacts/trace/` (`stdoutRef`, `stderrRef`). */
export interface CommandCompleted {
  command: string;
  cwd: string;
  durationMs: number;
  exitCode: number;
  tier: number;
  timedOut: boolean;
  truncated: boolean;
  fileTrackingSkipped?: TrackingSkipped | null;
  stderr?: string | null;
  stderrRef?: ContentRef | null;
  /** The schema allows only `true`: absent when false. */
  stderrTruncated?: true;
  stdout?: string | null;
  stdoutRef?: ContentRef | null;
  /** The schema allows only `true`: absent when false. */
  stdoutTruncated?: true;
  /** The caller's step key (see `command.started`). */
  stepKey?: string | null;
}

export interface CommandCounts {
  tier0: number;
  tier1: number;
}

/** `harness.runtime.command.started`: emitted before the command runs (and, with a session log, made durable first). */
export interface CommandStarted {
  command: string;
  cwd: string;
  tier: number;
  /** The caller's step key (worker exec with runId and stepKey): replay finds a step's started and completed events by it. */
  stepKey?: string | null;
}

/** `committed`: the source now holds the turn's version. `unchanged`: an `after-turn` dir the turn did not change (its file events name nothing under it): nothing was copied. `kept`: kept for a manual commit (a `manual` dir, or an `after-turn` dir in `conflict`). `conflict`: another session committed the source after this one loaded it, so this turn's version was kept instead of written (first commit wins; `POST /v1/persistent/commit` writes it anyway). `failed`: nothing was written (the message says why). */
export type CommitOutcome = "committed" | "unchanged" | "kept" | "conflict" | "failed";

/** `POST /v1/persistent/commit`: write a kept turn of a dir to its source. */
export interface CommitRequest {
  dir: string;
  turnId: string;
}

/** Output stored under `/artifacts/trace/`; replay returns it only if it still matches. */
export interface ContentRef {
  bytes: number;
  contentRef: string;
  /** SHA-256 of the payload (lowercase hex). Replay returns the file only if it still matches; refs recorded before it was added have none. */
  sha256?: string | null;
}

/** What the tiered runtime does with a script. */
export type Decision = "tier0" | "escalate" | "refuse";

/** `harness.runtime.dispose.failed`: releasing a tier (or part of its merge-back) failed. */
export interface DisposeFailed {
  error: string;
  tier: number;
}

/** An emulation gap found in a finished Tier-0 run: a command or an option Tier-0 lacks. */
export interface EmulationGap {
  command: string;
  kind: GapKind;
  signal: GapSignal;
  option?: string | null;
}

/** `POST /v1/turns/end` (body optional). */
export interface EndTurnRequest {
  /** The run the turn's closing events (usage, dispose failures) go to; default: the session. */
  runId?: string | null;
  /** The turn to end, as `POST /v1/turns` gave it: a turn opened that way is ended only by a request naming it (409 `turn-busy` otherwise). Naming a turn that already ended answers `turn: null`, so ending twice is safe. */
  turnId?: string | null;
}

/** The answer to `POST /v1/turns/end`. `turn` is `None` when no turn was open. */
export interface EndTurnResponse {
  turn?: TurnSummary | null;
}

/** Every error body of every service: `{"error": {"code", "message"}}`. The worker's `Refusal`, the kit's [`ApiError`] and the clients that read them all use this one type. */
export interface ErrorBody {
  error: ErrorDetail;
}

/** The inside of an [`ErrorBody`]. */
export interface ErrorDetail {
  code: string;
  message: string;
}

/** What an escalation acted on: the classifier's reasons, or the gap a Tier-0 run showed. */
export type EscalationDetail = Reason[] | EmulationGap;

/** Why a turn escalated to a higher tier. */
export type EscalationSignal = "classification" | "emulation-gap";

/** `POST /v1/exec`. */
export interface ExecRequest {
  script: string;
  /** Also return the classifier's decision and reasons (costs one more classification). */
  explain?: boolean;
  /** The session log run the command's events go to; defaults to the worker's session name. */
  runId?: string | null;
  /** With `runId` (or the default run): the step's identity for replay. */
  stepKey?: string | null;
  /** Wall-clock limit of this command; at most the worker's `--max-timeout`. */
  timeoutMs?: number | null;
  /** The turn this command belongs to, as `POST /v1/turns` gave it: while a turn opened that way is open, a command without its id is refused with 409 `turn-busy` (one client's turn at a time); a command naming a turn that ended gets 409 `turn-ended`. Without it, and with no such turn open, the command runs in the session's shared turn (opened if none is). */
  turnId?: string | null;
}

/** The answer to `POST /v1/exec`: the command's outcome and the trace events it emitted. */
export interface ExecResponse {
  /** Events of this command (empty for a replayed step: they are in the session log already). */
  events: TraceEvent[];
  exitCode: number;
  /** The result was read from the session log; nothing ran. */
  replayed: boolean;
  runId: string;
  stderr: string;
  stdout: string;
  tier: number;
  timedOut: boolean;
  truncated: boolean;
  /** With `explain`: the classifier's decision and reasons. */
  classification?: Classification | null;
  /** Events of this worker not yet in the session log (appended before the next command runs). */
  logPending?: number;
  /** Streamed exec only: why output past the cap was not (wholly) kept, one line per stream. */
  outputProblems?: string[];
  /** A replayed step whose recorded output could not be returned (its `/artifacts/trace/…` payload is gone, or was changed after it was recorded): why, one line per stream. The stream is empty and `truncated` is set. */
  replayProblems?: string[];
  /** Streamed exec only: the same for stderr. */
  stderrFile?: OutputFile | null;
  /** Streamed exec only: the file holding all of stdout, when it outgrew the result's cap. */
  stdoutFile?: OutputFile | null;
}

/** One line of a streamed exec: output while the command runs, a `keepalive` during silences (so that a client that went away is noticed and its command cancelled), then exactly one `result` (the exec response, its fields beside `type`) or `error` line, the last. */
export type ExecStreamLine =
  | {
    data: string;
    type: "stdout";
  }
  | {
    data: string;
    type: "stderr";
  }
  | {
    type: "keepalive";
  }
  | (ExecResponse & {
    type: "result";
  })
  | {
    error: ErrorDetail;
    status: number;
    type: "error";
  };

export interface FileChangeSummary {
  /** `created`, `modified` or `deleted`. */
  change: string;
  path: string;
}

/** `harness.file.created`, `.modified` or `.deleted` (the variant says which). */
export interface FileEvent {
  kind: FileKind;
  mode: number;
  /** The harness path (`/session/…`, `/artifacts/…`, `/persistent/…`). */
  path: string;
  size: number;
  source: FileSource;
  tier: number;
}

export type FileKind = "file" | "dir" | "symlink";

/** Where a file change was seen: after a Tier-0 command, in a higher tier's merge-back, or in a file written through the worker API (`PUT /v1/files`). */
export type FileSource = "command" | "merge" | "upload";

/** `harness.file.truncated`: stands for the file events of one command (or one merge-back) past the emitter's limits (a count, and a budget of path bytes); emitted after the last listed one. `byteLimit` and `listedBytes` are there when the byte budget, not the count, stopped the listing. */
export interface FileTruncated {
  limit: number;
  listed: number;
  omitted: OmittedFiles;
  source: FileSource;
  tier: number;
  byteLimit?: number | null;
  listedBytes?: number | null;
}

/** The answer to `PUT /v1/files?path=…`: what was written and the file event it made. */
export interface FileWritten {
  bytes: number;
  /** `created` or `modified`. */
  change: string;
  /** The upload's `harness.file.*` event (also appended to the session log). */
  events: TraceEvent[];
  path: string;
  /** Events of this worker not yet in the session log. */
  logPending?: number;
}

/** Always `"emulation-gap"` (the seed's `kind` of a gap). */
export type GapKind = "emulation-gap";

/** What kind of emulation gap stderr shows. */
export type GapSignal = "command-not-found" | "unsupported-option";

/** `GET /healthz` and `GET /readyz`. */
export interface Health {
  status: string;
  reason?: string | null;
}

/** A higher tier's usage of one turn, by `provider`. */
export type HigherTierUsage =
  | (PodUsage & {
    provider: "pod";
  })
  | (LocalUsage & {
    provider: "local-host";
  })
  | {
    commands: number;
    durationMs: number;
    provider: "unknown";
  };

/** The local host's Tier-1 usage of one turn. */
export interface LocalUsage {
  bytesHandedOver: number;
  bytesReturned: number;
  commands: number;
  durationMs: number;
  provisionMs: number;
}

/** The answer to `GET /v1/log?run=R&after=N&limit=L`: one page of a run of the session's log, as the session log keeps it (`kube-harness trace` and `doctor` read sessions through it). */
export interface LogPage {
  events: LoggedEvent[];
  /** The run as asked (`run`, or the session's default run), without the worker's scope. */
  run: string;
  /** Pass as `after` for the next page; absent at the end. */
  next?: number | null;
}

/** One event of the session log: a trace event's `type` and `data` with the log's own position and commit time (the log keeps no more of the trace line: not its turn or its time). */
export interface LoggedEvent {
  data: unknown;
  /** When the log committed it, milliseconds since the Unix epoch. */
  recordedAtMs: number;
  /** Position in the run, from 1, gapless. */
  sequence: number;
  type: string;
}

/** How many file events of each change were left out. */
export interface OmittedFiles {
  created: number;
  deleted: number;
  modified: number;
  total: number;
}

/** `POST /v1/turns` (body optional): opens a turn for one client. The session runs one turn at a time: while it is open, commands and end-turn requests that do not carry its id are refused with 409 `turn-busy`, and opening another is too. */
export interface OpenTurnRequest {
  /** Who opens it (a host name, a program, an agent's name: at most 128 bytes, no control characters), named in the `turn-busy` answers other clients get. */
  client?: string | null;
}

/** The answer to `POST /v1/turns`. */
export interface OpenTurnResponse {
  /** A turn with no command for this long is ended by the worker (as by `POST /v1/turns/end`, its changes merged back), so an abandoned turn does not hold the session. */
  idleTimeoutMs: number;
  /** What the turn's commands and its end carry as `turnId`. */
  turnId: string;
}

/** A stream's whole output, kept under `/artifacts/trace/` when it outgrew the result's cap. */
export interface OutputFile {
  /** Bytes in the file. */
  bytes: number;
  /** The file holds all the stream printed; false when it stopped at `--max-file-bytes` or a write failed. */
  complete: boolean;
  /** Harness path of the file (`/artifacts/trace/<id>.stdout.txt`). */
  path: string;
  /** SHA-256 of the file's bytes, hex. */
  sha256: string;
}

/** One Persistent Dir at the end of a turn, or answering `POST /v1/persistent/commit`. */
export interface PersistentCommit {
  /** The dir's name (`/persistent/<dir>`). */
  dir: string;
  outcome: CommitOutcome;
  /** The turn whose end state this is. */
  turnId: string;
  /** Why, for `conflict` and `failed`. */
  message?: string | null;
}

/** A Tier-1 pod's usage of one turn. */
export interface PodUsage {
  bytesHandedOver: number;
  bytesReturned: number;
  commands: number;
  durationMs: number;
  pod: string;
  /** From the sandbox's opening to its release. */
  podMs: number;
  /** Pod start and workspace handoff. */
  provisionMs: number;
  missReason?: string | null;
  /** As in the escalation's `sandbox`. */
  source?: SandboxSource | null;
}

/** Why a command needs a real execution tier. */
export type RealExecReason = "version-control" | "containers" | "build-toolchain" | "package-manager" | "network-client";

/** One finding about the script. `kind` is the JSON tag. */
export type Reason =
  | {
    commands: string[];
    kind: "tier0-supported";
  }
  | {
    kind: "empty-script";
  }
  | {
    command: string;
    kind: "unknown-command";
  }
  | {
    command: string;
    kind: "needs-real-exec";
    reason: RealExecReason;
  }
  | {
    command: string;
    kind: "capability-disabled";
    toggle: Toggle;
  }
  | {
    command: string;
    kind: "policy-blocked";
    rule: string;
  }
  | {
    command: string;
    detail: string;
    kind: "dynamic-command";
  }
  | {
    command: string;
    kind: "opaque-script";
  }
  | {
    detail: string;
    kind: "parse-failed";
  }
  | {
    detail: string;
    kind: "classifier-unavailable";
  };

/** Where a higher tier's sandbox came from, as the tier reports it when it opens. */
export interface SandboxOrigin {
  /** Why an ordinary pod serves a pooled tier (`stock_empty`, `workspace_too_large`, `slot_unavailable`, `unreported`), as the tier API reports it. */
  missReason?: string | null;
  pod?: string | null;
  /** The pod was kept from an earlier turn of the session (the tier's idleTimeoutSeconds); absent otherwise. */
  reused?: boolean;
  /** `prepared` (the tier's warm pool) or `ordinary`; null when the tier did not say. */
  source?: SandboxSource | null;
}

/** The schema of [`Source`] (defined with the tier API, whose `unknown` reads any other value). */
export type SandboxSource = "prepared" | "ordinary" | "unknown";

/** Always `lh.trace.v2`. */
export type SchemaName = "lh.trace.v2";

/** One file under `/.agents`: `path` relative to it (plain names, no `..`), content base64. */
export interface SkillFile {
  contentBase64: string;
  path: string;
}

/** `GET /v1/status`: what the operator copies into the HarnessSession status. */
export interface Status {
  busy: boolean;
  commands: CommandCounts;
  /** RFC 3339, UTC: the last exec or end-turn (the start time before any). */
  lastActivity: string;
  ready: boolean;
  refusals: number;
  session: string;
  /** Current tier: 0, or the higher tier a turn escalated to. */
  tier: number;
  /** Turns ended since the worker started. */
  turns: number;
  /** This worker process's id: its counters start at zero, so the operator adds a new instance's counters to what earlier ones counted. */
  instance?: string | null;
  /** A worker adopted from a warm pool: [`adoption_settings`] of what it was bound to, so the operator can check the pod serves exactly its session before calling it Ready. Absent on a worker started for its session. */
  settings?: string | null;
  /** RFC 3339, UTC: when this worker process started. */
  startedAt?: string | null;
}

/** `harness.tier.escalated`, and one entry of the turn usage's `escalations`. */
export interface TierEscalated {
  /** The classifier's reasons (`classification`) or the emulation gap (`emulation-gap`). */
  detail: EscalationDetail;
  provisionMs: number;
  signal: EscalationSignal;
  toTier: number;
  /** The sandbox that serves the rest of the turn (Tier-1 pods): where it came from, reported before its first command runs. */
  sandbox?: SandboxOrigin | null;
  /** Other keys another writer added. */
  [key: string]: unknown;
}

/** Commands run on a tier and their summed duration. */
export interface TierFigures {
  commands: number;
  durationMs: number;
}

/** `harness.tier.refused`: a command not run (exit code 126). A policy refusal carries the classifier's `reasons`; a failed retry after an emulation gap carries `signal` and `gap`. */
export interface TierRefused {
  command: string;
  reason: string;
  tier: number;
  gap?: EmulationGap | null;
  reasons?: Reason[] | null;
  signal?: EscalationSignal | null;
  /** The caller's step key (see `command.started`). */
  stepKey?: string | null;
  /** Other keys another writer added. */
  [key: string]: unknown;
}

/** A runtime toggle that gates a Tier-0 command. */
export type Toggle = "network" | "python" | "javascript";

/** One line of `trace.ndjson` and of the session log, as the schema describes it: the envelope of [`TraceEvent`] around a typed [`Payload`] (`type` and `data`). */
export type TraceEvent = {
  /** Milliseconds since the Unix epoch. */
  atMs: number;
  schema: SchemaName;
  /** Position within the turn, gapless from 1. */
  seq: number;
  sessionId: string;
  turnId: string;
} & (
  | {
    data: CommandStarted;
    type: "harness.runtime.command.started";
  }
  | {
    data: CommandCompleted;
    type: "harness.runtime.command.completed";
  }
  | {
    data: DisposeFailed;
    type: "harness.runtime.dispose.failed";
  }
  | {
    data: FileEvent;
    type: "harness.file.created";
  }
  | {
    data: FileEvent;
    type: "harness.file.modified";
  }
  | {
    data: FileEvent;
    type: "harness.file.deleted";
  }
  | {
    data: FileTruncated;
    type: "harness.file.truncated";
  }
  | {
    data: TierEscalated;
    type: "harness.tier.escalated";
  }
  | {
    data: TierRefused;
    type: "harness.tier.refused";
  }
  | {
    data: TurnUsage;
    type: "harness.turn.usage";
  });

/** What the file tracking newly could not follow after a command (names that are not UTF-8, trees too deep, special files): how many, and the first 20. */
export interface TrackingSkipped {
  count: number;
  first: string[];
}

/** A finished turn: the runtime's usage report and the files its commands changed. */
export interface TurnSummary {
  commands: number;
  /** Events of the turn's end (usage, dispose failures). */
  events: TraceEvent[];
  /** Last change per harness path during the turn, sorted by path; at most the worker's `--max-file-events` paths. */
  fileChanges: FileChangeSummary[];
  turnId: string;
  /** `Turn::end`'s value, the data of the turn's `harness.turn.usage` event: stayedOnTier0, tier0 figures, higherTier, escalations, refusals. Kept as the runtime returns it (the readers index it); its schema is [`TurnUsage`]. */
  usage: TurnUsage;
  /** File changes of the turn not in `fileChanges`: left out of a command's (or the merge-back's) events past `--max-file-events` (`harness.file.truncated`), or to paths past the list's bound. */
  fileChangesOmitted?: number;
  /** What became of each writable Persistent Dir at the turn's end (none without them). */
  persistent?: PersistentCommit[];
}

/** `harness.turn.usage`: closes the turn. */
export interface TurnUsage {
  escalations: TierEscalated[];
  refusals: number;
  stayedOnTier0: boolean;
  tier0: TierFigures;
  /** The higher tier's usage as it reports it, `null` when the turn stayed on Tier-0. */
  higherTier?: HigherTierUsage | null;
}
