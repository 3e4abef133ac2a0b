"""Screen recording through ffmpeg x11grab: the answer to /end_recording is a playable mp4."""

from __future__ import annotations

import json
import shutil
import subprocess

import pytest

from tests.conftest import Desktop, run


def test_recording_produces_an_mp4(desktop: Desktop, tmp_path: object) -> None:
    if shutil.which("ffmpeg") is None:
        pytest.skip("ffmpeg is not installed: run `make setup-apt`")
    assert desktop.client.post("/start_recording").json()["status"] == "success"
    assert desktop.client.post("/start_recording").status_code == 409  # one at a time
    for x in range(100, 700, 100):  # some motion while recording
        run(desktop, ["xdotool", "mousemove", str(x), "300"])
    response = desktop.client.post("/end_recording")
    assert response.status_code == 200
    assert response.headers["content-type"] == "video/mp4"
    assert response.content[4:8] == b"ftyp"
    video = desktop.home / "out.mp4"
    video.write_bytes(response.content)
    probe = subprocess.run(
        ["ffprobe", "-v", "error", "-show_streams", "-of", "json", str(video)],
        capture_output=True, text=True, check=True,
    )  # fmt: skip
    stream = json.loads(probe.stdout)["streams"][0]
    assert (stream["codec_name"], stream["width"], stream["height"]) == ("h264", 1280, 720)


def test_end_recording_without_start_is_400(desktop: Desktop) -> None:
    response = desktop.client.post("/end_recording")
    assert response.status_code == 400
    assert "no recording" in response.json()["detail"]
