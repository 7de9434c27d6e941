#!/usr/bin/env python3
"""Smart-HTTP git server for tests: every request is handed to `git http-backend` (CGI).

Serves the bare repositories under GIT_ROOT (default /srv/git) at http://HOST:PORT/<name>.git,
read and write, without authentication: it is a test fixture inside a test cluster. A push to a
repository that does not exist yet creates it (names: lowercase letters, digits, '-', '.', '_').
"""
import http.server
import os
import re
import subprocess
import sys

ROOT = os.environ.get("GIT_ROOT", "/srv/git")
PORT = int(os.environ.get("PORT", "8080"))
NAME = re.compile(r"^/([a-z0-9][a-z0-9._-]{0,62}\.git)(/.*)?$")


class Handler(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def do_GET(self):
        self.backend()

    def do_POST(self):
        self.backend()

    def fail(self, code, text):
        body = (text + "\n").encode()
        self.send_response(code)
        self.send_header("Content-Type", "text/plain")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def body(self):
        if self.headers.get("Transfer-Encoding", "").lower() == "chunked":
            out = bytearray()
            while True:
                size = int(self.rfile.readline().split(b";")[0].strip(), 16)
                if size == 0:
                    self.rfile.readline()
                    return bytes(out)
                out += self.rfile.read(size)
                self.rfile.readline()
        return self.rfile.read(int(self.headers.get("Content-Length") or 0))

    def backend(self):
        path, _, query = self.path.partition("?")
        if path == "/healthz":
            return self.fail(200, "ok")
        m = NAME.match(path)
        if not m:
            return self.fail(404, "no such repository path")
        repo = os.path.join(ROOT, m.group(1))
        if not os.path.isdir(repo):
            if "service=git-receive-pack" not in query:
                return self.fail(404, "no such repository")
            subprocess.run(["git", "init", "-q", "--bare", "-b", "main", repo], check=True)
            subprocess.run(["git", "-C", repo, "config", "http.receivepack", "true"], check=True)
        data = self.body() if self.command == "POST" else b""
        env = {
            "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
            "HOME": os.environ.get("HOME", "/tmp"),
            "GIT_PROJECT_ROOT": ROOT,
            "GIT_HTTP_EXPORT_ALL": "1",
            "REQUEST_METHOD": self.command,
            "PATH_INFO": path,
            "QUERY_STRING": query,
            "CONTENT_TYPE": self.headers.get("Content-Type", ""),
            "CONTENT_LENGTH": str(len(data)),
            "REMOTE_ADDR": self.client_address[0],
            "REMOTE_USER": "test",
            "GIT_HTTP_MAX_REQUEST_BUFFER": "100M",
        }
        if self.headers.get("Git-Protocol"):
            env["GIT_PROTOCOL"] = self.headers["Git-Protocol"]
        if self.headers.get("Content-Encoding"):
            env["HTTP_CONTENT_ENCODING"] = self.headers["Content-Encoding"]
        out = subprocess.run(["git", "http-backend"], input=data, env=env, capture_output=True)
        if out.returncode != 0 and not out.stdout:
            return self.fail(500, out.stderr.decode(errors="replace"))
        head, _, payload = out.stdout.partition(b"\r\n\r\n")
        if not _:
            head, _, payload = out.stdout.partition(b"\n\n")
        status, headers = 200, []
        for line in head.decode(errors="replace").splitlines():
            key, _, value = line.partition(":")
            if key.lower() == "status":
                status = int(value.strip().split()[0])
            elif key:
                headers.append((key, value.strip()))
        self.send_response(status)
        for key, value in headers:
            self.send_header(key, value)
        self.send_header("Content-Length", str(len(payload)))
        self.end_headers()
        self.wfile.write(payload)
        if out.stderr:
            sys.stderr.write(out.stderr.decode(errors="replace"))

    def log_message(self, fmt, *args):
        sys.stderr.write("%s %s\n" % (self.address_string(), fmt % args))


if __name__ == "__main__":
    os.makedirs(ROOT, exist_ok=True)
    http.server.ThreadingHTTPServer(("", PORT), Handler).serve_forever()
