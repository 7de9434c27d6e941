// The SDK against a HarnessSession on a real cluster. Skipped unless KH_E2E_URL and KH_E2E_TOKEN
// are set: the cluster e2e opens the way to the worker (a port-forward, or the in-cluster
// address), reads the session's token, sets both and runs
// `clients/typescript/test.sh test/cluster.test.js`.
import { test } from "node:test";
import assert from "node:assert/strict";
import { randomBytes } from "node:crypto";
import { Session, kubeHarnessSandbox } from "../dist/index.js";

const url = process.env.KH_E2E_URL;
const token = process.env.KH_E2E_TOKEN;
const options = { skip: url && token ? false : "KH_E2E_URL and KH_E2E_TOKEN are not set (the cluster e2e)" };
// A directory of the session's workspace of this run alone.
const scratch = `/session/ts-e2e/${randomBytes(6).toString("hex")}`;

test("exec", options, async () => {
  const r = await new Session({ url, token }).exec("echo hi");
  assert.deepEqual([r.stdout, r.stderr, r.exitCode, r.tier, r.type], ["hi\n", "", 0, 0, "result"]);
});

test("stream yields chunks, then the result", options, async () => {
  const items = [];
  for await (const item of new Session({ url, token }).stream("echo one; sleep 1; echo two >&2")) items.push(item);
  assert.ok(items.some((i) => i.type === "stdout" && i.data === "one\n"), JSON.stringify(items));
  assert.ok(items.some((i) => i.type === "stderr" && i.data === "two\n"), JSON.stringify(items));
  const result = items.at(-1);
  assert.deepEqual([result.type, result.stdout, result.stderr, result.exitCode], ["result", "one\n", "two\n", 0]);
});

test("writeFile and readFile round-trip bytes", options, async () => {
  const s = new Session({ url, token });
  const data = new Uint8Array(70000).map((_, i) => i % 256);
  const w = await s.writeFile(`${scratch}/data.bin`, data);
  assert.deepEqual([w.change, w.bytes], ["created", data.length]);
  assert.deepEqual(await s.readFile(`${scratch}/data.bin`), data);
});

test("endTurn and status", options, async () => {
  const s = new Session({ url, token });
  await s.exec(`mkdir -p ${scratch} && echo a > ${scratch}/a.txt`);
  const turn = await s.endTurn();
  assert.ok(turn.commands >= 1);
  assert.ok(turn.fileChanges.some((c) => c.path === `${scratch}/a.txt`), JSON.stringify(turn.fileChanges));
  assert.equal(await s.endTurn(), null);
  const status = await s.status();
  assert.equal(status.ready, true);
  assert.equal(typeof status.session, "string");
});

test("kubeHarnessSandbox executes in the session", options, async () => {
  const reported = [];
  const sandbox = kubeHarnessSandbox({ url, token, onDisposeError: (e) => reported.push(e) });
  assert.deepEqual(await sandbox.execute({ command: "echo hi" }), { stdout: "hi\n", stderr: "", exitCode: 0 });
  await sandbox.dispose();
  assert.deepEqual(reported, []);
});
