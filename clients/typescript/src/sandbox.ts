/**
 * A Kube Harness session as a Little Harness execution environment: `kubeHarnessSandbox(options)`
 * is a `HarnessSandboxFactory`, the seed's "custom execution environment" (execution-environments,
 * "Writing a custom execution environment").
 *
 * The contract's types are declared here, by this SDK, from the seed's text: the harness package
 * (`@little-stack/harness`) is not served by the npm registry, so it cannot be a dependency. They
 * are the part of the contract this factory needs, structurally compatible with the seed's
 * example (a factory taking options and resolving to `{ execute, dispose }`); the quoted sentence
 * above each one is where it comes from.
 */

import { KubeHarnessError } from "./errors.js";
import { Session } from "./index.js";
import type { ExecResult, SessionOptions } from "./index.js";
import type { AttachOptions, CreateOptions } from "./cluster.js";
import type { TraceEvent } from "./models.js";

/**
 * Where the harness takes events ("event sinks"): every `lh.trace.v2` event the worker emitted,
 * `harness.runtime.command.*`, `harness.file.*`, tier events and, from the turn's end,
 * `harness.turn.usage` ("Both adapters emit identical harness.runtime.command.*,
 * harness.tool_call.*, and harness.file.* events"). An async sink is awaited before the next event.
 */
export type HarnessEventSink = (event: TraceEvent) => void | Promise<void>;

/** One command ("async execute(input) { // Run input.command wherever your environment lives"). */
export interface HarnessExecuteInput {
  command: string;
  /** This command's time limit (the worker caps it at its `--max-timeout`). */
  timeoutMs?: number;
  /**
   * The step this command is, for replay: a retried step with the same key (in the same run) is
   * answered from the session log instead of running again. Default: `replay.stepKey(input)`.
   */
  stepKey?: string;
}

/**
 * A command's outcome, whatever happened: "Report failures as a result ({ exitCode, stderr }) —
 * never throw — so every adapter shows the model the same tool-result shape."
 */
export interface HarnessExecuteResult {
  stdout: string;
  stderr: string;
  exitCode: number;
}

/**
 * "replay wiring": the run this turn belongs to, and how a command's step key is chosen
 * ("recorded tool results are replayed instead of re-executing tool side effects").
 */
export interface HarnessReplayOptions {
  /** The session log's run (the worker scopes it to the session). */
  runId: string;
  /** The step key of a command whose input carries none; `undefined`: not a replayable step. */
  stepKey?: (input: HarnessExecuteInput) => string | undefined;
}

/**
 * What the harness passes the factory: "A factory receives CreateSandboxOptions (workspace spec,
 * files, optional tools + tool context, replay wiring, event sinks)".
 */
export interface CreateSandboxOptions {
  /**
   * The host's workspace spec (mount table). Accepted, not used: the session's own volumes are
   * the workspace (`/session`, `/artifacts`, `/persistent`, `/.agents`), and its worker emits the
   * `harness.file.*` events for them.
   */
  workspace?: unknown;
  /** The host's file-change tracking. Accepted, not used (the worker tracks files). */
  files?: unknown;
  /** Tools and their context. Accepted, not served: the worker has no tool bridge. */
  tools?: unknown;
  toolContext?: unknown;
  replay?: HarnessReplayOptions;
  /** The seed example's single sink (`emit: options.emit`). */
  emit?: HarnessEventSink;
  /** More sinks; each event goes to `emit`, then to these in order. */
  eventSinks?: HarnessEventSink[];
  /** The turn's cancellation: once aborted, commands not yet started are refused (126). */
  signal?: AbortSignal;
}

/**
 * The environment of one turn: "execute owns cwd/env persistence across calls and must not throw;
 * dispose is awaited on every turn exit path, and an error it throws never fails the turn but is
 * reported as a harness.runtime.dispose.failed event".
 */
export interface HarnessSandbox {
  execute(input: HarnessExecuteInput): Promise<HarnessExecuteResult>;
  dispose(): Promise<void>;
}

/** "the factory is called once per turn that needs a sandbox" */
export type HarnessSandboxFactory = (options: CreateSandboxOptions) => Promise<HarnessSandbox>;

/** How each turn reaches its session. */
export type KubeHarnessSandboxOptions = KubeHarnessSandboxCommon &
  (
    | { /** An existing Session; its owner closes it. */ session: Session }
    | SessionOptions
    | { /** Each turn creates a session (`Session.create`), closed at dispose: deleted unless `keep`. */ create: CreateOptions }
    | { /** Each turn attaches to this one (`Session.attach`), closed at dispose (never deleted). */ attach: AttachOptions & { name: string } }
  );

export interface KubeHarnessSandboxCommon {
  /** Who opens each turn: other clients' 409 `turn-busy` names it (default "little-harness"). */
  client?: string;
}

