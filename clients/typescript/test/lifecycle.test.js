// Session.create / Session.attach / close against a fake Kubernetes API server (node:http on
// loopback, plain HTTP, a token user) that keeps HarnessSessions, streams watches and carries
// pods/portforward WebSockets, with a real `kube-harness worker` (KH_BIN) behind status.address.
import { test, before, after } from "node:test";
import assert from "node:assert/strict";
import { spawn } from "node:child_process";
import { createServer } from "node:http";
import { connect, createServer as createTcpServer } from "node:net";
import { randomBytes, randomUUID } from "node:crypto";
import { mkdtempSync, mkdirSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { WebSocketServer } from "ws";
import ts from "typescript";
import * as k8s from "@kubernetes/client-node";
import { Session, ClusterError, NotReadyError, SessionNotFound, SessionSuspended, KubeHarnessError } from "../dist/index.js";

const NS = "team";
const TOKEN = "lifecycle-token-0123";
const KUBE_TOKEN = "kube-token";
const BASE = `/apis/kubeharness.dev/v1alpha1/namespaces/${NS}/harnesssessions`;
let worker;
let workerPort;

/** An API server holding HarnessSessions of one namespace; hooks script the operator's part. */
class FakeKube {
  objects = new Map();
  history = [];
  watchers = new Set();
  requests = [];
  rv = 100;
  forbidWatch = false;
  forbidCreate = false;
  forbidForward = false;
  /** Answer the first watch with ERROR 410 Gone. */
  goneOnce = false;
  onCreate = () => {};
  onPatch = () => {};
  /** Default: the object goes 100 ms after a deletion (as Foreground does once dependents are). */
  onDelete = (name) => setTimeout(() => this.remove(name), 100);

  async start() {
    this.server = createServer((req, res) => this.#serve(req, res));
    const wss = new WebSocketServer({ noServer: true, handleProtocols: (p) => (p.has("v4.channel.k8s.io") ? "v4.channel.k8s.io" : false) });
    this.server.on("upgrade", (req, socket, head) => {
      this.requests.push({ method: "UPGRADE", url: req.url });
      const m = /^\/api\/v1\/namespaces\/[^/]+\/pods\/[^/]+\/portforward\?ports=(\d+)$/.exec(req.url);
      if (!m || this.forbidForward || req.headers.authorization !== `Bearer ${KUBE_TOKEN}`) return socket.end("HTTP/1.1 403 Forbidden\r\n\r\n");
      wss.handleUpgrade(req, socket, head, (ws) => forwardTo(ws, Number(m[1])));
    });
    await new Promise((r) => this.server.listen(0, "127.0.0.1", r));
    const kc = new k8s.KubeConfig();
    kc.loadFromOptions({
      clusters: [{ name: "fake", server: `http://127.0.0.1:${this.server.address().port}`, skipTLSVerify: true }],
      users: [{ name: "agent", token: KUBE_TOKEN }],
      contexts: [{ name: "fake", cluster: "fake", user: "agent", namespace: NS }],
      currentContext: "fake",
    });
    return kc;
  }

  stop() {
    for (const w of this.watchers) w.res.destroy();
    this.server.closeAllConnections();
    this.server.close();
  }

  put(obj) {
    obj.metadata = { namespace: NS, uid: randomUUID(), generation: 1, ...obj.metadata };
    this.#emit("ADDED", obj);
    return obj;
  }

  update(name, change) {
    const obj = this.objects.get(name);
    if (!obj) return;
    change(obj);
    this.#emit("MODIFIED", obj);
  }

  remove(name) {
    const obj = this.objects.get(name);
    if (obj) this.#emit("DELETED", obj);
  }

  count(method, pred = () => true) {
    return this.requests.filter((r) => r.method === method && pred(r)).length;
  }

  #emit(type, obj) {
    obj.metadata.resourceVersion = String(++this.rv);
    if (type === "DELETED") this.objects.delete(obj.metadata.name);
    else this.objects.set(obj.metadata.name, obj);
    const event = { type, object: structuredClone(obj) };
    this.history.push(event);
    for (const w of this.watchers) if (w.name === obj.metadata.name) w.res.write(`${JSON.stringify(event)}\n`);
  }

  async #serve(req, res) {
    let text = "";
    for await (const chunk of req) text += chunk;
    const url = new URL(req.url, "http://fake");
    const body = text ? JSON.parse(text) : undefined;
    this.requests.push({ method: req.method, url, body, type: req.headers["content-type"] });
    const send = (code, obj) => {
      res.writeHead(code, { "content-type": "application/json" });
      res.end(JSON.stringify(obj));
    };
    const status = (code, message) => send(code, { kind: "Status", apiVersion: "v1", status: "Failure", code, message });
    if (req.headers.authorization !== `Bearer ${KUBE_TOKEN}`) return status(401, "Unauthorized");
    const secret = /^\/api\/v1\/namespaces\/[^/]+\/secrets\/(.+)$/.exec(url.pathname);
    if (secret && req.method === "GET") return send(200, { data: { token: Buffer.from(`${TOKEN}\n`).toString("base64") } });
    if (url.pathname === BASE && req.method === "GET" && url.searchParams.get("watch") === "true") {
      if (this.forbidWatch) return status(403, "watch is forbidden");
      const name = /^metadata\.name=(.+)$/.exec(url.searchParams.get("fieldSelector") ?? "")?.[1];
      res.writeHead(200, { "content-type": "application/json" });
      res.flushHeaders();
      if (this.goneOnce) {
        this.goneOnce = false;
        return res.end(`${JSON.stringify({ type: "ERROR", object: { kind: "Status", code: 410, reason: "Expired" } })}\n`);
      }
      const from = Number(url.searchParams.get("resourceVersion") ?? 0);
      for (const e of this.history) {
        if (e.object.metadata.name === name && Number(e.object.metadata.resourceVersion) > from) res.write(`${JSON.stringify(e)}\n`);
      }
      const watcher = { name, res };
      this.watchers.add(watcher);
      res.on("close", () => this.watchers.delete(watcher));
      return;
    }
    if (url.pathname === BASE && req.method === "POST") {
      if (this.forbidCreate) return status(403, "harnesssessions is forbidden");
      const name = body.metadata.generateName + randomBytes(3).toString("hex");
      const obj = this.put({ ...body, metadata: { ...body.metadata, name } });
      send(201, obj);
      this.onCreate(name);
      return;
    }
    const name = url.pathname.startsWith(`${BASE}/`) ? url.pathname.slice(BASE.length + 1) : undefined;
    const obj = name && this.objects.get(name);
    if (!obj) return status(404, `harnesssessions "${name}" not found`);
    if (req.method === "GET") return send(200, obj);
    if (req.method === "PATCH") {
      this.update(name, (o) => (o.metadata.annotations = { ...o.metadata.annotations, ...body.metadata.annotations }));
      send(200, obj);
      return this.onPatch(name);
    }
    if (req.method === "DELETE") {
      if (body?.preconditions?.uid && body.preconditions.uid !== obj.metadata.uid) return status(409, "Precondition failed: UID");
      this.update(name, (o) => (o.metadata.deletionTimestamp = new Date().toISOString()));
      send(200, obj);
      return this.onDelete(name);
    }
    status(405, "method not allowed");
  }
}

