/**
 * Client of a Kube Harness session's worker (docs/worker-api.md): run shell commands (whole or
 * streamed as NDJSON), move files in and out, end turns. `kubeHarnessSandbox` wraps it in the
 * shape of Little Harness's custom execution environment contract.
 *
 * Nothing is retried here: an exec without a step key is not idempotent; with one, retrying is
 * safe (the worker answers a completed step from its session log).
 */

import type {
  Classification,
  FileWritten as WireFileWritten,
  OutputFile as WireOutputFile,
  TraceEvent,
  TurnSummary as WireTurnSummary,
} from "./models.js";

/** The worker's JSON, typed (generated from the protocol's schemas: src/models.ts). */
export type * as models from "./models.js";
export type { Classification, TraceEvent, TurnUsage } from "./models.js";

export const NDJSON = "application/x-ndjson";

/** One command's outcome, whatever its exit code. */
export interface ExecResult {
  type: "result";
  stdout: string;
  stderr: string;
  exitCode: number;
  tier: number;
  timedOut: boolean;
  truncated: boolean;
  runId: string;
  replayed: boolean;
  events: TraceEvent[];
  classification?: Classification;
  /** Streamed exec only: where all of stdout went when it outgrew the result's 1 MiB cap. */
  stdoutFile?: OutputFile;
  /** The same for stderr. */
  stderrFile?: OutputFile;
  /** Why output past the cap was not (wholly) kept. */
  outputProblems?: string[];
}

/**
 * A stream's whole output, kept under /artifacts/trace/ (read it with readFile); `complete` is
 * false when the file stopped at the worker's --max-file-bytes or a write failed.
 */
export type OutputFile = WireOutputFile;

/** Output of a streamed command as it was written. */
export interface Chunk {
  type: "stdout" | "stderr";
  data: string;
}

export interface ExecOptions {
  /** This command's time limit in milliseconds (the worker caps it). */
  timeoutMs?: number;
  runId?: string;
  stepKey?: string;
}

export type FileWritten = WireFileWritten & { change: "created" | "modified" };

/** A finished turn: its usage (`harness.turn.usage`'s data), changed files and closing events. */
export type TurnSummary = WireTurnSummary;

export class KubeHarnessError extends Error {}

/** The worker refused the request: HTTP status and its stable error code. */
export class ApiError extends KubeHarnessError {
  constructor(
    readonly status: number,
    readonly code: string,
    message: string,
  ) {
    super(`${status} ${code}: ${message}`);
    this.name = "ApiError";
  }
}

/** The worker could not be reached, or the connection broke: a command's fate is unknown. */
export class TransportError extends KubeHarnessError {
  constructor(message: string, options?: { cause?: unknown }) {
    super(message, options);
    this.name = "TransportError";
  }
}

export interface SessionOptions {
  /** `http://127.0.0.1:PORT` through a port-forward, or the session's in-cluster address. */
  url: string;
  /** The session's token. */
  token: string;
}

export class Session {
  readonly #url: string;
  readonly #token: string;

  constructor({ url, token }: SessionOptions) {
    this.#url = url.replace(/\/+$/, "");
    this.#token = token;
  }

  /** Runs one command and returns its outcome. */
  async exec(script: string, options: ExecOptions = {}): Promise<ExecResult> {
    const body = await this.#json("POST", "/v1/exec", execBody(script, options));
    return { type: "result", ...(body as Omit<ExecResult, "type">) };
  }

