// The SDK against a real cluster (KUBECONFIG), through @kubernetes/client-node alone: skipped
// unless KH_E2E_NAMESPACE is set. The worker API tests attach to the HarnessSession named by
// KH_E2E_SESSION (made by the cluster e2e); the lifecycle tests create and delete their own.
// With KH_E2E_NO_KUBECTL=1 the run also proves there is no kubectl on PATH to lean on.
import { test, before, after } from "node:test";
import assert from "node:assert/strict";
import { randomBytes } from "node:crypto";
import { existsSync } from "node:fs";
import { delimiter, join } from "node:path";
import ts from "typescript";
import * as k8s from "@kubernetes/client-node";
import { ApiError, Session, TransportError, kubeHarnessSandbox } from "../dist/index.js";

const namespace = process.env.KH_E2E_NAMESPACE;
const sessionName = process.env.KH_E2E_SESSION;
const options = { skip: namespace ? false : "KH_E2E_NAMESPACE is not set (the cluster e2e)" };
const attached = { skip: namespace && sessionName ? false : "KH_E2E_NAMESPACE and KH_E2E_SESSION are not set (the cluster e2e)" };
const SPEC = { workerTier: "tier0", workspace: { size: "1Gi" }, runtime: { python: true, javascript: true, network: false } };
// A directory of the session's workspace of this run alone.
const scratch = `/session/ts-e2e/${randomBytes(6).toString("hex")}`;
let session;

before(async () => {
  if (!attached.skip) session = await Session.attach(sessionName, { namespace });
});

after(async () => {
  await session?.close();
});

test("no kubectl on PATH", { skip: process.env.KH_E2E_NO_KUBECTL === "1" ? false : "KH_E2E_NO_KUBECTL is not 1" }, () => {
  const found = (process.env.PATH ?? "").split(delimiter).filter((dir) => dir && existsSync(join(dir, "kubectl")));
  assert.deepEqual(found, []);
});

test("attach reaches the session and does not own it", attached, () => {
  assert.equal(session.name, sessionName);
  assert.equal(session.namespace, namespace);
});

test("exec", attached, async () => {
  const r = await session.exec("echo hi");
  assert.deepEqual([r.stdout, r.stderr, r.exitCode, r.tier, r.type], ["hi\n", "", 0, 0, "result"]);
});

test("stream yields chunks, then the result", attached, async () => {
  const items = [];
  for await (const item of session.stream("echo one; sleep 1; echo two >&2")) items.push(item);
  assert.ok(items.some((i) => i.type === "stdout" && i.data === "one\n"), JSON.stringify(items));
  assert.ok(items.some((i) => i.type === "stderr" && i.data === "two\n"), JSON.stringify(items));
  const result = items.at(-1);
  assert.deepEqual([result.type, result.stdout, result.stderr, result.exitCode], ["result", "one\n", "two\n", 0]);
});

test("writeFile and readFile round-trip bytes", attached, async () => {
  const data = new Uint8Array(70000).map((_, i) => i % 256);
  const w = await session.writeFile(`${scratch}/data.bin`, data);
  assert.deepEqual([w.change, w.bytes], ["created", data.length]);
  assert.deepEqual(await session.readFile(`${scratch}/data.bin`), data);
});

test("endTurn and status", attached, async () => {
  await session.exec(`mkdir -p ${scratch} && echo a > ${scratch}/a.txt`);
  const turn = await session.endTurn();
  assert.ok(turn.commands >= 1);
  assert.ok(turn.fileChanges.some((c) => c.path === `${scratch}/a.txt`), JSON.stringify(turn.fileChanges));
  assert.equal(await session.endTurn(), null);
  const status = await session.status();
  assert.equal(status.ready, true);
  assert.equal(typeof status.session, "string");
});

test("kubeHarnessSandbox executes in the session", attached, async () => {
  await session.endTurn(); // the shared turn of the tests above
  const sandbox = await kubeHarnessSandbox({ session })({});
  assert.deepEqual(await sandbox.execute({ command: "echo hi" }), { stdout: "hi\n", stderr: "", exitCode: 0 });
  await sandbox.dispose();
});

test("create, use and close: the session and all it owned are gone", options, async () => {
  const s = await Session.create({ namespace, spec: SPEC });
  const uid = (await harnessSession(s.name)).metadata.uid;
  try {
    assert.equal((await s.exec("echo hi")).stdout, "hi\n");
    const data = new TextEncoder().encode("round trip\n");
    await s.writeFile("/session/rt.txt", data);
    assert.deepEqual(await s.readFile("/session/rt.txt"), data);
  } finally {
    await s.close();
  }
  await assertGone(s.name, uid);
});

