"""Run the book live on your own machine: ``.venv/bin/python scripts/live.py``.

Serves the built book (``_build/html``, README command 1) on 127.0.0.1 and starts a Jupyter
server beside it, on 127.0.0.1 too, with a fresh random token and the book's address as its
only allowed origin. The token travels only in the address this prints (after ``#``, which a
browser never sends to a server): the page keeps it in the browser, so another user of the
same machine, who can reach both ports, cannot learn it from the book's server. A chapter's
"Run this page live" button then turns its code cells into editors that run in a kernel of
that server, in ``book/`` as the build ran them, with this clone's ``workers``. Ctrl-C stops
both servers, every kernel and every process a kernel started: this process is made the
reaper of everything it starts, so even a process whose parent died is found and ended.
"""

from __future__ import annotations

import argparse
import ctypes
import functools
import http.server
import json
import os
import re
import secrets
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from pathlib import Path

import psutil

ROOT = Path(__file__).resolve().parent.parent
PR_SET_CHILD_SUBREAPER = 36


class BookHandler(http.server.SimpleHTTPRequestHandler):
    """The built book's files, and ``/_live/server.json``: where the Jupyter server is (not
    its token)."""

    server_info: bytes = b"{}"

    def do_GET(self) -> None:
        if self.path.split("?")[0] == "/_live/server.json":
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Cache-Control", "no-store")
            self.send_header("Content-Length", str(len(self.server_info)))
            self.end_headers()
            self.wfile.write(self.server_info)
            return
        super().do_GET()

    def log_message(self, *args) -> None:
        pass


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def book_server(html: Path, port: int) -> http.server.ThreadingHTTPServer:
    handler = functools.partial(BookHandler, directory=str(html))
    try:
        return http.server.ThreadingHTTPServer(("127.0.0.1", port), handler)
    except OSError:  # the port is taken: any free one
        return http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)


def first_page(html: Path) -> str:
    """The page the site's root redirects to (a redirect would drop the address's key)."""
    match = re.search(r'url=([^"\'>]+)', (html / "index.html").read_text())
    return match.group(1) if match else "index.html"


def jupyter_command(port: int, origin: str) -> list[str]:
    command = [
        sys.executable, "-m", "jupyter_server",
        "--ServerApp.ip=127.0.0.1", f"--ServerApp.port={port}",
        "--ServerApp.port_retries=0",
        f"--ServerApp.allow_origin={origin}", f"--ServerApp.root_dir={ROOT}",
        "--ServerApp.open_browser=False", "--ServerApp.log_level=WARN",
        # kernels talk to the server over Unix sockets in the command's own folder, not TCP
        "--KernelManager.transport=ipc",
        "--ServerApp.websocket_ping_timeout=30000",  # (its default warns: too long)
    ]
    if os.geteuid() == 0:  # jupyter_server refuses to run as root without it
        command.append("--allow-root")
    return command


def wait_until_up(url: str, process: subprocess.Popen, timeout: float = 60) -> None:
    deadline = time.time() + timeout
    while time.time() < deadline:
        if process.poll() is not None:
            raise SystemExit(
                f"live: the Jupyter server exited with code {process.returncode}")
        try:
            with urllib.request.urlopen(url + "api", timeout=2):
                return
        except OSError:
            time.sleep(0.2)
    raise SystemExit(f"live: the Jupyter server did not answer within {timeout:g} s")


