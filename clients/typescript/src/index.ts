/**
 * Client of a Kube Harness session's worker (docs/worker-api.md): run shell commands (whole or
 * streamed as NDJSON), move files in and out, end turns. `kubeHarnessSandbox` (src/sandbox.ts) makes
 * it a Little Harness execution environment: a factory of one sandbox per turn.
 *
 * `Session.create` / `Session.attach` first make or find the HarnessSession on the cluster
 * (src/cluster.ts); `new Session({ url, token })` talks to a worker the caller already reached.
 *
 * Only calls safe to repeat are retried, and only when the connection failed (an HTTP answer is
 * final): reads, and an exec with a step key (the worker answers a completed step from its
 * session log). An exec without one is not idempotent.
 */

import type {
  Classification,
  FileWritten as WireFileWritten,
  OutputFile as WireOutputFile,
  TraceEvent,
  TurnSummary as WireTurnSummary,
} from "./models.js";
import type { AttachOptions, CreateOptions, Reached } from "./cluster.js";
import { ApiError, KubeHarnessError, TransportError } from "./errors.js";

export * from "./errors.js";
export * from "./sandbox.js";
export type { AttachOptions, CreateOptions } from "./cluster.js";

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

export interface SessionOptions {
  /** `http://127.0.0.1:PORT` through a port-forward, or the session's in-cluster address. */
  url: string;
  /** The session's token. */
  token: string;
  /** Time limit of each request other than exec and stream (default 300000 ms). */
  requestTimeoutMs?: number;
}

/** Waits before the 2nd and 3rd attempt of a call safe to repeat. */
const RETRY_DELAYS_MS = [200, 1000];

// Node before 20.4 lacks Symbol.asyncDispose: define it as later Nodes do (this registered
// symbol), so `await using`, which tsc lowers to a run-time lookup of it, finds close().
(Symbol as { asyncDispose?: symbol }).asyncDispose ??= Symbol.for("nodejs.asyncDispose");

export class Session implements AsyncDisposable {
  readonly #url: string;
  readonly #token: string;
  readonly #requestTimeoutMs: number;
  /** Set by create/attach: the session on the cluster, and what close lets go. */
  #reached?: Reached;
  #closed?: Promise<void>;
  /** The turn `openTurn` opened, carried by exec, stream and endTurn until it ends. */
  turnId?: string;

  constructor({ url, token, requestTimeoutMs = 300_000 }: SessionOptions) {
    this.#url = url.replace(/\/+$/, "");
    this.#token = token;
    this.#requestTimeoutMs = requestTimeoutMs;
  }

  /**
   * Creates a HarnessSession, waits until it is Ready and reaches its worker. `close()` (or
   * `await using`) deletes it unless `keep`; so does a failure here, before throwing.
   */
  static async create(options: CreateOptions = {}): Promise<Session> {
    // Loaded on demand: URL-and-token use never needs the Kubernetes client.
    const { createSession } = await import("./cluster.js");
    return Session.#of(await createSession(options));
  }

  /** Reaches an existing HarnessSession once it is Ready; closing never deletes it. */
  static async attach(name: string, options: AttachOptions = {}): Promise<Session> {
    const { attachSession } = await import("./cluster.js");
    return Session.#of(await attachSession(name, options));
  }

