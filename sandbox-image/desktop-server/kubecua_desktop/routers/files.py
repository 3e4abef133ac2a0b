"""Files: /file, /setup/upload, /list_directory, /desktop_path, /setup/download_file,
/setup/open_file. Every path goes through paths.resolve_safe."""

from __future__ import annotations

import shutil
from typing import Annotated, Any

from fastapi import APIRouter, Depends, Form, HTTPException, UploadFile
from fastapi.responses import FileResponse, PlainTextResponse

from kubecua_desktop import files
from kubecua_desktop.deps import get_desktop, get_launcher, get_settings
from kubecua_desktop.desktop import Desktop
from kubecua_desktop.models import DownloadRequest, PathRequest
from kubecua_desktop.paths import resolve_safe
from kubecua_desktop.procs import Launcher
from kubecua_desktop.settings import Settings

router = APIRouter()
SettingsDep = Annotated[Settings, Depends(get_settings)]


@router.post("/file")
def get_file(file_path: Annotated[str, Form()], settings: SettingsDep) -> FileResponse:
    path = resolve_safe(file_path, settings.file_roots)
    if not path.is_file():
        raise HTTPException(404, f"file not found: {file_path}")
    return FileResponse(path, filename=path.name)


@router.post("/setup/upload", response_class=PlainTextResponse)
def upload(file_path: Annotated[str, Form()], file_data: UploadFile, settings: SettingsDep) -> str:
    size = files.save_stream(file_data.file, resolve_safe(file_path, settings.file_roots))
    return f"File Uploaded: {size} bytes"


@router.post("/list_directory")
def list_directory(req: PathRequest, settings: SettingsDep) -> dict[str, Any]:
    root = resolve_safe(req.path, settings.file_roots)
    return {"directory_tree": files.directory_tree(root)}


@router.post("/desktop_path")
def desktop_path(desktop: Annotated[Desktop, Depends(get_desktop)]) -> dict[str, str]:
    path = desktop.desktop_path()
    if not path.is_dir():
        raise HTTPException(404, f"desktop path {path} does not exist")
    return {"desktop_path": str(path)}


@router.post("/setup/download_file", response_class=PlainTextResponse)
def download_file(req: DownloadRequest, settings: SettingsDep) -> str:
    size = files.download(req.url, resolve_safe(req.path, settings.file_roots))
    return f"File downloaded successfully: {size} bytes"


@router.post("/setup/open_file", response_class=PlainTextResponse)
def open_file(
    req: PathRequest,
    settings: SettingsDep,
    desktop: Annotated[Desktop, Depends(get_desktop)],
    launcher: Annotated[Launcher, Depends(get_launcher)],
) -> str:
    is_app = "/" not in req.path and "~" not in req.path and shutil.which(req.path)
    path = None if is_app else resolve_safe(req.path, settings.file_roots)
    if path is not None and not path.exists():
        raise HTTPException(404, f"application/file not found: {req.path}")
    return files.open_and_wait(desktop, launcher, req.path, path, settings.open_file_timeout_s)
