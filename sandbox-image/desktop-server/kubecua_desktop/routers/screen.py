"""Screen and accessibility: /screenshot, sizes, cursor, platform, /accessibility, /terminal."""

from __future__ import annotations

import io
from typing import Annotated, Literal

from fastapi import APIRouter, Depends, Form, HTTPException, Query, Response
from fastapi.responses import PlainTextResponse
from PIL import Image

from kubecua_desktop.deps import get_desktop, get_settings
from kubecua_desktop.desktop import Desktop
from kubecua_desktop.models import ScreenSize
from kubecua_desktop.png import encode_png
from kubecua_desktop.settings import Settings

router = APIRouter()
DesktopDep = Annotated[Desktop, Depends(get_desktop)]


def encode(image: Image.Image, fmt: str, quality: int, png_level: int) -> bytes:
    if fmt == "png":
        return encode_png(image, png_level)
    buffer = io.BytesIO()
    image.save(buffer, "JPEG", quality=quality)
    return buffer.getvalue()


@router.get("/screenshot")
def screenshot(
    desktop: DesktopDep,
    settings: Annotated[Settings, Depends(get_settings)],
    format: Literal["png", "jpeg"] = "png",
    quality: Annotated[int, Query(ge=1, le=100)] = 90,
) -> Response:
    """PNG of the whole screen with the cursor (OSWorld); ?format=jpeg is a kubecua extension."""
    data = encode(desktop.screenshot(), format, quality, settings.png_compress_level)
    return Response(data, media_type=f"image/{format}")


@router.post("/screen_size")
def screen_size(desktop: DesktopDep) -> ScreenSize:
    width, height = desktop.screen_size()
    return ScreenSize(width=width, height=height)


@router.post("/window_size")
def window_size(desktop: DesktopDep, app_class_name: Annotated[str, Form()]) -> ScreenSize:
    size = desktop.window_size(app_class_name)
    if size is None:
        raise HTTPException(404, f"no window with class {app_class_name!r}")
    return ScreenSize(width=size[0], height=size[1])


@router.get("/cursor_position")
def cursor_position(desktop: DesktopDep) -> list[int]:
    return list(desktop.cursor_position())


@router.get("/platform", response_class=PlainTextResponse)
def platform_name(desktop: DesktopDep) -> str:
    return desktop.platform_name


@router.get("/accessibility")
def accessibility(desktop: DesktopDep) -> dict[str, str]:
    return {"AT": desktop.accessibility_tree()}


@router.get("/terminal")
def terminal(desktop: DesktopDep) -> dict[str, str | None]:
    return {"output": desktop.terminal_output(), "status": "success"}
