"""Screen recording: /start_recording, /end_recording (the mp4)."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Depends, HTTPException
from fastapi.responses import FileResponse

from kubecua_desktop.deps import get_recorder
from kubecua_desktop.recorder import Recorder, RecordingError

router = APIRouter()
RecorderDep = Annotated[Recorder, Depends(get_recorder)]


@router.post("/start_recording")
def start_recording(recorder: RecorderDep) -> dict[str, str]:
    try:
        recorder.start()
    except RecordingError as exc:
        raise HTTPException(409 if recorder.active else 500, str(exc)) from exc
    return {"status": "success", "message": "Started recording successfully."}


@router.post("/end_recording")
def end_recording(recorder: RecorderDep) -> FileResponse:
    try:
        path = recorder.stop()
    except RecordingError as exc:
        raise HTTPException(400 if "no recording" in str(exc) else 500, str(exc)) from exc
    return FileResponse(path, media_type="video/mp4", filename="recording.mp4")