test("await using deletes the session when its block throws", options, async () => {
  let name;
  await assert.rejects(
    usingBlock({ namespace, spec: SPEC }, async (s) => {
      name = s.name;
      assert.equal((await s.exec("echo in")).stdout, "in\n");
      throw new Error("the block failed");
    }),
    /the block failed/,
  );
  assert.ok(name);
  await assert.rejects(harnessSession(name), (e) => e instanceof k8s.ApiException && e.code === 404);
});

function kubeConfig() {
  const kc = new k8s.KubeConfig();
  kc.loadFromDefault();
  return kc;
}

function harnessSession(name) {
  return kubeConfig()
    .makeApiClient(k8s.CustomObjectsApi)
    .getNamespacedCustomObject({ group: "kubeharness.dev", version: "v1alpha1", namespace, plural: "harnesssessions", name });
}

/** The HarnessSession is gone, and within 120 s so is every object it owned or labelled. */
async function assertGone(name, uid) {
  await assert.rejects(harnessSession(name), (e) => e instanceof k8s.ApiException && e.code === 404);
  const core = kubeConfig().makeApiClient(k8s.CoreV1Api);
  const kinds = {
    pod: () => core.listNamespacedPod({ namespace }),
    secret: () => core.listNamespacedSecret({ namespace }),
    service: () => core.listNamespacedService({ namespace }),
    persistentvolumeclaim: () => core.listNamespacedPersistentVolumeClaim({ namespace }),
    configmap: () => core.listNamespacedConfigMap({ namespace }),
  };
  const deadline = Date.now() + 120_000;
  for (;;) {
    const left = [];
    for (const [kind, list] of Object.entries(kinds)) {
      for (const o of (await list()).items) {
        const owned = (o.metadata.ownerReferences ?? []).some((r) => r.uid === uid);
        if (owned || o.metadata.labels?.["kubeharness.dev/session"] === name) left.push(`${kind}/${o.metadata.name}`);
      }
    }
    if (left.length === 0) return;
    assert.ok(Date.now() < deadline, `still there 120 s after close: ${left.join(", ")}`);
    await new Promise((r) => setTimeout(r, 2000));
  }
}

/** `await using` as a TypeScript user writes it (tsc lowers it for Node 20, which lacks it). */
async function usingBlock(createOptions, body) {
  const source = "export async function run(Session, options, body) { await using s = await Session.create(options); await body(s); }";
  const js = ts.transpileModule(source, { compilerOptions: { target: ts.ScriptTarget.ES2022, module: ts.ModuleKind.ESNext } }).outputText;
  const { run } = await import(`data:text/javascript;base64,${Buffer.from(js).toString("base64")}`);
  return run(Session, createOptions, body);
}

test("two clients, one turn: the second gets turn-busy", attached, async () => {
  const other = await Session.attach(sessionName, { namespace });
  try {
    await session.endTurn();
    await session.openTurn("ts-e2e-client-a");
    assert.equal((await session.exec("echo mine")).stdout, "mine\n");
    await assert.rejects(other.exec("echo theirs"), (e) => e instanceof ApiError && e.status === 409 && e.code === "turn-busy" && e.message.includes("ts-e2e-client-a"));
    assert.equal((await session.endTurn()).commands, 1);
    assert.equal((await other.exec("echo free")).stdout, "free\n");
    await other.endTurn();
  } finally {
    await other.close();
  }
});

