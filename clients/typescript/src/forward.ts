/**
 * `kubectl port-forward`, in process: a loopback listener whose every connection the API server
 * carries to a pod's port (pods/portforward over a WebSocket), so no kubectl binary is needed.
 */

import { createServer, type Server, type Socket } from "node:net";
import { Writable } from "node:stream";
import * as k8s from "@kubernetes/client-node";
import { ClusterError } from "./errors.js";

/** What portForward resolves to (a `ws` WebSocket), as far as closing it goes. */
interface Tunnel {
  on(event: "close", listener: () => void): unknown;
  close(): void;
}

export class PortForward {
  readonly #server: Server;
  readonly #sockets = new Set<Socket>();
  readonly #tunnels = new Set<Tunnel>();
  /** Why the last connection could not be carried: the first thing a failed probe reports. */
  #lastError: unknown;
  #url = "";

  private constructor(kc: k8s.KubeConfig, namespace: string, pod: string, port: number) {
    this.#server = createServer((socket) => this.#carry(kc, namespace, pod, port, socket));
  }

  /** Listens on 127.0.0.1 and proves one request goes through, so a refusal shows up now. */
  static async open(kc: k8s.KubeConfig, namespace: string, pod: string, port: number, timeoutMs: number): Promise<PortForward> {
    const forward = new PortForward(kc, namespace, pod, port);
    await new Promise<void>((resolve, reject) => {
      forward.#server.once("error", reject);
      forward.#server.listen(0, "127.0.0.1", () => resolve());
    });
    const address = forward.#server.address();
    forward.#url = `http://127.0.0.1:${typeof address === "object" && address ? address.port : 0}`;
    try {
      // Any HTTP answer means the tunnel works; the worker's readiness was the session's.
      await fetch(`${forward.#url}/readyz`, { signal: AbortSignal.timeout(Math.max(timeoutMs, 10_000)) });
    } catch (e) {
      await forward.close();
      const why = forward.#lastError ?? e;
      // A refused upgrade reads "Unexpected server response: 403".
      const text = (why as { message?: string })?.message ?? String(why);
      const status = /Unexpected server response: (\d{3})/.exec(text)?.[1];
      throw new ClusterError(`cannot port-forward to pod ${namespace}/${pod}:${port}: ${text}`, status ? Number(status) : undefined, {
        cause: why,
      });
    }
    return forward;
  }

  /** `http://127.0.0.1:PORT`. */
  get url(): string {
    return this.#url;
  }

  /** Stops listening and drops every connection (an open stream ends with a transport error). */
  async close(): Promise<void> {
    const closed = new Promise<void>((resolve) => this.#server.close(() => resolve()));
    for (const socket of this.#sockets) socket.destroy();
    for (const tunnel of this.#tunnels) tunnel.close();
    await closed;
  }

  #carry(kc: k8s.KubeConfig, namespace: string, pod: string, port: number, socket: Socket): void {
    this.#sockets.add(socket);
    socket.on("error", () => {}); // the close that follows tidies up
    socket.on("close", () => this.#sockets.delete(socket));
    // The pod's own error channel (e.g. nothing listens on the port) explains a dead tunnel.
    const errors = new Writable({
      write: (chunk, _encoding, done) => {
        this.#lastError = new Error(String(chunk));
        done();
      },
    });
    new k8s.PortForward(kc).portForward(namespace, pod, [port], socket, errors, socket).then(
      (opened) => {
        const tunnel = opened as unknown as Tunnel;
        this.#tunnels.add(tunnel);
        tunnel.on("close", () => {
          this.#tunnels.delete(tunnel);
          socket.end();
        });
        if (socket.destroyed) tunnel.close();
        else socket.on("close", () => tunnel.close());
      },
      (e) => {
        this.#lastError = e;
        socket.destroy();
      },
    );
  }
}
