"""Shared route dependencies: the objects created once in app.create_app. `async def`: they
only read app state, and a sync dependency costs a threadpool hop (~0.25 ms) on every request."""

from __future__ import annotations

from fastapi import Request

from kubecua_desktop.desktop import Desktop
from kubecua_desktop.procs import Launcher
from kubecua_desktop.recorder import Recorder
from kubecua_desktop.settings import Settings
from kubecua_desktop.warm import WarmPython


async def get_settings(request: Request) -> Settings:
    settings: Settings = request.app.state.settings
    return settings


async def get_desktop(request: Request) -> Desktop:
    desktop: Desktop = request.app.state.desktop
    return desktop


async def get_launcher(request: Request) -> Launcher:
    launcher: Launcher = request.app.state.launcher
    return launcher


async def get_recorder(request: Request) -> Recorder:
    recorder: Recorder = request.app.state.recorder
    return recorder


async def get_warm(request: Request) -> WarmPython | None:
    warm: WarmPython | None = request.app.state.warm
    return warm