  /**
   * Runs one command and yields its output while it runs, then its result (`type: "result"`).
   * Breaking out of the loop cancels the command.
   */
  async *stream(script: string, options: ExecOptions = {}): AsyncGenerator<Chunk | ExecResult> {
    const controller = new AbortController();
    const response = await this.#fetch("POST", "/v1/exec", {
      body: JSON.stringify(execBody(script, options)),
      headers: { "content-type": "application/json", accept: NDJSON },
      signal: controller.signal,
    });
    if (response.status !== 200) throw await apiError(response);
    if (!response.body) throw new TransportError("the stream has no body");
    const decoder = new TextDecoder();
    let pending = "";
    try {
      for await (const bytes of response.body as AsyncIterable<Uint8Array>) {
        pending += decoder.decode(bytes, { stream: true });
        let end: number;
        while ((end = pending.indexOf("\n")) >= 0) {
          const line = JSON.parse(pending.slice(0, end));
          pending = pending.slice(end + 1);
          switch (line.type) {
            case "stdout":
            case "stderr":
              yield { type: line.type, data: line.data };
              break;
            case "result":
              yield line as ExecResult;
              return;
            case "error":
              throw new ApiError(line.status, line.error.code, line.error.message);
            default:
              break; // keepalive
          }
        }
      }
    } catch (e) {
      if (e instanceof KubeHarnessError) throw e;
      throw new TransportError(`the stream broke: ${String(e)}`, { cause: e });
    } finally {
      // Leaving early (a break, an error) drops the connection, which cancels the command.
      controller.abort();
    }
    throw new TransportError("the stream ended without a result");
  }

  /** Writes one file of the session. */
  async writeFile(path: string, data: Uint8Array | string): Promise<FileWritten> {
    const response = await this.#fetch("PUT", `/v1/files?path=${encodeURIComponent(path)}`, {
      body: data,
      headers: { "content-type": "application/octet-stream" },
    });
    if (response.status !== 200) throw await apiError(response);
    return (await response.json()) as FileWritten;
  }

  /** Reads one file of the session. */
  async readFile(path: string): Promise<Uint8Array> {
    const response = await this.#fetch("GET", `/v1/files?path=${encodeURIComponent(path)}`, {});
    if (response.status !== 200) throw await apiError(response);
    return new Uint8Array(await response.arrayBuffer());
  }

  /** Ends the open turn (a Tier-1 sandbox merges back); `null` when no turn was open. */
  async endTurn(runId?: string): Promise<TurnSummary | null> {
    const body = (await this.#json("POST", "/v1/turns/end", runId ? { runId } : {})) as {
      turn: TurnSummary | null;
    };
    return body.turn;
  }

  async status(): Promise<Record<string, unknown>> {
    return (await this.#json("GET", "/v1/status")) as Record<string, unknown>;
  }

  async #json(method: string, path: string, body?: unknown): Promise<unknown> {
    const response = await this.#fetch(method, path, {
      body: body === undefined ? undefined : JSON.stringify(body),
      headers: body === undefined ? {} : { "content-type": "application/json" },
    });
    if (response.status !== 200) throw await apiError(response);
    return response.json();
  }

  async #fetch(
    method: string,
    path: string,
    init: { body?: string | Uint8Array; headers?: Record<string, string>; signal?: AbortSignal },
  ): Promise<Response> {
    try {
      return await fetch(`${this.#url}${path}`, {
        method,
        body: init.body as BodyInit | undefined,
        signal: init.signal,
        headers: { authorization: `Bearer ${this.#token}`, ...init.headers },
      });
    } catch (e) {
      throw new TransportError(`cannot reach the worker: ${String(e)}`, { cause: e });
    }
  }
}

function execBody(script: string, options: ExecOptions): Record<string, unknown> {
  const body: Record<string, unknown> = { script };
  if (options.timeoutMs !== undefined) body.timeoutMs = options.timeoutMs;
  if (options.runId !== undefined) body.runId = options.runId;
  if (options.stepKey !== undefined) body.stepKey = options.stepKey;
  return body;
}

async function apiError(response: Response): Promise<ApiError> {
  const text = await response.text().catch(() => "");
  try {
    const { error } = JSON.parse(text);
    return new ApiError(response.status, error.code, error.message);
  } catch {
    return new ApiError(response.status, "", text);
  }
}

/** What Little Harness's custom execution environment calls (`execute`, `dispose`). */
export interface HarnessSandboxLike {
  execute(input: { command: string }): Promise<{ stdout: string; stderr: string; exitCode: number }>;
  dispose(): Promise<void>;
}

export interface KubeHarnessSandboxOptions extends SessionOptions {
  /** Where a failed `dispose` is reported (default: `console.warn`); it never throws. */
  onDisposeError?: (error: unknown) => void;
}

/**
 * A Kube Harness session as a Little Harness execution environment: `execute` runs one command
 * in the session and never throws (a failure is `{ stdout, stderr, exitCode: 126 }`, as the
 * seed's refusals are); `dispose` ends the session's turn and reports, never throws, its error.
 * cwd and exported variables persist across calls in the session itself.
 */
export function kubeHarnessSandbox(options: KubeHarnessSandboxOptions): HarnessSandboxLike {
  const session = new Session(options);
  const report = options.onDisposeError ?? ((e: unknown) => console.warn("kube-harness: dispose failed:", e));
  return {
    async execute({ command }) {
      try {
        const r = await session.exec(command);
        return { stdout: r.stdout, stderr: r.stderr, exitCode: r.exitCode };
      } catch (e) {
        return { stdout: "", stderr: `kube-harness: ${e instanceof Error ? e.message : String(e)}\n`, exitCode: 126 };
      }
    },
    async dispose() {
      try {
        await session.endTurn();
      } catch (e) {
        report(e);
      }
    },
  };
}
