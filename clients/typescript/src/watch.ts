/**
 * Following one object by name: a read, then a watch from that read's resourceVersion, so a
 * change is seen the moment it happens and an idle wait costs the API server nothing.
 */

import * as k8s from "@kubernetes/client-node";

/** How often a client allowed only `get` (its watch refused with 403) reads instead. */
const POLL_MS = 500;

interface Stored {
  metadata: { resourceVersion: string };
}

/**
 * Reads the object (`read`: null when there is none), then watches the collection at `path`
 * for it, handing every state to `step` (null: gone) until `step` returns a value. A watch that
 * ends or says 410 Gone starts over from a fresh read; one refused with 403 turns into reading
 * every 500 ms. After `deadline`, throws `late(last state seen)`.
 */
export async function follow<S extends Stored, T>(
  kc: k8s.KubeConfig,
  path: string,
  name: string,
  read: () => Promise<S | null>,
  deadline: number,
  step: (s: S | null) => Promise<T | undefined>,
  late: (s: S | null) => Error,
): Promise<T> {
  let watchable = true;
  for (;;) {
    let last = await read();
    let done = await step(last);
    if (done !== undefined) return done;
    if (Date.now() >= deadline) throw late(last);
    if (!watchable || !last) {
      await sleep(Math.min(POLL_MS, deadline - Date.now()));
      continue;
    }
    const events = new Events();
    // Not awaited: watch() resolves only once the answer's headers came, and the deadline rules.
    let watch: AbortController | undefined;
    let finished = false;
    new k8s.Watch(kc)
      .watch(
        path,
        { fieldSelector: `metadata.name=${name}`, resourceVersion: last.metadata.resourceVersion, allowWatchBookmarks: true },
        (type, object) => events.push({ type, object }),
        (error) => events.push({ type: "END", object: error }),
      )
      .then(
        (controller) => (finished ? controller.abort() : (watch = controller)),
        (error) => events.push({ type: "END", object: error }),
      );
    try {
      for (;;) {
        const event = await events.next(deadline - Date.now());
        if (!event) throw late(last);
        if (event.type === "END") {
          const status = (event.object as { statusCode?: number } | null)?.statusCode;
          if (status === 403) watchable = false;
          else if (event.object) await sleep(Math.min(POLL_MS, deadline - Date.now())); // no hot loop on a failing watch
          break;
        }
        if (event.type === "ERROR") break; // 410 Gone and the like: start over from a fresh read
        if (event.type === "BOOKMARK") continue;
        last = event.type === "DELETED" ? null : (event.object as S);
        done = await step(last);
        if (done !== undefined) return done;
      }
    } finally {
      finished = true;
      watch?.abort();
    }
  }
}

/** Watch events as they come, taken one at a time. */
class Events {
  readonly #queue: { type: string; object: unknown }[] = [];
  #wake?: () => void;

  push(event: { type: string; object: unknown }): void {
    this.#queue.push(event);
    this.#wake?.();
  }

  /** The next event, or undefined when none comes within `ms`. */
  async next(ms: number): Promise<{ type: string; object: unknown } | undefined> {
    if (this.#queue.length === 0 && ms > 0) {
      let timer: NodeJS.Timeout | undefined;
      await new Promise<void>((resolve) => {
        this.#wake = resolve;
        timer = setTimeout(resolve, ms);
      });
      clearTimeout(timer);
      this.#wake = undefined;
    }
    return this.#queue.shift();
  }
}

function sleep(ms: number): Promise<void> {
  return new Promise((resolve) => setTimeout(resolve, Math.max(0, ms)));
}