/** The kubelet's side of a WebSocket port-forward (v4.channel.k8s.io), to the loopback worker. */
function forwardTo(ws, port) {
  const tcp = connect(workerPort, "127.0.0.1");
  const header = (channel) => Buffer.from([channel, port & 0xff, port >> 8]);
  ws.send(header(0));
  ws.send(header(1));
  tcp.on("data", (d) => ws.send(Buffer.concat([Buffer.from([0]), d])));
  tcp.on("error", () => {});
  tcp.on("close", () => ws.close());
  ws.on("message", (data) => data[0] === 0 && tcp.write(data.subarray(1)));
  ws.on("close", () => tcp.destroy());
}

function readyStatus(name) {
  return {
    phase: "Ready",
    conditions: [{ type: "Ready", status: "True", reason: "Ready", message: "" }],
    workerPod: `${name}-worker`,
    address: `http://127.0.0.1:${workerPort}`,
    tokenSecret: `${name}-token`,
  };
}

function pending(message) {
  return { phase: "Pending", conditions: [{ type: "Ready", status: "False", reason: "Provisioning", message }] };
}

/** `await using` as a TypeScript user writes it (tsc lowers it for Node 20, which lacks it). */
async function usingBlock(options, body) {
  const source = "export async function run(Session, options, body) { await using s = await Session.create(options); await body(s); }";
  const js = ts.transpileModule(source, { compilerOptions: { target: ts.ScriptTarget.ES2022, module: ts.ModuleKind.ESNext } }).outputText;
  const { run } = await import(`data:text/javascript;base64,${Buffer.from(js).toString("base64")}`);
  return run(Session, options, body);
}

const sleep = (ms) => new Promise((r) => setTimeout(r, ms));
let fake;
let kubeConfig;

