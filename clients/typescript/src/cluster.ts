/**
 * A HarnessSession's life on the cluster, through @kubernetes/client-node (no kubectl): create or
 * find it, wait for Ready, read its token, reach its worker, and delete it again.
 *
 * Waiting watches rather than polls, so a session is used the moment it is Ready and an idle
 * client costs the API server nothing; a client allowed only `get` still works, by reading.
 */

import { STATUS_CODES } from "node:http";
import * as k8s from "@kubernetes/client-node";
import { ClusterError, NotReadyError, SessionNotFound, SessionSuspended } from "./errors.js";
import { PortForward } from "./forward.js";
import { follow } from "./watch.js";

const GROUP = "kubeharness.dev";
const VERSION = "v1alpha1";
const PLURAL = "harnesssessions";
/** Set to the current time, it asks the operator to bring a hibernated session's worker back. */
const WAKE = "kubeharness.dev/wake-requested";
const WORKER_PORT = 8080;

export interface AttachOptions {
  /** Default: the kubeconfig context's namespace (in a pod, its service account's), else "default". */
  namespace?: string;
  /** How long to wait for Ready, in milliseconds (default 180000). */
  timeoutMs?: number;
  /** Default: `loadFromDefault()` (KUBECONFIG, ~/.kube/config, or in-cluster). */
  kubeConfig?: k8s.KubeConfig;
  /**
   * How to reach the worker: "in-cluster" (status.address: needs a pod that spec.access admits),
   * "port-forward" (through the API server), or "auto" (default): in-cluster when running in a
   * pod (KUBERNETES_SERVICE_HOST set, KUBECONFIG unset) and the session has an address.
   */
  address?: "auto" | "in-cluster" | "port-forward";
}

export interface CreateOptions extends AttachOptions {
  /** The HarnessSession's spec (docs/operator.md). */
  spec?: Record<string, unknown>;
  /** spec.workerTier. */
  tier?: string;
  /** spec.lifetime.ttlSeconds: the cluster removes a session its client forgot. */
  ttlSeconds?: number;
  /** Default "agent-". */
  generateName?: string;
  /** Keep the session when closing (default false: close deletes it). */
  keep?: boolean;
  labels?: Record<string, string>;
  /** How long close waits for the session and what it owns to be gone (default 120000). */
  deleteTimeoutMs?: number;
}

interface Condition {
  type: string;
  status: string;
  reason?: string;
  message?: string;
}

interface HarnessSession {
  metadata: { name: string; namespace?: string; uid: string; resourceVersion: string; generation?: number };
  spec?: { suspend?: boolean };
  status?: {
    phase?: string;
    conditions?: Condition[];
    workerPod?: string;
    address?: string;
    tokenSecret?: string;
    observedGeneration?: number;
  };
}

/** A Ready session's worker, and what closing lets go. */
export interface Reached {
  name: string;
  namespace: string;
  url: string;
  token: string;
  /** Closes the port-forward; deletes the session if this client made it and does not keep it. */
  close(): Promise<void>;
}

/** Creates a HarnessSession and reaches it; deletes it again if that fails (unless `keep`). */
export async function createSession(options: CreateOptions): Promise<Reached> {
  const api = new Api(options);
  const spec: Record<string, unknown> = { ...options.spec };
  if (options.tier !== undefined) spec.workerTier = options.tier;
  if (options.ttlSeconds !== undefined) {
    spec.lifetime = { ...(spec.lifetime as object | undefined), ttlSeconds: options.ttlSeconds };
  }
  const body = {
    apiVersion: `${GROUP}/${VERSION}`,
    kind: "HarnessSession",
    metadata: { generateName: options.generateName ?? "agent-", ...(options.labels && { labels: options.labels }) },
    spec,
  };
  const made: HarnessSession = await api.call("create a HarnessSession", () =>
    api.objects.createNamespacedCustomObject({ group: GROUP, version: VERSION, namespace: api.namespace, plural: PLURAL, body }),
  );
  const { name, uid } = made.metadata;
  const deleteTimeoutMs = options.deleteTimeoutMs ?? 120_000;
  const remove = options.keep ? async () => {} : () => api.remove(name, uid, deleteTimeoutMs);
  try {
    return await reach(api, name, options, remove);
  } catch (e) {
    // Best effort: the error that matters is why it never became usable.
    await remove().catch(() => {});
    throw e;
  }
}

/** Reaches an existing HarnessSession; closing never deletes it. */
export async function attachSession(name: string, options: AttachOptions): Promise<Reached> {
  return reach(new Api(options), name, options, async () => {});
}

async function reach(api: Api, name: string, options: AttachOptions, remove: () => Promise<void>): Promise<Reached> {
  const timeoutMs = options.timeoutMs ?? 180_000;
  const deadline = Date.now() + timeoutMs;
  const session = await api.ready(name, deadline, timeoutMs);
  const status = session.status!;
  if (!status.tokenSecret) throw new ClusterError(`HarnessSession ${api.namespace}/${name} names no status.tokenSecret`);
  const secret = await api.call(`read the Secret ${status.tokenSecret}`, () =>
    api.core.readNamespacedSecret({ name: status.tokenSecret!, namespace: api.namespace }),
  );
  const encoded = secret.data?.token;
  if (!encoded) throw new ClusterError(`the Secret ${api.namespace}/${status.tokenSecret} has no data.token`);
  const token = Buffer.from(encoded, "base64").toString("utf8").trim();
  const mode = options.address ?? "auto";
  const inPod = Boolean(process.env.KUBERNETES_SERVICE_HOST) && !process.env.KUBECONFIG;
  if (mode === "in-cluster" || (mode === "auto" && inPod && status.address)) {
    if (!status.address) throw new ClusterError(`HarnessSession ${api.namespace}/${name} has no status.address`);
    return { name, namespace: api.namespace, url: status.address, token, close: remove };
  }
  const forward = await PortForward.open(api.kc, api.namespace, status.workerPod!, WORKER_PORT, deadline - Date.now());
  return {
    name,
    namespace: api.namespace,
    url: forward.url,
    token,
    close: async () => {
      await forward.close();
      await remove();
    },
  };
}

