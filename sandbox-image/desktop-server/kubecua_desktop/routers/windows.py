"""Windows and wallpaper: /setup/activate_window, /setup/close_window, /wallpaper,
/setup/change_wallpaper."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Depends, HTTPException
from fastapi.responses import FileResponse, PlainTextResponse

from kubecua_desktop.deps import get_desktop, get_settings
from kubecua_desktop.desktop import Desktop
from kubecua_desktop.models import PathRequest, WindowRequest
from kubecua_desktop.paths import resolve_safe
from kubecua_desktop.settings import Settings

router = APIRouter()
DesktopDep = Annotated[Desktop, Depends(get_desktop)]


@router.post("/setup/activate_window", response_class=PlainTextResponse)
def activate_window(req: WindowRequest, desktop: DesktopDep) -> str:
    if not desktop.activate_window(req.window_name, req.strict, req.by_class):
        raise HTTPException(404, f"window {req.window_name!r} not found")
    return "Window activated successfully"


@router.post("/setup/close_window", response_class=PlainTextResponse)
def close_window(req: WindowRequest, desktop: DesktopDep) -> str:
    if not desktop.close_window(req.window_name, req.strict, req.by_class):
        raise HTTPException(404, f"window {req.window_name!r} not found")
    return "Window closed successfully."


@router.post("/wallpaper")
def wallpaper(desktop: DesktopDep) -> FileResponse:
    path = desktop.wallpaper_path()
    if path is None or not path.is_file():
        raise HTTPException(404, f"wallpaper file not found ({path})")
    return FileResponse(path, media_type="image/png")


@router.post("/setup/change_wallpaper", response_class=PlainTextResponse)
def change_wallpaper(
    req: PathRequest, desktop: DesktopDep, settings: Annotated[Settings, Depends(get_settings)]
) -> str:
    path = resolve_safe(req.path, settings.file_roots)
    if not path.is_file():
        raise HTTPException(404, f"File not found: {path}")
    desktop.set_wallpaper(path)
    return "Wallpaper changed successfully"