before(async () => {
  const tmp = mkdtempSync(join(tmpdir(), "kh-ts-life-"));
  const root = join(tmp, "ws");
  for (const d of ["session", "artifacts", "persistent", ".agents/skills"]) mkdirSync(join(root, d), { recursive: true });
  writeFileSync(join(tmp, "token"), `${TOKEN}\n`);
  workerPort = await new Promise((resolve) => {
    const s = createTcpServer().listen(0, "127.0.0.1", () => {
      const { port } = s.address();
      s.close(() => resolve(port));
    });
  });
  worker = spawn(process.env.KH_BIN, ["worker", "--session", "life", "--token-file", join(tmp, "token"), "--listen", `127.0.0.1:${workerPort}`, "--workspace-root", root], { stdio: "ignore" });
  const deadline = Date.now() + 30000;
  for (;;) {
    try {
      if ((await fetch(`http://127.0.0.1:${workerPort}/readyz`)).status === 200) break;
    } catch {}
    assert.ok(Date.now() < deadline, "the worker did not become ready");
    await sleep(50);
  }
});

after(() => worker?.kill("SIGKILL"));

async function withFake(body) {
  fake = new FakeKube();
  kubeConfig = await fake.start();
  try {
    await body();
  } finally {
    fake.stop();
  }
}

test("create waits through Pending for Ready by watching, and close deletes it", () =>
  withFake(async () => {
    fake.onCreate = (name) => {
      fake.update(name, (o) => (o.status = pending("waiting for the worker pod")));
      setTimeout(() => fake.update(name, (o) => (o.status = readyStatus(name))), 400);
    };
    fake.onDelete = (name) => setTimeout(() => fake.remove(name), 300);
    const s = await Session.create({ kubeConfig, address: "in-cluster", tier: "tier1", ttlSeconds: 600, labels: { app: "t" }, spec: { runtime: { network: false } } });
    assert.match(s.name, /^agent-[0-9a-f]{6}$/);
    assert.equal(s.namespace, NS);
    const made = fake.requests.find((r) => r.method === "POST").body;
    assert.deepEqual(made.metadata, { generateName: "agent-", labels: { app: "t" } });
    assert.deepEqual(made.spec, { runtime: { network: false }, workerTier: "tier1", lifetime: { ttlSeconds: 600 } });
    // One read, then a watch from its resourceVersion: no polling.
    assert.equal(fake.count("GET", (r) => r.url.pathname === `${BASE}/${s.name}`), 1);
    const watch = fake.requests.find((r) => r.url.searchParams.get("watch") === "true").url.searchParams;
    assert.equal(watch.get("fieldSelector"), `metadata.name=${s.name}`);
    assert.ok(Number(watch.get("resourceVersion")) > 0);
    assert.equal((await s.exec("echo hi")).stdout, "hi\n");
    const uid = fake.objects.get(s.name).metadata.uid;
    await s.close();
    const del = fake.requests.find((r) => r.method === "DELETE");
    assert.equal(del.url.searchParams.get("propagationPolicy"), "Foreground");
    assert.deepEqual(del.body.preconditions, { uid });
    assert.equal(fake.objects.has(s.name), false, "close returned before the session was gone");
    await s.close();
    assert.equal(fake.count("DELETE"), 1, "close is idempotent");
  }));

test("await using deletes the session when the block ends, even by an error", () =>
  withFake(async () => {
    fake.onCreate = (name) => fake.update(name, (o) => (o.status = readyStatus(name)));
    let name;
    await assert.rejects(
      usingBlock({ kubeConfig, address: "in-cluster" }, async (s) => {
        name = s.name;
        assert.equal((await s.exec("echo in")).stdout, "in\n");
        throw new Error("boom");
      }),
      /boom/,
    );
    assert.equal(fake.count("DELETE"), 1);
    assert.equal(fake.objects.has(name), false);
  }));

test("keep: true leaves the session on close", () =>
  withFake(async () => {
    fake.onCreate = (name) => fake.update(name, (o) => (o.status = readyStatus(name)));
    const s = await Session.create({ kubeConfig, address: "in-cluster", keep: true, generateName: "kept-" });
    assert.match(s.name, /^kept-/);
    await s.close();
    assert.equal(fake.count("DELETE"), 0);
    assert.ok(fake.objects.has(s.name));
  }));

test("a create never Ready in time deletes what it made and throws NotReadyError", () =>
  withFake(async () => {
    fake.onCreate = (name) => fake.update(name, (o) => (o.status = pending("no node fits")));
    const started = Date.now();
    await assert.rejects(Session.create({ kubeConfig, address: "in-cluster", timeoutMs: 800 }), (e) => {
      assert.ok(e instanceof NotReadyError && e instanceof KubeHarnessError, String(e));
      assert.deepEqual([e.phase, e.reason, e.detail], ["Pending", "Provisioning", "no node fits"]);
      assert.match(e.message, /Pending.*Provisioning: no node fits/);
      return true;
    });
    const took = Date.now() - started;
    assert.ok(took >= 800 && took < 5000, `${took} ms`);
    assert.equal(fake.count("DELETE"), 1);
    assert.equal(fake.objects.size, 0);
  }));