/** One namespace's HarnessSessions through one kubeconfig. */
class Api {
  readonly kc: k8s.KubeConfig;
  readonly namespace: string;
  readonly objects: k8s.CustomObjectsApi;
  readonly core: k8s.CoreV1Api;

  constructor(options: AttachOptions) {
    this.kc = options.kubeConfig ?? defaultKubeConfig();
    this.namespace = options.namespace ?? this.kc.getContextObject(this.kc.getCurrentContext())?.namespace ?? "default";
    this.objects = this.kc.makeApiClient(k8s.CustomObjectsApi);
    this.core = this.kc.makeApiClient(k8s.CoreV1Api);
  }

  /** Runs one API request; its failure becomes a ClusterError carrying the HTTP status. */
  async call<T>(what: string, request: () => Promise<T>): Promise<T> {
    try {
      return await request();
    } catch (e) {
      throw clusterError(what, e);
    }
  }

  /** The session as stored, or null when there is none. */
  async read(name: string): Promise<HarnessSession | null> {
    try {
      return await this.objects.getNamespacedCustomObject({ group: GROUP, version: VERSION, namespace: this.namespace, plural: PLURAL, name });
    } catch (e) {
      if (e instanceof k8s.ApiException && e.code === 404) return null;
      throw clusterError(`read HarnessSession ${this.namespace}/${name}`, e);
    }
  }

  /** Waits for Ready (Ready True and a worker pod), waking a hibernated session once. */
  async ready(name: string, deadline: number, timeoutMs: number): Promise<HarnessSession> {
    let woken = false;
    const ns = this.namespace;
    return this.observe(
      name,
      deadline,
      async (s) => {
        if (!s) throw new SessionNotFound(ns, name);
        const status = s.status ?? {};
        if (s.spec?.suspend) throw new SessionSuspended(ns, name, "suspended");
        if (status.phase === "Expired" && status.observedGeneration === s.metadata.generation) {
          throw new SessionSuspended(ns, name, "expired");
        }
        if (readyCondition(s)?.status === "True" && status.workerPod) return s;
        if (status.phase === "Hibernated" && !woken) {
          woken = true;
          await this.call(`wake HarnessSession ${ns}/${name}`, () =>
            this.objects.patchNamespacedCustomObject(
              { group: GROUP, version: VERSION, namespace: ns, plural: PLURAL, name, body: { metadata: { annotations: { [WAKE]: new Date().toISOString() } } } },
              k8s.setHeaderOptions("Content-Type", k8s.PatchStrategy.MergePatch),
            ),
          );
        }
        return undefined;
      },
      (s) => {
        const ready = s && readyCondition(s);
        return new NotReadyError(ns, name, s?.status?.phase, ready?.reason, ready?.message, timeoutMs);
      },
    );
  }

  /**
   * Deletes the session (Foreground: its pods, claim and secret go first) if it is still the one
   * with `uid`, and waits until it is gone.
   */
  async remove(name: string, uid: string, timeoutMs: number): Promise<void> {
    try {
      await this.objects.deleteNamespacedCustomObject({
        group: GROUP,
        version: VERSION,
        namespace: this.namespace,
        plural: PLURAL,
        name,
        propagationPolicy: "Foreground",
        body: { preconditions: { uid } },
      });
    } catch (e) {
      // 404: gone already; 409: the uid precondition failed, so this one is gone too.
      if (e instanceof k8s.ApiException && (e.code === 404 || e.code === 409)) return;
      throw clusterError(`delete HarnessSession ${this.namespace}/${name}`, e);
    }
    await this.observe(
      name,
      Date.now() + timeoutMs,
      async (s) => (!s || s.metadata.uid !== uid ? true : undefined),
      () => new ClusterError(`HarnessSession ${this.namespace}/${name} is still there ${timeoutMs / 1000} s after its deletion`),
    );
  }

  /** Follows the session (null: gone) until `step` returns a value: see follow(). */
  observe<T>(
    name: string,
    deadline: number,
    step: (s: HarnessSession | null) => Promise<T | undefined>,
    late: (s: HarnessSession | null) => Error,
  ): Promise<T> {
    const path = `/apis/${GROUP}/${VERSION}/namespaces/${this.namespace}/${PLURAL}`;
    return follow(this.kc, path, name, () => this.read(name), deadline, step, late);
  }
}

function defaultKubeConfig(): k8s.KubeConfig {
  const kc = new k8s.KubeConfig();
  kc.loadFromDefault();
  return kc;
}

function readyCondition(s: HarnessSession): Condition | undefined {
  return s.status?.conditions?.find((c) => c.type === "Ready");
}

function clusterError(what: string, e: unknown): ClusterError {
  if (e instanceof k8s.ApiException) {
    let detail = typeof e.body === "string" ? e.body : e.body === undefined ? "" : JSON.stringify(e.body);
    try {
      detail = JSON.parse(detail).message ?? detail; // a Status object's message
    } catch {}
    return new ClusterError(`cannot ${what}: ${detail || STATUS_CODES[e.code] || "no detail"}`, e.code, { cause: e });
  }
  const cause = (e as { cause?: unknown })?.cause;
  return new ClusterError(`cannot ${what}: ${String(e)}${cause ? ` (${String(cause)})` : ""}`, undefined, { cause: e });
}
