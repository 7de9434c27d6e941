# The hydra (issue 29, item 1): `python3 - SECONDS` starts a chain whose tail is hungry, and
# returns after SECONDS (0: never). Every process forks one child, leaves its session (or, where
# setsid() is refused, its process group) and idles, rewriting /session/heartbeat now and then;
# the tail retries its fork until the process limit lets it through. Killed from the top, one
# generation at a time, the chain never gets shorter. Used by cli/tests/suite/attack_hydra.rs and
# tests/e2e/tests/attack.rs.
import os, sys, time
hb = "/session/heartbeat"
def node():
    while True:
        try:
            pid = os.fork()
        except OSError:
            time.sleep(0.0005)
            continue
        if pid == 0:
            try:
                os.setsid()
            except OSError:
                try:
                    os.setpgid(0, 0)
                except OSError:
                    pass
            continue
        while True:
            time.sleep(0.05)
            try:
                with open(hb, "w") as f:
                    f.write(repr(time.time()))
            except OSError:
                pass
if os.fork() == 0:
    node()
seconds = float(sys.argv[1])
time.sleep(seconds if seconds > 0 else 1e9)
print("started", flush=True)