  static #of(reached: Reached): Session {
    const session = new Session({ url: reached.url, token: reached.token });
    session.#reached = reached;
    return session;
  }

  /** The HarnessSession's name (undefined when constructed from a URL). */
  get name(): string | undefined {
    return this.#reached?.name;
  }

  get namespace(): string | undefined {
    return this.#reached?.namespace;
  }

  /**
   * Closes the port-forward and, for a session `create` made without `keep`, deletes it and
   * waits until it is gone. Idempotent; after a failure, calling again tries again.
   */
  close(): Promise<void> {
    this.#closed ??= (this.#reached?.close() ?? Promise.resolve()).catch((e) => {
      this.#closed = undefined;
      throw e;
    });
    return this.#closed;
  }

  async [Symbol.asyncDispose](): Promise<void> {
    await this.close();
  }

  /** Runs one command and returns its outcome. */
  async exec(script: string, options: ExecOptions = {}): Promise<ExecResult> {
    const call = () => this.#json("POST", "/v1/exec", execBody(script, options, this.turnId), false);
    const body = options.stepKey === undefined ? await call() : await retrying(call);
    return { type: "result", ...(body as Omit<ExecResult, "type">) };
  }

  /**
   * Runs one command and yields its output while it runs, then its result (`type: "result"`).
   * Breaking out of the loop cancels the command.
   */
  async *stream(script: string, options: ExecOptions = {}): AsyncGenerator<Chunk | ExecResult> {
    const controller = new AbortController();
    const response = await this.#fetch("POST", "/v1/exec", {
      body: JSON.stringify(execBody(script, options, this.turnId)),
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
    // An upload belongs to this client's turn, if it opened one (else 409 turn-busy meanwhile).
    const turn = this.turnId === undefined ? "" : `&turnId=${encodeURIComponent(this.turnId)}`;
    const response = await this.#fetch("PUT", `/v1/files?path=${encodeURIComponent(path)}${turn}`, {
      body: data,
      headers: { "content-type": "application/octet-stream" },
      signal: AbortSignal.timeout(this.#requestTimeoutMs),
    });
    if (response.status !== 200) throw await apiError(response);
    return (await answer(() => response.json())) as FileWritten;
  }

  /** Reads one file of the session. */
  async readFile(path: string): Promise<Uint8Array> {
    return retrying(async () => {
      const response = await this.#fetch("GET", `/v1/files?path=${encodeURIComponent(path)}`, {
        signal: AbortSignal.timeout(this.#requestTimeoutMs),
      });
      if (response.status !== 200) throw await apiError(response);
      return new Uint8Array(await answer(() => response.arrayBuffer()));
    });
  }

  /**
   * Opens a turn of this client's own and returns its id (also `turnId`, which `exec`, `stream`
   * and `endTurn` then carry): until it ends, other clients' commands get 409 `turn-busy` naming
   * `client`, and so does this one's `openTurn` while another client's turn is open. The worker
   * ends it after its idle bound (`turn-ended` then).
   */
  async openTurn(client?: string): Promise<string> {
    const body = (await this.#json("POST", "/v1/turns", client === undefined ? {} : { client })) as {
      turnId: string;
    };
    this.turnId = body.turnId;
    return body.turnId;
  }

  /**
   * Ends the open turn (a Tier-1 sandbox merges back); `null` when no turn was open. After
   * `openTurn`, ends that turn (and forgets its id).
   */
  async endTurn(runId?: string): Promise<TurnSummary | null> {
    const request: Record<string, string> = {};
    if (runId) request.runId = runId;
    if (this.turnId !== undefined) request.turnId = this.turnId;
    const body = (await this.#json("POST", "/v1/turns/end", request)) as {
      turn: TurnSummary | null;
    };
    this.turnId = undefined;
    return body.turn;
  }

  async status(): Promise<Record<string, unknown>> {
    return (await retrying(() => this.#json("GET", "/v1/status"))) as Record<string, unknown>;
  }

  /** One JSON request; `limited`: under the request time limit (not exec, which has its own). */
  async #json(method: string, path: string, body?: unknown, limited = true): Promise<unknown> {
    const response = await this.#fetch(method, path, {
      body: body === undefined ? undefined : JSON.stringify(body),
      headers: body === undefined ? {} : { "content-type": "application/json" },
      signal: limited ? AbortSignal.timeout(this.#requestTimeoutMs) : undefined,
    });
    if (response.status !== 200) throw await apiError(response);
    return answer(() => response.json());
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

/** Reads an answer's body: a connection that breaks meanwhile is a transport failure. */
async function answer<T>(read: () => Promise<T>): Promise<T> {
  try {
    return await read();
  } catch (e) {
    throw new TransportError(`the answer broke off: ${String(e)}`, { cause: e });
  }
}

/**
 * Repeats a call safe to repeat when the worker could not be reached (a port-forward or pod
 * restarting), not when it answered nor when the request ran out of time.
 */
async function retrying<T>(call: () => Promise<T>): Promise<T> {
  for (let attempt = 0; ; attempt++) {
    try {
      return await call();
    } catch (e) {
      const timedOut = e instanceof TransportError && (e.cause as Error | undefined)?.name === "TimeoutError";
      if (!(e instanceof TransportError) || timedOut || attempt >= RETRY_DELAYS_MS.length) throw e;
      await new Promise((resolve) => setTimeout(resolve, RETRY_DELAYS_MS[attempt]));
    }
  }
}

function execBody(script: string, options: ExecOptions, turnId?: string): Record<string, unknown> {
  const body: Record<string, unknown> = { script };
  if (turnId !== undefined) body.turnId = turnId;
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