// The Little Harness factory as the harness drives it (test/factory.test.js has the loopback
// version): a turn per factory call, each attaching to the session, events to the sinks, dispose
// in a finally. Leaves no turn open: the other tests use this session's turns.
test("kubeHarnessSandbox: two turns, parallel executes, a replayed step, a failed dispose", attached, async () => {
  const dir = `${scratch}/factory`;
  const runId = `ts-e2e-${randomBytes(4).toString("hex")}`;
  const count = `n=$(cat ${dir}/counter 2>/dev/null || echo 0); echo $((n+1)) > ${dir}/counter; cat ${dir}/counter`;
  const factory = kubeHarnessSandbox({ attach: { name: sessionName, namespace }, client: "ts-e2e-factory" });
  const turn = async (body) => {
    const events = [];
    const sandbox = await factory({ replay: { runId }, emit: async (e) => void events.push(e) });
    let value;
    let disposeFailed;
    try {
      value = await body(sandbox);
    } finally {
      await sandbox.dispose().catch((e) => (disposeFailed = e));
    }
    assert.equal(disposeFailed, undefined);
    return { value, blocks: commandBlocks(events) };
  };
  await session.endTurn(); // the shared turn of the tests above

  const first = await turn(async (sandbox) => {
    const setup = await sandbox.execute({ command: `mkdir -p ${dir} && cd ${dir} && export KH_F=1` });
    await assert.rejects(session.exec("true"), (e) => e instanceof ApiError && e.code === "turn-busy" && e.message.includes("ts-e2e-factory"));
    const parallel = await Promise.all([
      sandbox.execute({ command: "pwd; echo $KH_F" }),
      sandbox.execute({ command: "echo one > one.txt" }),
      sandbox.execute({ command: "echo two > two.txt; exit 4" }),
    ]);
    return [setup, ...parallel];
  });
  assert.deepEqual(first.value.map((r) => [r.stdout, r.exitCode]), [["", 0], [`${dir}\n1\n`, 0], ["", 0], ["", 4]]);
  assert.ok(fileEvents(first.blocks[0]).includes(`created ${dir}`), JSON.stringify(first.blocks[0].events));
  assert.deepEqual(first.blocks.slice(1).map((b) => [b.completed.exitCode, fileEvents(b)]), [
    [0, []],
    [0, [`created ${dir}/one.txt`]],
    [4, [`created ${dir}/two.txt`]],
  ]);

  const second = await turn(async (sandbox) => {
    const ran = await sandbox.execute({ command: count, stepKey: "count" });
    const retried = await sandbox.execute({ command: count, stepKey: "count" });
    const checks = await Promise.all([sandbox.execute({ command: "cat counter" }), sandbox.execute({ command: "pwd; echo $KH_F" })]);
    return [ran, retried, ...checks];
  });
  assert.deepEqual(second.value.map((r) => [r.stdout, r.exitCode]), [["1\n", 0], ["1\n", 0], ["1\n", 0], [`${dir}\n1\n`, 0]]);
  // The retry was answered from the session log: three commands ran, not four.
  assert.deepEqual(second.blocks.map((b) => [b.command, b.events[0].data.stepKey]), [[count, "count"], ["cat counter", undefined], ["pwd; echo $KH_F", undefined]]);

  // A factory that cannot reach its session throws; a turn whose worker became unreachable
  // answers 126 and its dispose throws (here: the port-forward of its session closed).
  await assert.rejects(kubeHarnessSandbox({ url: "http://127.0.0.1:9", token: "x" })({}), (e) => e instanceof TransportError);
  const lost = await Session.attach(sessionName, { namespace, address: "port-forward" });
  const sandbox = await kubeHarnessSandbox({ session: lost, client: "ts-e2e-lost" })({});
  const turnId = lost.turnId;
  try {
    await lost.close();
    const r = await sandbox.execute({ command: "true" });
    assert.equal(r.exitCode, 126);
    assert.match(r.stderr, /^kube-harness: cannot reach the worker/);
    await assert.rejects(sandbox.dispose(), (e) => e instanceof TransportError);
  } finally {
    const again = await Session.attach(sessionName, { namespace });
    again.turnId = turnId;
    await again.endTurn();
    await again.close();
  }
});

/** A turn's events: `seq` gapless from 1, each command's events together, the turn's end last. */
function commandBlocks(events) {
  assert.deepEqual(events.map((e) => e.seq), events.map((_, i) => i + 1), events.map((e) => `${e.seq} ${e.type}`).join(", "));
  assert.equal(events.at(-1).type, "harness.turn.usage");
  const blocks = [];
  for (const e of events.slice(0, -1)) {
    if (e.type === "harness.runtime.command.started") blocks.push({ command: e.data.command, events: [e] });
    else blocks.at(-1).events.push(e);
    if (e.type === "harness.runtime.command.completed") {
      assert.equal(e.data.command, blocks.at(-1).command);
      blocks.at(-1).completed = e.data;
    }
  }
  assert.ok(blocks.every((b) => b.completed && b.events.filter((e) => e.type === "harness.runtime.command.started").length === 1));
  return blocks;
}

const fileEvents = (block) => block.events.filter((e) => e.type.startsWith("harness.file.")).map((e) => `${e.type.slice(13)} ${e.data.path}`);