test("attach wakes a hibernated session once and close never deletes it", () =>
  withFake(async () => {
    fake.put({ metadata: { name: "sleepy" }, spec: {}, status: { phase: "Hibernated", conditions: [{ type: "Ready", status: "False", reason: "Hibernated" }] } });
    fake.onPatch = (name) => setTimeout(() => fake.update(name, (o) => (o.status = readyStatus(name))), 100);
    const s = await Session.attach("sleepy", { kubeConfig, address: "in-cluster" });
    const patches = fake.requests.filter((r) => r.method === "PATCH");
    assert.equal(patches.length, 1);
    assert.equal(patches[0].type, "application/merge-patch+json");
    const woke = patches[0].body.metadata.annotations["kubeharness.dev/wake-requested"];
    assert.ok(Math.abs(Date.parse(woke) - Date.now()) < 10000, woke);
    assert.equal((await s.status()).session, "life");
    await s.close();
    assert.equal(fake.count("DELETE"), 0);
  }));

test("attach of a missing, suspended or expired session fails at once", () =>
  withFake(async () => {
    const quick = { kubeConfig, address: "in-cluster", timeoutMs: 60000 };
    await assert.rejects(Session.attach("none", quick), (e) => e instanceof SessionNotFound && e.sessionName === "none");
    fake.put({ metadata: { name: "held" }, spec: { suspend: true }, status: { phase: "Hibernated" } });
    await assert.rejects(Session.attach("held", quick), (e) => e instanceof SessionSuspended && e.reason === "suspended");
    fake.put({ metadata: { name: "old", generation: 2 }, spec: {}, status: { phase: "Expired", observedGeneration: 2 } });
    await assert.rejects(Session.attach("old", quick), (e) => e instanceof SessionSuspended && e.reason === "expired");
    assert.equal(fake.count("PATCH"), 0);
  }));

test("a watch refused with 403 falls back to reading", () =>
  withFake(async () => {
    fake.forbidWatch = true;
    fake.put({ metadata: { name: "slow" }, spec: {}, status: pending("starting") });
    setTimeout(() => fake.update("slow", (o) => (o.status = readyStatus("slow"))), 1200);
    const s = await Session.attach("slow", { kubeConfig, address: "in-cluster" });
    assert.equal(fake.count("GET", (r) => r.url.searchParams.get("watch") === "true"), 1, "the refused watch is not asked again");
    const reads = fake.count("GET", (r) => r.url.pathname === `${BASE}/slow`);
    assert.ok(reads >= 3 && reads <= 5, `${reads} reads`);
    await s.close();
  }));

test("a watch that says 410 Gone starts over from a fresh read", () =>
  withFake(async () => {
    fake.goneOnce = true;
    fake.put({ metadata: { name: "gone" }, spec: {}, status: pending("starting") });
    setTimeout(() => fake.update("gone", (o) => (o.status = readyStatus("gone"))), 300);
    const s = await Session.attach("gone", { kubeConfig, address: "in-cluster" });
    assert.equal(fake.count("GET", (r) => r.url.searchParams.get("watch") === "true"), 2);
    assert.ok(fake.count("GET", (r) => r.url.pathname === `${BASE}/gone`) >= 2);
    await s.close();
  }));

test("the port-forward carries requests and close drops it", () =>
  withFake(async () => {
    fake.put({ metadata: { name: "fwd" }, spec: {}, status: readyStatus("fwd") });
    const s = await Session.attach("fwd", { kubeConfig, address: "port-forward" });
    assert.equal((await s.exec("echo through")).stdout, "through\n");
    const items = [];
    for await (const item of s.stream("echo a; echo b >&2")) items.push(item.type);
    assert.deepEqual(items.at(-1), "result");
    assert.ok(fake.count("UPGRADE", (r) => r.url.includes("/pods/fwd-worker/portforward?ports=8080")) >= 1);
    await s.close();
    await assert.rejects(s.status(), (e) => e instanceof KubeHarnessError);
  }));

test("a port-forward that cannot open fails the attach", () =>
  withFake(async () => {
    fake.put({ metadata: { name: "fwd" }, spec: {}, status: readyStatus("fwd") });
    fake.forbidForward = true;
    await assert.rejects(Session.attach("fwd", { kubeConfig, address: "port-forward", timeoutMs: 5000 }), (e) => e instanceof ClusterError && e.status === 403);
  }));

test("Kubernetes API refusals are ClusterErrors with the HTTP status", () =>
  withFake(async () => {
    fake.forbidCreate = true;
    await assert.rejects(Session.create({ kubeConfig, address: "in-cluster" }), (e) => e instanceof ClusterError && e.status === 403 && /forbidden/.test(e.message));
  }));
