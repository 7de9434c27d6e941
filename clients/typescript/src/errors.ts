/** The SDK's errors: one base class, so a caller can catch everything the SDK throws at once. */

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

/** The Kubernetes API refused or failed a request; `status` is its HTTP status when it answered. */
export class ClusterError extends KubeHarnessError {
  constructor(
    message: string,
    readonly status?: number,
    options?: { cause?: unknown },
  ) {
    super(status === undefined ? message : `${message} (HTTP ${status})`, options);
    this.name = "ClusterError";
  }
}

/** No HarnessSession of that name in the namespace. */
export class SessionNotFound extends KubeHarnessError {
  constructor(
    readonly namespace: string,
    readonly sessionName: string,
  ) {
    super(`HarnessSession ${namespace}/${sessionName} does not exist`);
    this.name = "SessionNotFound";
  }
}

/**
 * The session will not become Ready by waiting: `spec.suspend` is true (waking it would go
 * against its spec) or its TTL passed (`reason` "expired").
 */
export class SessionSuspended extends KubeHarnessError {
  constructor(
    readonly namespace: string,
    readonly sessionName: string,
    readonly reason: "suspended" | "expired",
  ) {
    super(
      reason === "expired"
        ? `HarnessSession ${namespace}/${sessionName} has expired (raise spec.lifetime.ttlSeconds to restart it)`
        : `HarnessSession ${namespace}/${sessionName} is suspended (spec.suspend is true)`,
    );
    this.name = "SessionSuspended";
  }
}

/** The session was not Ready in time: where it stood, and why by its Ready condition. */
export class NotReadyError extends KubeHarnessError {
  constructor(
    readonly namespace: string,
    readonly sessionName: string,
    readonly phase: string | undefined,
    readonly reason: string | undefined,
    readonly detail: string | undefined,
    timeoutMs: number,
  ) {
    super(
      `HarnessSession ${namespace}/${sessionName} is not Ready after ${timeoutMs / 1000} s: ` +
        `phase ${phase ?? "(none)"}, Ready ${reason ?? "(no reason)"}${detail ? `: ${detail}` : ""}`,
    );
    this.name = "NotReadyError";
  }
}
