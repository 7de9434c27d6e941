// kubeHarnessSandbox, the Little Harness factory, driven as the harness drives it (harnessTurn
// below) against a real `kube-harness worker` (KH_BIN; as root, like session.test.js) whose
// events go to a real `kube-harness session-log serve` on loopback, so retried steps replay.
import { test, before, after } from "node:test";
import assert from "node:assert/strict";
import { spawn } from "node:child_process";
import { randomBytes } from "node:crypto";
import { existsSync, mkdtempSync, mkdirSync, readFileSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { freePort } from "./support.js";
import { ApiError, Session, TransportError, kubeHarnessSandbox } from "../dist/index.js";

const TOKEN = "factory-token-0123";
const LOG_TOKEN = "factory-log-token-0123";
let tmp;
let logUrl;
let url; // the worker with a session log
let root; // its workspace root
const children = [];

async function waitFor(probe, what) {
  const deadline = Date.now() + 30000;
  for (;;) {
    try {
      if ((await fetch(probe)).status === 200) return;
    } catch {}
    assert.ok(Date.now() < deadline, `${what} did not become ready`);
    await new Promise((r) => setTimeout(r, 50));
  }
}

/** A worker on loopback over a fresh workspace; `extra` flags (the session log's). */
async function startWorker(name, extra = []) {
  const ws = join(tmp, name);
  for (const d of ["session", "artifacts", "persistent", ".agents/skills"]) mkdirSync(join(ws, d), { recursive: true });
  const port = await freePort();
  const child = spawn(process.env.KH_BIN, ["worker", "--session", name, "--token-file", join(tmp, "token"),
    "--listen", `127.0.0.1:${port}`, "--workspace-root", ws, ...extra], { stdio: "ignore" });
  children.push(child);
  const workerUrl = `http://127.0.0.1:${port}`;
  await waitFor(`${workerUrl}/readyz`, `worker ${name}`);
  return { url: workerUrl, root: ws, child };
}

before(async () => {
  assert.ok(process.env.KH_BIN, "KH_BIN must name the kube-harness binary");
  tmp = mkdtempSync(join(tmpdir(), "kh-ts-factory-"));
  writeFileSync(join(tmp, "token"), `${TOKEN}\n`);
  writeFileSync(join(tmp, "log-token"), `${LOG_TOKEN}\n`);
  const logPort = await freePort();
  logUrl = `http://127.0.0.1:${logPort}`;
  children.push(spawn(process.env.KH_BIN, ["session-log", "serve", "--store", "memory", "--listen", `127.0.0.1:${logPort}`,
    "--token-file", join(tmp, "log-token")], { stdio: "ignore" }));
  await waitFor(`${logUrl}/healthz`, "the session log");
  ({ url, root } = await startWorker("factory", ["--session-log-url", logUrl, "--session-log-token-file", join(tmp, "log-token")]));
});

after(() => {
  for (const child of children) child.kill("SIGKILL");
});

/**
 * What the harness does for one turn: calls the factory with its options (event sinks, replay
 * wiring), runs the turn's tool calls, and awaits dispose in a finally, on every exit path. A
 * dispose error never fails the turn: it becomes a harness.runtime.dispose.failed event.
 */
async function harnessTurn(factory, { replay, signal, emit, eventSinks } = {}, body) {
  const events = []; // what the harness traces, through an async sink (awaited, or the order breaks)
  const copy = []; // a second, synchronous sink
  const sandbox = await factory({
    workspace: { mounts: [] },
    replay,
    signal,
    emit: emit ?? (async (e) => {
      await new Promise((r) => setTimeout(r, Math.random() * 3));
      events.push(e);
    }),
    eventSinks: eventSinks ?? [(e) => copy.push(e)],
  });
  let value;
  let disposeFailed;
  try {
    value = await body(sandbox);
  } finally {
    try {
      await sandbox.dispose();
    } catch (e) {
      disposeFailed = e;
      events.push({ type: "harness.runtime.dispose.failed", data: { error: String(e) } });
    }
  }
  // Both sinks got every worker event, in the same order.
  if (!emit && !eventSinks) assert.deepEqual(copy, events.filter((e) => e.seq !== undefined));
  return { value, events, disposeFailed, sandbox };
}

/**
 * One turn's events, as the sinks got them: one turn id, `seq` gapless from 1 (nothing dropped,
 * nothing reordered), each command's events together from its `started` to its `completed`, the
 * turn's end (`harness.turn.usage`) last. Returns the commands' event blocks, in order.
 */
function commandBlocks(events) {
  assert.ok(events.length > 0);
  assert.equal(new Set(events.map((e) => e.turnId)).size, 1, "one turn");
  assert.deepEqual(events.map((e) => e.seq), events.map((_, i) => i + 1), `seq gapless: ${events.map((e) => `${e.seq} ${e.type}`).join(", ")}`);
  assert.equal(events.at(-1).type, "harness.turn.usage");
  const blocks = [];
  let open;
  for (const e of events.slice(0, -1)) {
    if (e.type === "harness.runtime.command.started") {
      assert.equal(open, undefined, "a command started inside another's events");
      open = [e];
    } else {
      assert.ok(open, `${e.type} outside a command`);
      open.push(e);
      if (e.type === "harness.runtime.command.completed") {
        assert.equal(e.data.command, open[0].data.command);
        blocks.push({ command: e.data.command, events: open, completed: e.data });
        open = undefined;
      }
    }
  }
  assert.equal(open, undefined, "a command without its completion");
  return blocks;
}

const fileEvents = (block) => block.events.filter((e) => e.type.startsWith("harness.file.")).map((e) => `${e.type.slice(13)} ${e.data.path}`);

/** Ends the shared turn of earlier commands without a turn id, so that a client's turn can open. */
async function endSharedTurn() {
  await new Session({ url, token: TOKEN }).endTurn();
}

test("two turns with parallel executes: cwd and env carry over, the turn is the client's, events in order, none dropped", async () => {
  await endSharedTurn();
  const factory = kubeHarnessSandbox({ url, token: TOKEN, client: "driver-1" });
  const other = new Session({ url, token: TOKEN });

  const first = await harnessTurn(factory, {}, async (sandbox) => {
    const setup = await sandbox.execute({ command: "mkdir -p /session/x && cd /session/x && export A=1" });
    await assert.rejects(other.exec("true"), (e) => e instanceof ApiError && e.code === "turn-busy" && e.message.includes("driver-1"));
    const parallel = await Promise.all([
      sandbox.execute({ command: "pwd; echo $A" }),
      sandbox.execute({ command: "echo one > one.txt && echo wrote-one" }),
      sandbox.execute({ command: "echo two > /session/x/two.txt && echo wrote-two >&2" }),
      sandbox.execute({ command: "exit 3" }),
    ]);
    return [setup, ...parallel];
  });
  assert.equal(first.disposeFailed, undefined);
  assert.deepEqual(first.value, [
    { stdout: "", stderr: "", exitCode: 0 },
    { stdout: "/session/x\n1\n", stderr: "", exitCode: 0 },
    { stdout: "wrote-one\n", stderr: "", exitCode: 0 },
    { stdout: "", stderr: "wrote-two\n", exitCode: 0 },
    { stdout: "", stderr: "", exitCode: 3 },
  ]);
  const blocks1 = commandBlocks(first.events);
  assert.deepEqual(blocks1.map((b) => b.command), [
    "mkdir -p /session/x && cd /session/x && export A=1",
    "pwd; echo $A",
    "echo one > one.txt && echo wrote-one",
    "echo two > /session/x/two.txt && echo wrote-two >&2",
    "exit 3",
  ]);
  assert.deepEqual(blocks1.map((b) => b.completed.exitCode), [0, 0, 0, 0, 3]);
  assert.deepEqual(fileEvents(blocks1[0]), ["created /session/x"]);
  assert.deepEqual(fileEvents(blocks1[2]), ["created /session/x/one.txt"]);
  assert.deepEqual(fileEvents(blocks1[3]), ["created /session/x/two.txt"]);
  assert.deepEqual([fileEvents(blocks1[1]), fileEvents(blocks1[4])], [[], []]);

  // The turn ended at dispose: another client may run again.
  assert.equal((await other.exec("echo free")).stdout, "free\n");
  await other.endTurn();

  const second = await harnessTurn(factory, {}, async (sandbox) => {
    const carried = await sandbox.execute({ command: "pwd; echo $A" });
    const parallel = await Promise.all([
      sandbox.execute({ command: "echo more >> one.txt; cat one.txt" }),
      sandbox.execute({ command: "rm two.txt" }),
      sandbox.execute({ command: "export B=2; cd /session" }),
    ]);
    const after = await sandbox.execute({ command: "pwd; echo $A$B" });
    return [carried, ...parallel, after];
  });
  assert.equal(second.disposeFailed, undefined);
  assert.deepEqual(second.value.map((r) => [r.stdout, r.exitCode]), [
    ["/session/x\n1\n", 0],
    ["one\nmore\n", 0],
    ["", 0],
    ["", 0],
    ["/session\n12\n", 0],
  ]);
  const blocks2 = commandBlocks(second.events);
  assert.equal(blocks2.length, 5);
  assert.notEqual(second.events[0].turnId, first.events[0].turnId);
  assert.deepEqual(fileEvents(blocks2[1]), ["modified /session/x/one.txt"]);
  assert.deepEqual(fileEvents(blocks2[2]), ["deleted /session/x/two.txt"]);
  assert.equal(readFileSync(join(root, "session/x/one.txt"), "utf8"), "one\nmore\n");
});

test("a retried step is answered from the session log, not run twice", async () => {
  await endSharedTurn();
  const runId = `run-${randomBytes(4).toString("hex")}`;
  const counter = `c-${runId}`;
  const count = `n=$(cat /session/${counter} 2>/dev/null || echo 0); echo $((n+1)) > /session/${counter}; cat /session/${counter}`;
  // The replay wiring: the run, and a step key for commands whose input names none.
  const replay = { runId, stepKey: ({ command }) => (command === `${count} # second` ? "count-2" : undefined) };
  const factory = kubeHarnessSandbox({ url, token: TOKEN });
  const onDisk = () => readFileSync(join(root, "session", counter), "utf8");

  const first = await harnessTurn(factory, { replay }, async (sandbox) => {
    const ran = await sandbox.execute({ command: count, stepKey: "count-1" });
    const retried = await sandbox.execute({ command: count, stepKey: "count-1" }); // the harness retries the step
    assert.equal(onDisk(), "1\n");
    const next = await sandbox.execute({ command: `${count} # second` }); // its key from replay.stepKey
    const unkeyed = await sandbox.execute({ command: "true" });
    return [ran, retried, next, unkeyed];
  });
  assert.deepEqual(first.value.map((r) => [r.stdout, r.exitCode]), [["1\n", 0], ["1\n", 0], ["2\n", 0], ["", 0]]);
  const blocks = commandBlocks(first.events);
  // Three commands ran (the retry delivered no events: nothing ran), with their step keys.
  assert.deepEqual(blocks.map((b) => [b.command, b.events[0].data.stepKey]), [
    [count, "count-1"],
    [`${count} # second`, "count-2"],
    ["true", undefined],
  ]);
  assert.equal(onDisk(), "2\n");

  // A fresh turn of the same run (a harness process restarted) replays both steps.
  const second = await harnessTurn(factory, { replay }, (sandbox) =>
    Promise.all([sandbox.execute({ command: count, stepKey: "count-1" }), sandbox.execute({ command: `${count} # second` })]),
  );
  assert.deepEqual(second.value.map((r) => r.stdout), ["1\n", "2\n"]);
  assert.deepEqual(second.events.map((e) => e.type), ["harness.turn.usage"]);
  assert.equal(onDisk(), "2\n");

  // The session log holds each step's start once, and the turns' ends under the run.
  const logged = await fetch(`${logUrl}/v1/runs/${runId}/events?after=0&limit=1000`, { headers: { authorization: `Bearer ${LOG_TOKEN}` } });
  assert.equal(logged.status, 200);
  const { events } = await logged.json();
  const starts = events.filter((e) => e.type === "harness.runtime.command.started").map((e) => e.payload.stepKey ?? null);
  assert.deepEqual(starts, ["count-1", "count-2", null]);
  assert.equal(events.filter((e) => e.type === "harness.turn.usage").length, 2);
});

test("execute never throws; a failed dispose still closes the attached session, then throws", async () => {
  const b = await startWorker("doomed");
  const attach = Session.attach;
  let closes = 0;
  const attached = [];
  Session.attach = async (name, options) => {
    attached.push([name, options]);
    const s = new Session({ url: b.url, token: TOKEN });
    s.close = async () => void closes++;
    return s;
  };
  try {
    const factory = kubeHarnessSandbox({ attach: { name: "doomed", namespace: "team" } });
    const turn = await harnessTurn(factory, {}, async (sandbox) => {
      const up = await sandbox.execute({ command: "echo up" });
      const refused = await sandbox.execute({ command: "true", timeoutMs: 1e9 }); // over --max-timeout: a 400
      b.child.kill("SIGKILL");
      await new Promise((r) => b.child.once("exit", r));
      const down = await Promise.all([sandbox.execute({ command: "echo down" }), sandbox.execute({ command: "echo down", stepKey: "k" })]);
      return [up, refused, ...down];
    });
    assert.deepEqual(attached, [["doomed", { namespace: "team" }]]);
    const [up, refused, ...down] = turn.value;
    assert.deepEqual(up, { stdout: "up\n", stderr: "", exitCode: 0 });
    assert.equal(refused.exitCode, 126);
    assert.match(refused.stderr, /^kube-harness: 400 bad-request: .*timeoutMs/);
    for (const r of down) {
      assert.equal(r.exitCode, 126);
      assert.match(r.stderr, /^kube-harness: cannot reach the worker/);
    }
    // The end failed: dispose threw it (the harness reported it), after closing the session.
    assert.ok(turn.disposeFailed instanceof TransportError, String(turn.disposeFailed));
    assert.equal(closes, 1);
    assert.deepEqual(turn.events.map((e) => e.type), [
      "harness.runtime.command.started",
      "harness.runtime.command.completed",
      "harness.runtime.dispose.failed",
    ]);
    // Disposing again does nothing; a disposed sandbox refuses commands.
    await turn.sandbox.dispose();
    assert.equal(closes, 1);
    const late = await turn.sandbox.execute({ command: "true" });
    assert.equal(late.exitCode, 126);
    assert.match(late.stderr, /disposed/);
  } finally {
    Session.attach = attach;
  }
});

test("a factory call on a busy session throws, after closing what it attached", async () => {
  await endSharedTurn();
  const attach = Session.attach;
  let closes = 0;
  Session.attach = async () => {
    const s = new Session({ url, token: TOKEN });
    s.close = async () => void closes++;
    return s;
  };
  const holder = new Session({ url, token: TOKEN });
  await holder.openTurn("holder");
  try {
    await assert.rejects(kubeHarnessSandbox({ attach: { name: "busy" } })({}), (e) => e instanceof ApiError && e.code === "turn-busy" && e.message.includes("holder"));
    assert.equal(closes, 1);
  } finally {
    Session.attach = attach;
    await holder.endTurn();
  }
});

test("a failing sink: the others get every event, the turn still ends, dispose throws", async () => {
  await endSharedTurn();
  const all = [];
  let calls = 0;
  const turn = await harnessTurn(
    kubeHarnessSandbox({ url, token: TOKEN }),
    {
      emit: () => {
        if (calls++ === 1) throw new Error("the trace store is full");
      },
      eventSinks: [async (e) => void all.push(e)],
    },
    (sandbox) => Promise.all([sandbox.execute({ command: "echo a > /session/sink-a" }), sandbox.execute({ command: "echo b" })]),
  );
  assert.deepEqual(turn.value.map((r) => r.exitCode), [0, 0]);
  assert.equal(calls, all.length);
  assert.deepEqual(commandBlocks(all).map(fileEvents), [["created /session/sink-a"], []]);
  assert.match(String(turn.disposeFailed), /an event sink failed: the trace store is full/);
  // The turn ended anyway.
  const other = new Session({ url, token: TOKEN });
  assert.equal((await other.exec("echo free")).stdout, "free\n");
  await other.endTurn();
});

test("an aborted turn refuses the commands not yet started", async () => {
  await endSharedTurn();
  const controller = new AbortController();
  const turn = await harnessTurn(kubeHarnessSandbox({ url, token: TOKEN }), { signal: controller.signal }, async (sandbox) => {
    const ran = await sandbox.execute({ command: "echo ran" });
    controller.abort();
    const refused = await sandbox.execute({ command: "echo no > /session/aborted" });
    return [ran, refused];
  });
  assert.deepEqual(turn.value[0], { stdout: "ran\n", stderr: "", exitCode: 0 });
  assert.equal(turn.value[1].exitCode, 126);
  assert.match(turn.value[1].stderr, /aborted/);
  assert.equal(existsSync(join(root, "session/aborted")), false);
  assert.deepEqual(commandBlocks(turn.events).map((b) => b.command), ["echo ran"]);
});