/**
 * A factory of Kube Harness sandboxes, one per turn. Each call reaches the session (creating or
 * attaching it if so configured) and opens a turn of its own on it (`openTurn`), which every
 * command carries: other clients get 409 `turn-busy` until it ends. A call that cannot do so
 * throws, after closing what it created or attached.
 *
 * - `execute` runs one command and never throws: a transport failure or a refusal (`turn-busy`,
 *   `session-log-unavailable`, …) is `{ exitCode: 126, stderr: "kube-harness: …" }`. cwd and
 *   exported variables carry over between calls and turns (in the session). Calls made at once
 *   run one at a time in call order (as the worker would run them), so each one's events reach
 *   the sinks together and in the worker's order. A command with a step key is replayed from the
 *   session log when the step already completed in the run: nothing runs, and no events come.
 * - The events (`emit`, then `eventSinks`) are delivered before `execute` resolves, each sink
 *   awaited. A sink that throws does not stop the others nor the command's result; `dispose`
 *   throws its error (after ending the turn) so the harness reports it.
 * - `dispose` waits for the commands under way, ends the turn (`endTurn`: a Tier-1 sandbox merges
 *   back; its events go to the sinks) and closes a session the factory created or attached. If
 *   the end fails it still closes, then throws the end's error; the harness reports it as
 *   `harness.runtime.dispose.failed`. Calling it again does nothing.
 */
export function kubeHarnessSandbox(options: KubeHarnessSandboxOptions): HarnessSandboxFactory {
  const client = options.client ?? "little-harness";
  return async (sandboxOptions) => {
    const { session, owned } = await reach(options);
    try {
      await session.openTurn(client);
    } catch (e) {
      if (owned) await session.close().catch(() => {});
      throw e;
    }
    return new TurnSandbox(session, owned, sandboxOptions);
  };
}

async function reach(options: KubeHarnessSandboxOptions): Promise<{ session: Session; owned: boolean }> {
  if ("session" in options) return { session: options.session, owned: false };
  if ("create" in options) return { session: await Session.create(options.create), owned: true };
  if ("attach" in options) {
    const { name, ...attach } = options.attach;
    return { session: await Session.attach(name, attach), owned: true };
  }
  return { session: new Session(options), owned: false };
}

class TurnSandbox implements HarnessSandbox {
  readonly #session: Session;
  readonly #owned: boolean;
  readonly #options: CreateSandboxOptions;
  readonly #sinks: HarnessEventSink[];
  /** The last command's delivery: the next one starts after it. */
  #queue: Promise<unknown> = Promise.resolve();
  #disposing?: Promise<void>;
  /** The first error a sink threw, thrown by dispose. */
  #sinkError?: unknown;

  constructor(session: Session, owned: boolean, options: CreateSandboxOptions) {
    this.#session = session;
    this.#owned = owned;
    this.#options = options;
    this.#sinks = [...(options.emit ? [options.emit] : []), ...(options.eventSinks ?? [])];
  }

  execute(input: HarnessExecuteInput): Promise<HarnessExecuteResult> {
    if (this.#disposing) return Promise.resolve(refused("the sandbox was disposed: its turn has ended"));
    const run = this.#queue.then(() => this.#run(input));
    this.#queue = run;
    return run;
  }

  async #run(input: HarnessExecuteInput): Promise<HarnessExecuteResult> {
    if (this.#options.signal?.aborted) return refused("the turn was aborted; the command did not run");
    const replay = this.#options.replay;
    let result: ExecResult;
    try {
      result = await this.#session.exec(input.command, {
        timeoutMs: input.timeoutMs,
        runId: replay?.runId,
        stepKey: input.stepKey ?? replay?.stepKey?.(input),
      });
    } catch (e) {
      // A TransportError (the command's fate is unknown) or an ApiError (a refusal: its message
      // starts with the status and code, e.g. "409 turn-busy: …").
      return refused(message(e));
    }
    await this.#deliver(result.events ?? []);
    return { stdout: result.stdout, stderr: result.stderr, exitCode: result.exitCode };
  }

  async #deliver(events: TraceEvent[]): Promise<void> {
    for (const event of events) {
      for (const sink of this.#sinks) {
        try {
          await sink(event);
        } catch (e) {
          this.#sinkError ??= e;
        }
      }
    }
  }

  dispose(): Promise<void> {
    if (this.#disposing) return this.#disposing.catch(() => {});
    this.#disposing = this.#dispose();
    return this.#disposing;
  }

  async #dispose(): Promise<void> {
    await this.#queue.catch(() => {});
    let failure: { error: unknown } | undefined;
    try {
      const turn = await this.#session.endTurn(this.#options.replay?.runId);
      await this.#deliver(turn?.events ?? []);
    } catch (e) {
      failure = { error: e };
    }
    if (this.#owned) {
      try {
        await this.#session.close();
      } catch (e) {
        failure ??= { error: e };
      }
    }
    if (!failure && this.#sinkError !== undefined) {
      failure = { error: new KubeHarnessError(`an event sink failed: ${message(this.#sinkError)}`, { cause: this.#sinkError }) };
    }
    if (failure) throw failure.error;
  }
}

/** A command that did not run, or whose fate is unknown, as a result (126, like the seed's refusals). */
function refused(why: string): HarnessExecuteResult {
  return { stdout: "", stderr: `kube-harness: ${why}\n`, exitCode: 126 };
}

function message(e: unknown): string {
  return e instanceof Error ? e.message : String(e);
}
