"""Screen recording for /start_recording and /end_recording: one ffmpeg at a time."""

from __future__ import annotations

import signal
import subprocess
import threading
import time
from pathlib import Path

from kubecua_desktop.desktop import Desktop

START_DEADLINE_S = 10.0
STOP_DEADLINE_S = 20.0


class RecordingError(RuntimeError):
    """Recording could not start or produced no file (message says why)."""


class Recorder:
    def __init__(self, desktop: Desktop, directory: Path) -> None:
        self.desktop = desktop
        self.output = directory / "kubecua-recording.mp4"
        self.log = directory / "kubecua-recording.log"
        self._proc: subprocess.Popen[bytes] | None = None
        self._lock = threading.Lock()

    @property
    def active(self) -> bool:
        return self._proc is not None and self._proc.poll() is None

    def start(self) -> None:
        with self._lock:
            if self.active:
                raise RecordingError("a recording is already in progress")
            self.output.unlink(missing_ok=True)
            with self.log.open("wb") as log:
                self._proc = subprocess.Popen(
                    self.desktop.recording_command(self.output),
                    stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=log,
                )  # fmt: skip
            self._wait_started(self._proc)

    def _wait_started(self, proc: subprocess.Popen[bytes]) -> None:
        # ffmpeg creates the output once its first frames are muxed: that is "started".
        deadline = time.monotonic() + START_DEADLINE_S
        while time.monotonic() < deadline:
            if proc.poll() is not None:
                self._proc = None
                raise RecordingError(f"ffmpeg exited at start: {self._log_tail()}")
            if self.output.exists():
                return
            time.sleep(0.05)
        # Running but slow to write: still recording; /end_recording will tell.

    def stop(self) -> Path:
        with self._lock:
            proc, self._proc = self._proc, None
            if proc is None or proc.poll() is not None:
                raise RecordingError("no recording in progress")
            proc.send_signal(signal.SIGINT)  # lets ffmpeg write the mp4 trailer
            try:
                proc.wait(timeout=STOP_DEADLINE_S)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
                raise RecordingError("ffmpeg ignored SIGINT and was killed") from None
            if not self.output.exists() or self.output.stat().st_size == 0:
                raise RecordingError(f"recording is missing or empty: {self._log_tail()}")
            return self.output

    def abort(self) -> None:
        with self._lock:
            if self._proc is not None and self._proc.poll() is None:
                self._proc.kill()
                self._proc.wait()
            self._proc = None

    def _log_tail(self) -> str:
        try:
            return self.log.read_text(errors="replace")[-800:]
        except OSError:
            return ""