def stop_everything(jupyter: subprocess.Popen | None) -> None:
    """The Jupyter server first (it shuts its kernels down), then whatever is left."""
    if jupyter is not None and jupyter.poll() is None:
        jupyter.terminate()
        try:
            jupyter.wait(timeout=10)
        except subprocess.TimeoutExpired:
            pass
    left = psutil.Process().children(recursive=True)
    for process in left:
        try:
            process.terminate()
        except psutil.NoSuchProcess:
            pass
    _, alive = psutil.wait_procs(left, timeout=3)
    for process in alive:
        try:
            process.kill()
        except psutil.NoSuchProcess:
            pass
    psutil.wait_procs(alive, timeout=3)
    while True:  # reap whatever was re-parented here and has exited since
        try:
            if os.waitpid(-1, os.WNOHANG)[0] == 0:
                break
        except ChildProcessError:
            break


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--port", type=int, default=8000,
                        help="the book's port on 127.0.0.1 (default 8000; a free one "
                        "if it is taken)")
    parser.add_argument("--html", type=Path, default=ROOT / "_build" / "html",
                        help="the built book to serve (default _build/html)")
    args = parser.parse_args(argv)
    if not (args.html / "index.html").is_file():
        print(f"live: no built book in {args.html}: build it first (the README's "
              "command 1)", file=sys.stderr)
        return 2
    if not (args.html / "_thebe" / "index.js").is_file():
        print("live: this build has no Thebe, so pages cannot go live: run "
              ".venv/bin/python scripts/fetch_thebe.py, then build the book again",
              file=sys.stderr)
        return 2
    # Every process started from here, and every orphan of theirs, becomes our child.
    ctypes.CDLL(None, use_errno=True).prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0)
    # Ctrl-C, kill and a closed terminal all stop everything. SIGINT too is set here: a
    # process started in the background by a script inherits it ignored, and Python then
    # leaves it ignored.
    signal.signal(signal.SIGINT, signal.default_int_handler)
    signal.signal(signal.SIGTERM, signal.default_int_handler)
    signal.signal(signal.SIGHUP, signal.default_int_handler)

    book = book_server(args.html, args.port)
    origin = f"http://127.0.0.1:{book.server_address[1]}"
    token = secrets.token_urlsafe(32)
    jupyter_port = free_port()
    jupyter_url = f"http://127.0.0.1:{jupyter_port}/"
    BookHandler.server_info = json.dumps({"url": jupyter_url, "path": "book"}).encode()
    jupyter = serving = None
    with tempfile.TemporaryDirectory(prefix="live-jupyter-") as runtime:
        env = {
            **os.environ,
            "JUPYTER_TOKEN": token,  # not on the command line, where ps shows it
            "JUPYTER_RUNTIME_DIR": runtime,  # connection files go with the command
            "PYTHONPATH": os.pathsep.join(
                [str(ROOT), *filter(None, [os.environ.get("PYTHONPATH")])]),
        }
        try:
            jupyter = subprocess.Popen(
                jupyter_command(jupyter_port, origin), cwd=ROOT, env=env,
                stdin=subprocess.DEVNULL,
                # Ctrl-C reaches this process only, which stops the rest in order
                start_new_session=True,
            )
            wait_until_up(jupyter_url, jupyter)
            serving = threading.Thread(target=book.serve_forever, daemon=True)
            serving.start()
            print(f"The book, live: {origin}/{first_page(args.html)}#live-token={token}\n"
                  "(open this address: it carries the key to the live server; chapters run "
                  "on this machine; Ctrl-C stops everything)", flush=True)
            while jupyter.poll() is None:
                time.sleep(0.5)
            print(f"live: the Jupyter server exited with code {jupyter.returncode}",
                  file=sys.stderr)
            return 1
        except KeyboardInterrupt:
            print("\nlive: stopping the servers, the kernels and what they started",
                  flush=True)
            return 0
        finally:
            with _signals_ignored():
                if serving is not None:
                    book.shutdown()
                book.server_close()
                stop_everything(jupyter)


class _signals_ignored:
    """A second Ctrl-C while everything is being stopped does not cut the stopping short."""

    def __enter__(self):
        self.saved = [signal.signal(s, signal.SIG_IGN)
                      for s in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)]

    def __exit__(self, *exc_info):
        for s, handler in zip((signal.SIGINT, signal.SIGTERM, signal.SIGHUP), self.saved):
            signal.signal(s, handler)


if __name__ == "__main__":
    sys.exit(main())
