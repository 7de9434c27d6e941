#!/usr/bin/env python3
"""Runs the Argo CD health checks (examples/gitops/argocd/*.lua) with a real Lua 5.4 against the
statuses the operator writes (tests/gitops/fixtures/*.json, made by the operator's pure status
functions: operator/tests/suite/kstatus_fixtures.rs) and checks the health each one gets. Also
checks that docs/gitops.md shows each script verbatim. Usage: argocd_health.py [LUA]"""
import json
import pathlib
import subprocess
import sys

ROOT = pathlib.Path(__file__).resolve().parents[2]
FIXTURES = ROOT / "tests/gitops/fixtures"
SCRIPTS = ROOT / "examples/gitops/argocd"
LUA = sys.argv[1] if len(sys.argv) > 1 else "lua5.4"

# fixture -> the Argo CD health status the check must give it (docs/gitops.md has the table).
EXPECTED = {
    "harnesssession-new": "Progressing",
    "harnesssession-provisioning": "Progressing",
    "harnesssession-stale-generation": "Progressing",
    "harnesssession-ready": "Healthy",
    "harnesssession-hibernated": "Healthy",
    "harnesssession-suspending": "Progressing",
    "harnesssession-suspended": "Suspended",
    "harnesssession-expiring": "Progressing",
    "harnesssession-expired": "Suspended",
    "harnesssession-quota-exceeded": "Degraded",
    "harnesssession-image-pull": "Degraded",
    "harnesssession-missing-tier": "Degraded",
    "sandboxtier-ready": "Healthy",
    "sandboxtier-pool-filling": "Progressing",
    "sandboxtier-stale-generation": "Progressing",
    "sandboxtier-pool-failing": "Degraded",
    "sandboxtier-image-missing": "Degraded",
}


def lua_value(v):
    """A Lua constructor for a JSON value (Argo CD hands the object to Lua as such tables)."""
    if v is None:
        return "nil"
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, (int, float)):
        return repr(v)
    if isinstance(v, str):
        return '"' + "".join(
            c if (c.isascii() and c.isalnum()) or c in " .,:;-_/()'=+*!?[]{}<>@#%&|~^$`" else "\\%03d" % ord(c)
            for c in v.encode("utf-8").decode("latin-1")
        ) + '"'
    if isinstance(v, list):
        return "{" + ", ".join(lua_value(x) for x in v) + "}"
    return "{" + ", ".join("[%s] = %s" % (lua_value(k), lua_value(x)) for k, x in v.items()) + "}"


def health(script, obj):
    program = (
        "local obj = %s\n" % lua_value(obj)
        + "local hs = (function(obj)\n%s\nend)(obj)\n" % script
        + 'io.write(hs.status, "\\n", hs.message or "", "\\n")\n'
    )
    out = subprocess.run([LUA, "-"], input=program, capture_output=True, text=True, timeout=10)
    if out.returncode != 0:
        raise SystemExit("lua failed on %s: %s" % (obj["metadata"]["name"], out.stderr))
    status, message = (out.stdout.split("\n") + [""])[:2]
    return status, message


def main():
    failures = []
    fixtures = {p.stem: p for p in FIXTURES.glob("*.json")}
    if set(fixtures) != set(EXPECTED):
        failures.append(
            "fixtures without an expectation: %s; expectations without a fixture: %s"
            % (sorted(set(fixtures) - set(EXPECTED)), sorted(set(EXPECTED) - set(fixtures)))
        )
    docs = (ROOT / "docs/gitops.md").read_text()
    for kind in ("harnesssession", "sandboxtier"):
        script = (SCRIPTS / ("%s-health.lua" % kind)).read_text()
        # In docs/gitops.md, under its argocd-cm key, indented by four spaces.
        indented = "".join("    " + l if l.strip() else l for l in script.splitlines(True))
        if indented not in docs:
            failures.append("docs/gitops.md does not show %s-health.lua verbatim" % kind)
        for name in sorted(n for n in fixtures if n.startswith(kind + "-")):
            obj = json.loads(fixtures[name].read_text())
            got, message = health(script, obj)
            want = EXPECTED.get(name)
            verdict = "ok" if got == want else "FAIL (want %s)" % want
            print("%-36s %-11s %s  %s" % (name, got, verdict, message))
            if got != want:
                failures.append("%s: %s, want %s" % (name, got, want))
    if failures:
        print("\n".join(failures), file=sys.stderr)
        sys.exit(1)
    print("argocd health checks: %d fixtures ok" % len(fixtures))


main()
