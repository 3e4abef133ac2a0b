"""Run one desktop VM: boot it, snapshot it once ready, restore it on request.

    python -m kubecua_episode.vm --disk-dir ~/.cache/kubecua/vm/<hash> --workdir /tmp/vm0 \
        --port 5000 --token-file /run/secrets/kubecua/token --control-port 5100

Prints one JSON line once the VM is ready and snapshotted (desktop URL, boot and snapshot
seconds). Then POST http://127.0.0.1:<control-port>/restore restores the snapshot and answers
{"restore_s": ...} (200), or 503 after a failed restore (the VM was quarantined and rebuilt);
GET /healthz answers 200 while the VM is ready. The episode server runs beside it with
`--remote` and KUBECUA_DESKTOP_URL=http://127.0.0.1:<port>. --disk boots a disk through its own
bootloader instead (OSWorld's Ubuntu.qcow2; docs/vm-desktops.md).
"""

from __future__ import annotations

import argparse
import json
import signal
import sys
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

from kubecua_episode.vm.runner import VmError, VmRunner, VmSpec


def parse(argv: list[str] | None) -> tuple[VmSpec, argparse.Namespace]:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    src = p.add_mutually_exclusive_group(required=True)
    src.add_argument("--disk-dir", type=Path, help="hack/build-vm-disk.sh's output directory")
    src.add_argument("--disk", type=Path, help="a qcow2 that boots itself (e.g. Ubuntu.qcow2)")
    p.add_argument("--workdir", type=Path, required=True)
    p.add_argument("--port", type=int, default=5000, help="host port of the guest's :5000")
    p.add_argument("--control-port", type=int, default=5100)
    p.add_argument("--token-file", type=Path)
    p.add_argument("--memory-mb", type=int, default=2048)
    p.add_argument("--cpus", type=int, default=2)
    p.add_argument("--screen", default="1920x1080", help="WIDTHxHEIGHT of the guest's display")
    p.add_argument("--cdp-port", type=int, help="host port of the guest's :9222 (else a free one)")
    p.add_argument("--vlc-port", type=int, help="host port of the guest's :8080 (else a free one)")
    a = p.parse_args(argv)
    token = a.token_file.read_text().strip() if a.token_file else ""
    kw = {"memory_mb": a.memory_mb, "cpus": a.cpus, "token": token, "screen": a.screen}
    spec = VmSpec.from_built_disk(a.disk_dir, **kw) if a.disk_dir else VmSpec(disk=a.disk, **kw)
    return spec, a


def serve(runner: VmRunner, port: int) -> ThreadingHTTPServer:
    lock = threading.Lock()  # one restore at a time

    class Handler(BaseHTTPRequestHandler):
        def _answer(self, code: int, body: dict[str, object]) -> None:
            data = json.dumps(body).encode()
            self.send_response(code)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def do_GET(self) -> None:
            if self.path != "/healthz":
                return self._answer(404, {"detail": "not found"})
            ready = runner.state == "ready" and runner.snapshotted
            self._answer(
                200 if ready else 503,
                {"state": runner.state, "rebuilds": runner.rebuilds, "restores": runner.restores},
            )

        def do_POST(self) -> None:
            if self.path != "/restore":
                return self._answer(404, {"detail": "not found"})
            with lock:
                try:
                    self._answer(200, {"restore_s": runner.restore()})
                except VmError as exc:
                    self._answer(503, {"detail": str(exc), "rebuilds": runner.rebuilds})

        def log_message(self, *args: object) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", port), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server


def main(argv: list[str] | None = None) -> None:
    try:
        spec, a = parse(argv)
        forwards = {9222: a.cdp_port, 8080: a.vlc_port}
        runner = VmRunner(
            spec, a.workdir, port=a.port, forwards={g: h for g, h in forwards.items() if h}
        )
    except (VmError, OSError) as exc:
        sys.exit(f"kubecua-vm: {exc}")
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
    try:
        # The control port answers from the start (503 "booting" until the snapshot is taken):
        # the episode server beside it reports the VM's state rather than a refused connection.
        server = serve(runner, a.control_port)
        boot_s = runner.boot()
        snap_s = runner.snapshot()
        print(json.dumps({"desktop_url": runner.url, "boot_s": boot_s, "snapshot_s": snap_s}))
        sys.stdout.flush()
        signal.pause()
        server.shutdown()
    except VmError as exc:
        sys.exit(f"kubecua-vm: {exc}")
    finally:
        runner.stop()


if __name__ == "__main__":
    main()
