// Retries and the request time limit, against a loopback server that drops connections on cue:
// only calls safe to repeat are retried, only on transport failures, never after a timeout.
import { test } from "node:test";
import assert from "node:assert/strict";
import { createServer } from "node:http";
import { Session, ApiError, TransportError } from "../dist/index.js";

/** Drops the first `drops` requests' connections, then answers with `answer(req)`. */
async function flaky(drops, answer) {
  const seen = [];
  const server = createServer((req, res) => {
    seen.push(`${req.method} ${req.url}`);
    if (seen.length <= drops) return req.socket.destroy();
    answer(req, res);
  });
  await new Promise((r) => server.listen(0, "127.0.0.1", r));
  const url = `http://127.0.0.1:${server.address().port}`;
  return { url, seen, close: () => (server.closeAllConnections(), server.close()) };
}

const json = (res, code, body) => res.writeHead(code, { "content-type": "application/json" }).end(JSON.stringify(body));

test("reads and step-keyed execs are retried after a dropped connection", async () => {
  const s = await flaky(2, (req, res) => (req.url.startsWith("/v1/files") ? res.end("data") : json(res, 200, { stdout: "ok\n", exitCode: 0 })));
  try {
    const session = new Session({ url: s.url, token: "t" });
    assert.equal(new TextDecoder().decode(await session.readFile("/session/x")), "data");
    assert.equal(s.seen.length, 3);
    s.seen.length = 0;
    assert.equal((await session.exec("true", { stepKey: "k1" })).stdout, "ok\n");
    assert.equal(s.seen.length, 3);
  } finally {
    s.close();
  }
});

test("an exec without a step key, an HTTP error and a third drop are not retried further", async () => {
  const s = await flaky(1, (req, res) => json(res, 503, { error: { code: "unavailable", message: "busy" } }));
  try {
    const session = new Session({ url: s.url, token: "t" });
    await assert.rejects(session.exec("true"), TransportError);
    assert.equal(s.seen.length, 1);
    await assert.rejects(session.status(), (e) => e instanceof ApiError && e.status === 503);
    assert.equal(s.seen.length, 2);
  } finally {
    s.close();
  }
  const down = await flaky(5, () => {});
  try {
    await assert.rejects(new Session({ url: down.url, token: "t" }).status(), TransportError);
    assert.equal(down.seen.length, 3, "three attempts in all");
  } finally {
    down.close();
  }
});

test("requests other than exec have a time limit, and a timed-out read is not repeated", async () => {
  const s = await flaky(0, (req, res) => (req.url === "/v1/exec" ? setTimeout(() => json(res, 200, { stdout: "late\n" }), 600) : undefined));
  try {
    const session = new Session({ url: s.url, token: "t", requestTimeoutMs: 300 });
    const started = Date.now();
    await assert.rejects(session.status(), TransportError);
    assert.ok(Date.now() - started < 1000, `${Date.now() - started} ms`);
    assert.equal(s.seen.length, 1);
    assert.equal((await session.exec("sleep 1")).stdout, "late\n", "exec is limited by its own timeoutMs, not this");
  } finally {
    s.close();
  }
});
