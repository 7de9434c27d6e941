"""The SDK against a real worker: exec, stream, files, end_turn, status, and the typed errors."""

import asyncio
import time

import pytest

import kube_harness as kh
from conftest import TOKEN


def test_exec_returns_the_outcome_whatever_the_exit_code(worker):
    with kh.Session(worker.url, TOKEN) as s:
        r = s.exec("echo hi; echo oops >&2; exit 3")
        assert (r.stdout, r.stderr, r.exit_code, r.tier) == ("hi\n", "oops\n", 3, 0)
        assert not r.timed_out
        assert any(e["type"] == "harness.runtime.command.completed" for e in r.events)
        # Shell state carries over between commands of a session.
        s.exec("cd /session && export GREETING=hello")
        assert s.exec("pwd; echo $GREETING").stdout == "/session\nhello\n"
        r = s.exec("sleep 5", timeout=0.5)
        assert r.timed_out and r.exit_code == 124


def test_stream_yields_output_as_it_comes_then_the_result(worker):
    with kh.Session(worker.url, TOKEN) as s:
        started = time.monotonic()
        first = None
        items = []
        for item in s.stream("for i in 1 2 3; do echo $i; sleep 1; done"):
            if first is None and isinstance(item, kh.Chunk):
                first = time.monotonic() - started
            items.append(item)
        assert first is not None and first < 1.5, first
        chunks = [i for i in items if isinstance(i, kh.Chunk)]
        assert "".join(c.data for c in chunks if c.type == "stdout") == "1\n2\n3\n"
        result = items[-1]
        assert isinstance(result, kh.ExecResult) and result.type == "result"
        assert (result.stdout, result.exit_code) == ("1\n2\n3\n", 0)


def test_streamed_output_past_the_cap_is_named_in_the_result_and_reads_back_whole(worker):
    with kh.Session(worker.url, TOKEN) as s:
        script = "python3 -c 'import sys; sys.stdout.write(\"y\\n\" * 1048576)'"
        items = list(s.stream(script))
        streamed = "".join(i.data for i in items if isinstance(i, kh.Chunk) and i.type == "stdout")
        result = items[-1]
        assert len(streamed) == 2 << 20 and result.truncated
        f = result.stdout_file
        assert f and f["complete"] and f["bytes"] == 2 << 20, f
        assert s.read_file(f["path"]) == streamed.encode()
        assert result.stderr_file is None and result.output_problems == []


def test_files_round_trip_and_refusals_are_typed(worker, tmp_path):
    data = bytes(range(256)) * 4096
    with kh.Session(worker.url, TOKEN) as s:
        w = s.write_file("/session/in/data.bin", data)
        assert (w.change, w.bytes) == ("created", len(data))
        assert w.events[0]["data"]["source"] == "upload"
        assert s.read_file("/session/in/data.bin") == data
        assert s.exec("wc -c < /session/in/data.bin").stdout.strip() == str(len(data))
        # A file object streams.
        local = tmp_path / "local.bin"
        local.write_bytes(b"x" * 100000)
        with local.open("rb") as f:
            assert s.write_file("/artifacts/local.bin", f).bytes == 100000
        with pytest.raises(kh.BadPath):
            s.write_file("/session/../etc/passwd", b"no")
        with pytest.raises(kh.ReadOnly):
            s.write_file("/.agents/skills/x.md", b"no")
        with pytest.raises(kh.NotFound):
            s.read_file("/session/none")
        with pytest.raises(kh.PayloadTooLarge):
            s.write_file("/session/big", b"z" * (9 << 20))
    assert not worker.host("/session/big").exists()


def test_names_with_a_plus_or_a_space_round_trip(worker, tmp_path):
    """Issue 29, 6c: the worker reads ?path= as plain percent-encoding (a `+` is a plus), so the
    SDK must send a space as %20 and a plus as %2B. Fails with a form-encoding SDK (httpx's
    params write a space as `+`): the file lands as `a+b+c.txt`."""
    odd = "/session/a+b c%41.txt"
    with kh.Session(worker.url, TOKEN) as s:
        assert s.write_file(odd, b"odd").path == odd
        assert worker.host(odd).read_bytes() == b"odd"
        assert s.read_file(odd) == b"odd"
        src = tmp_path / "src"
        src.mkdir()
        (src / "in+side x.txt").write_text("in")
        s.upload_dir(src, "/session/d+ir one")
        assert worker.host("/session/d+ir one/in+side x.txt").read_text() == "in"
        out = tmp_path / "out"
        s.download_dir("/session/d+ir one", out)
        assert (out / "in+side x.txt").read_text() == "in"

    async def run():
        async with kh.AsyncSession(worker.url, TOKEN) as s:
            assert (await s.write_file("/session/async +.txt", b"a")).path == "/session/async +.txt"
            assert await s.read_file("/session/async +.txt") == b"a"

    asyncio.run(run())
    assert worker.host("/session/async +.txt").read_bytes() == b"a"


