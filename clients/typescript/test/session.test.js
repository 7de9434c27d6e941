// The SDK against a real `kube-harness worker` on loopback (KH_BIN names the binary; as root,
// like the worker's own tests): exec, stream, files, endTurn, status, typed errors, turns.
// kubeHarnessSandbox, the Little Harness factory, has its own: test/factory.test.js.
import { test, before, after } from "node:test";
import assert from "node:assert/strict";
import { spawn } from "node:child_process";
import { mkdtempSync, mkdirSync, writeFileSync, existsSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { freePort } from "./support.js";
import { Session, ApiError, TransportError } from "../dist/index.js";

const TOKEN = "ts-sdk-token-0123";
let worker;
let url;
let root;

before(async () => {
  const bin = process.env.KH_BIN;
  assert.ok(bin, "KH_BIN must name the kube-harness binary");
  const tmp = mkdtempSync(join(tmpdir(), "kh-ts-"));
  root = join(tmp, "ws");
  for (const d of ["session", "artifacts", "persistent", ".agents/skills"]) mkdirSync(join(root, d), { recursive: true });
  writeFileSync(join(tmp, "token"), `${TOKEN}\n`);
  const port = await freePort();
  url = `http://127.0.0.1:${port}`;
  worker = spawn(bin, ["worker", "--session", "ts", "--token-file", join(tmp, "token"), "--listen", `127.0.0.1:${port}`,
    "--workspace-root", root, "--max-file-bytes", String(1 << 20)], { stdio: "ignore" });
  const deadline = Date.now() + 30000;
  for (;;) {
    try {
      if ((await fetch(`${url}/readyz`)).status === 200) break;
    } catch {}
    assert.ok(Date.now() < deadline, "the worker did not become ready");
    await new Promise((r) => setTimeout(r, 50));
  }
});

after(() => worker?.kill("SIGKILL"));

test("exec returns the outcome whatever the exit code", async () => {
  const s = new Session({ url, token: TOKEN });
  const r = await s.exec("echo hi; echo oops >&2; exit 3");
  assert.deepEqual([r.stdout, r.stderr, r.exitCode, r.tier, r.type], ["hi\n", "oops\n", 3, 0, "result"]);
  const t = await s.exec("sleep 5", { timeoutMs: 500 });
  assert.equal(t.timedOut, true);
  assert.equal(t.exitCode, 124);
});

test("stream yields output as it comes, then the result", async () => {
  const s = new Session({ url, token: TOKEN });
  const started = Date.now();
  let first;
  const items = [];
  for await (const item of s.stream("for i in 1 2 3; do echo $i; sleep 1; done")) {
    if (first === undefined && item.type === "stdout") first = Date.now() - started;
    items.push(item);
  }
  assert.ok(first < 1500, `first line after ${first} ms`);
  assert.equal(items.filter((i) => i.type === "stdout").map((i) => i.data).join(""), "1\n2\n3\n");
  const result = items.at(-1);
  assert.equal(result.type, "result");
  assert.equal(result.exitCode, 0);
});

test("files round-trip and refusals are typed", async () => {
  const s = new Session({ url, token: TOKEN });
  const data = new Uint8Array(300000).map((_, i) => i % 251);
  const w = await s.writeFile("/session/in/data.bin", data);
  assert.deepEqual([w.change, w.bytes], ["created", data.length]);
  assert.deepEqual(await s.readFile("/session/in/data.bin"), data);
  await assert.rejects(s.writeFile("/session/../x", "no"), (e) => e instanceof ApiError && e.code === "bad-path" && e.status === 400);
  await assert.rejects(s.writeFile("/.agents/skills/x", "no"), (e) => e instanceof ApiError && e.code === "read-only");
  await assert.rejects(s.readFile("/session/none"), (e) => e instanceof ApiError && e.code === "not-found");
  await assert.rejects(s.writeFile("/session/big", new Uint8Array(2 << 20)), (e) => e instanceof ApiError && e.status === 413);
  assert.equal(existsSync(join(root, "session/big")), false);
});

// Issue 29, 6c: the worker reads ?path= as plain percent-encoding (a `+` is a plus, `%20` a
// space); encodeURIComponent writes both that way, so a name with either round-trips.
test("names with a plus or a space round-trip", async () => {
  const s = new Session({ url, token: TOKEN });
  const odd = "/session/a+b c%41.txt";
  const w = await s.writeFile(odd, "odd");
  assert.equal(w.path, odd);
  assert.ok(existsSync(join(root, "session", "a+b c%41.txt")));
  assert.deepEqual(await s.readFile(odd), new TextEncoder().encode("odd"));
});

test("endTurn and status", async () => {
  const s = new Session({ url, token: TOKEN });
  await s.endTurn();
  await s.exec("echo a > /session/a.txt");
  const turn = await s.endTurn();
  assert.equal(turn.commands, 1);
  assert.deepEqual(turn.fileChanges.map((c) => c.path), ["/session/a.txt"]);
  assert.equal((await s.endTurn()), null);
  assert.equal((await s.status()).session, "ts");
});

test("a wrong token and an unreachable worker are typed", async () => {
  await assert.rejects(new Session({ url, token: "nope" }).exec("true"), (e) => e instanceof ApiError && e.status === 401 && e.code === "unauthorized");
  await assert.rejects(new Session({ url: "http://127.0.0.1:9", token: TOKEN }).exec("true"), (e) => e instanceof TransportError);
});

test("one client's turn at a time: others get turn-busy, a spent id turn-ended", async () => {
  const a = new Session({ url, token: TOKEN });
  const b = new Session({ url, token: TOKEN });
  await a.endTurn(); // whatever earlier tests left open
  const turn = await a.openTurn("agent-a");
  assert.equal(a.turnId, turn);
  assert.equal((await a.exec("echo mine")).stdout, "mine\n");
  await assert.rejects(b.exec("echo theirs"), (e) => e instanceof ApiError && e.status === 409 && e.code === "turn-busy" && e.message.includes("agent-a"));
  await assert.rejects(b.openTurn(), (e) => e instanceof ApiError && e.code === "turn-busy");
  assert.equal((await a.writeFile("/session/turn-own.txt", "o")).change, "created");
  await assert.rejects(b.writeFile("/session/turn-theirs.txt", "t"), (e) => e instanceof ApiError && e.code === "turn-busy");
  await assert.rejects(b.endTurn(), (e) => e instanceof ApiError && e.code === "turn-busy");
  assert.equal((await a.endTurn()).commands, 1);
  assert.equal(a.turnId, undefined);
  a.turnId = turn; // a spent id, as after the worker's idle bound
  await assert.rejects(a.exec("true"), (e) => e instanceof ApiError && e.code === "turn-ended");
  a.turnId = undefined;
  assert.equal((await b.exec("echo free")).stdout, "free\n");
  await b.endTurn();
});