def test_end_turn_and_status(worker):
    with kh.Session(worker.url, TOKEN) as s:
        assert s.end_turn() is None
        s.exec("echo a > /session/a.txt")
        turn = s.end_turn()
        assert turn is not None and turn.commands == 1
        assert [c["path"] for c in turn.file_changes] == ["/session/a.txt"]
        status = s.status()
        assert status["session"] == "py" and status["turns"] == 1


def test_a_wrong_token_and_an_unreachable_worker_are_typed(worker):
    with kh.Session(worker.url, "not-the-token") as s:
        with pytest.raises(kh.Unauthorized) as e:
            s.exec("true")
        assert e.value.status == 401
    with kh.Session("http://127.0.0.1:9", TOKEN, connect_timeout=2) as s:
        with pytest.raises(kh.TransportError):
            s.exec("true")


def test_the_async_session_has_the_same_surface(worker):
    async def run():
        async with kh.AsyncSession(worker.url, TOKEN) as s:
            r = await s.exec("echo async")
            assert r.stdout == "async\n"
            items = [i async for i in s.stream("echo one; echo two >&2")]
            assert kh.Chunk("stdout", "one\n") in items
            assert kh.Chunk("stderr", "two\n") in items
            assert items[-1].exit_code == 0
            await s.write_file("/session/b.txt", b"bee")
            assert await s.read_file("/session/b.txt") == b"bee"
            with pytest.raises(kh.NotFound):
                await s.read_file("/session/none")
            assert (await s.end_turn()).commands == 2
            assert (await s.status())["turns"] == 1

    asyncio.run(run())


def test_directories_round_trip_as_tar(worker, tmp_path):
    src = tmp_path / "src"
    (src / "a" / "b").mkdir(parents=True)
    (src / "top.txt").write_text("top")
    (src / "a" / "b" / "deep.txt").write_text("deep")
    (src / "link").symlink_to("top.txt")
    with kh.Session(worker.url, TOKEN) as s:
        up = s.upload_dir(src, "/session/proj")
        assert up["entries"] == 5
        assert s.exec("cat /session/proj/a/b/deep.txt /session/proj/link").stdout == "deeptop"
        s.exec("echo new > /session/proj/made-there.txt")
        out = tmp_path / "out"
        s.download_dir("/session/proj", out)
        assert (out / "made-there.txt").read_text() == "new\n"
        assert (out / "a" / "b" / "deep.txt").read_text() == "deep"
        assert (out / "link").is_symlink()
        with pytest.raises(kh.NotFound):
            s.download_dir("/session/none", tmp_path / "none")


def test_one_clients_turn_at_a_time(worker):
    with kh.Session(worker.url, TOKEN) as a, kh.Session(worker.url, TOKEN) as b:
        turn = a.open_turn("agent-a")
        assert a.turn_id == turn and a.exec("echo mine").stdout == "mine\n"
        with pytest.raises(kh.TurnBusy) as busy:
            b.exec("echo theirs")
        assert busy.value.status == 409 and "agent-a" in busy.value.message
        with pytest.raises(kh.TurnBusy):
            b.open_turn("agent-b")
        with pytest.raises(kh.TurnBusy):
            b.end_turn()
        assert a.end_turn().commands == 1 and a.turn_id is None
        b.open_turn("agent-b")
        a.turn_id = turn  # a stale id, as after the worker's idle bound
        with pytest.raises(kh.TurnBusy):  # another turn is open: whose is said
            a.exec("true")
        assert b.end_turn().commands == 0
        with pytest.raises(kh.TurnEnded):  # none is: the id is spent
            a.exec("true")


def test_the_async_session_opens_its_own_turn(worker):
    async def run():
        async with kh.AsyncSession(worker.url, TOKEN) as a:
            await a.open_turn()
            assert (await a.exec("echo in")).stdout == "in\n"
            async with kh.AsyncSession(worker.url, TOKEN) as b:
                with pytest.raises(kh.TurnBusy):
                    await b.exec("true")
            assert (await a.end_turn()).commands == 1

    asyncio.run(run())


def test_uploads_belong_to_the_clients_turn(worker, tmp_path):
    with kh.Session(worker.url, TOKEN) as a, kh.Session(worker.url, TOKEN) as b:
        a.open_turn("agent-a")
        assert a.write_file("/session/mine.txt", b"m").change == "created"
        (tmp_path / "d").mkdir()
        (tmp_path / "d" / "f").write_text("f")
        assert a.upload_dir(tmp_path / "d", "/session/dir")["entries"] >= 1
        with pytest.raises(kh.TurnBusy):
            b.write_file("/session/theirs.txt", b"t")
        assert a.end_turn() is not None
        assert b.write_file("/session/theirs.txt", b"t").change == "created"
