"""A local desktop session: Xvfb, session D-Bus, AT-SPI bus, openbox, wallpaper, desktop server.

Several sessions run side by side on one machine when each has its own display, ports and home.
Ready means the desktop server answers /screenshot with a picture that is not black.
"""

from __future__ import annotations

import io
import logging
import os
import shutil
import subprocess
import sys
import tempfile
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import cast

import httpx
from PIL import Image

from kubecua_desktop.session import start_state
from kubecua_desktop.session.config import SessionConfig
from kubecua_desktop.session.procs import Child, read_line_from_fd
from kubecua_desktop.session.setup_home import prepare_home
from kubecua_desktop.session.xserver import start_xvfb

WRAPPER = Path(__file__).resolve().parent / "google-chrome"
SOCAT = Path(__file__).resolve().parent / "socat"  # listening ports reused across episodes
# A hard link beside Chromium's resources, made by install/install-desktop.sh: the browser then
# runs as "chrome" (a symlink is not enough, Chromium re-executes its real path).
CHROME_LINK = Path("/usr/lib/chromium/chrome")
CHROMIUM = Path("/usr/lib/chromium/chromium")
log = logging.getLogger(__name__)
OPENBOX_RC = Path("/etc/xdg/openbox/rc.xml")
TERMINAL_KEY = """<keyboard>
  <keybind key="C-A-t">
    <action name="Execute"><command>gnome-terminal</command></action>
  </keybind>"""
# No hardware here: a null sink stands in for the speakers, at the start state's volume (a null
# sink starts at 100%, where OSWorld's VM does not; start_state.py).
PULSE_SCRIPT = """load-module module-native-protocol-unix auth-anonymous=1
load-module module-null-sink sink_name=kubecua sink_properties=device.description=Speakers
set-default-sink kubecua
"""


@dataclass
class SessionInfo:
    display: str
    url: str
    port: int
    cdp_port: int
    vlc_port: int
    home: str
    runtime_dir: str
    dbus_address: str
    env: dict[str, str]


class DesktopSession:
    def __init__(self, config: SessionConfig) -> None:
        self.config = config
        self.children: list[Child] = []
        self._own_runtime = config.runtime_dir is None
        self.runtime = config.runtime_dir or Path(tempfile.mkdtemp(prefix="kubecua-session-"))
        self.runtime.mkdir(mode=0o700, parents=True, exist_ok=True)
        self.logs = self.runtime / "logs"
        self.logs.mkdir(exist_ok=True)
        self.env = self._base_env()
        self.info: SessionInfo | None = None

    def _base_env(self) -> dict[str, str]:
        c = self.config
        bin_dir = self.runtime / "bin"
        bin_dir.mkdir(exist_ok=True)
        shutil.copy(WRAPPER, bin_dir / "google-chrome")
        shutil.copy(SOCAT, bin_dir / "socat")
        chrome = CHROME_LINK
        if not CHROME_LINK.exists():
            log.warning("%s missing (run install-desktop.sh): `pkill chrome` will miss it", chrome)
            chrome = CHROMIUM
        path = os.pathsep.join([str(Path(sys.executable).parent), str(bin_dir), os.environ["PATH"]])
        env = {
            k: v for k, v in os.environ.items() if not k.startswith(("DBUS_", "XDG_", "DISPLAY"))
        }
        for secret_or_noise in ("NO_AT_BRIDGE", "KUBECUA_SANDBOX_TOKEN"):
            env.pop(secret_or_noise, None)
        xauthority = self.runtime / "Xauthority"  # filled by start_xvfb
        env.update(
            HOME=str(c.home), PATH=path, XDG_RUNTIME_DIR=str(self.runtime),
            XAUTHORITY=str(xauthority),
            KUBECUA_CHROME_BIN=str(chrome), KUBECUA_CDP_PORT=str(c.cdp_port),
            KUBECUA_VLC_PORT=str(c.vlc_port), GTK_A11Y="atspi", QT_ACCESSIBILITY="1",
            SAL_USE_VCLPLUGIN="gtk3",
        )  # fmt: skip
        return env

    def _spawn(self, name: str, argv: list[str], pass_fds: tuple[int, ...] = ()) -> Child:
        child = Child(name, argv, self.env, self.logs, pass_fds)
        self.children.append(child)
        return child

    def start(self) -> SessionInfo:
        try:
            self._start_x()
            self._start_dbus()
            self._start_atspi()
            self._start_wm()
            self._start_audio()
            prepare_home(self.config, self.env)
            return self._start_server()
        except BaseException:
            self.stop()
            raise

    def start_display_only(self) -> None:
        """Xvfb, window manager and wallpaper without the server (benchmarks, debugging)."""
        try:
            self._start_x()
            self._start_dbus()
            self._start_wm()
            prepare_home(self.config, self.env)
        except BaseException:
            self.stop()
            raise

    def _start_x(self) -> None:
        c = self.config
        geometry = f"{c.width}x{c.height}x24"
        xauthority = Path(self.env["XAUTHORITY"])
        display = start_xvfb(self._spawn, c.display, geometry, xauthority, c.start_timeout_s)
        self.env["DISPLAY"] = display

    def _start_dbus(self) -> None:
        read_fd, write_fd = os.pipe()
        argv = ["dbus-daemon", "--session", "--nofork", f"--print-address={write_fd}"]
        argv.append(f"--address=unix:path={self.runtime / 'bus'}")
        dbus = self._spawn("dbus", argv, (write_fd,))
        os.close(write_fd)
        try:
            address = read_line_from_fd(read_fd, dbus, self.config.start_timeout_s, "listening")
        finally:
            os.close(read_fd)
        self.env["DBUS_SESSION_BUS_ADDRESS"] = address

    def _start_atspi(self) -> None:
        bus = self._spawn("at-spi", ["/usr/libexec/at-spi-bus-launcher", "--launch-immediately"])
        ask = ["dbus-send", "--session", "--print-reply", "--dest=org.a11y.Bus", "/org/a11y/bus"]
        ask.append("org.a11y.Bus.GetAddress")
        bus.wait_until(lambda: self._ok(ask), self.config.start_timeout_s, "serving org.a11y.Bus")
        self._ok(
            ["gsettings", "set", "org.gnome.desktop.interface", "toolkit-accessibility", "true"]
        )

    def _start_wm(self) -> None:
        argv = ["openbox", "--sm-disable"]
        if OPENBOX_RC.exists():  # Debian's default bindings plus Ctrl+Alt+T, as on Ubuntu
            config = self.runtime / "openbox-rc.xml"
            config.write_text(OPENBOX_RC.read_text().replace("<keyboard>", TERMINAL_KEY, 1))
            argv += ["--config-file", str(config)]
        wm = self._spawn("openbox", argv)
        wm.wait_until(self._has_wm, self.config.start_timeout_s, "managing the screen")

    def _start_audio(self) -> None:
        """PulseAudio with one null sink ("Speakers"), so volume tasks have a sink to turn.
        Its socket is $XDG_RUNTIME_DIR/pulse/native, where pactl and apps look."""
        if shutil.which("pulseaudio") is None:
            log.warning("pulseaudio missing: no sound device (volume tasks will fail)")
            return
        script = self.runtime / "pulse.pa"
        script.write_text(PULSE_SCRIPT + "\n".join(start_state.pulse_commands("kubecua")) + "\n")
        argv = ["pulseaudio", "--daemonize=no", "--exit-idle-time=-1", "--use-pid-file=no",
                "-n", "-F", str(script), "--log-target=stderr"]  # fmt: skip
        pulse = self._spawn("pulseaudio", argv)
        pulse.wait_until(lambda: self._ok(["pactl", "info"], "kubecua"),
                         self.config.start_timeout_s, "serving its sink")  # fmt: skip

    def _has_wm(self) -> bool:
        # An EWMH window manager announces itself on the root window.
        return self._ok(["xprop", "-root", "-notype", "_NET_SUPPORTING_WM_CHECK"], "window id")

    def _ok(self, argv: list[str], expect: str = "") -> bool:
        try:
            done = subprocess.run(argv, env=self.env, capture_output=True, text=True, timeout=10)
        except (OSError, subprocess.TimeoutExpired):
            return False
        return done.returncode == 0 and expect in done.stdout

    def _start_server(self) -> SessionInfo:
        c = self.config
        server_env = dict(self.env, KUBECUA_SANDBOX_TOKEN=c.token or "")
        if c.trust_loopback:
            server_env["KUBECUA_DESKTOP_TRUST_LOOPBACK"] = "1"
        argv = [sys.executable, "-m", "kubecua_desktop", "--host", c.host, "--port", str(c.port)]
        # Apps it launches (a terminal, say) start in the home directory, as on OSWorld's image.
        child = Child("desktop-server", argv, server_env, self.logs, cwd=c.home)
        self.children.append(child)
        url = f"http://{'127.0.0.1' if c.host in ('0.0.0.0', '::') else c.host}:{c.port}"
        child.wait_until(lambda: self._screen_ready(url), c.start_timeout_s, "showing a screen")
        self.info = SessionInfo(
            display=self.env["DISPLAY"], url=url, port=c.port, cdp_port=c.cdp_port,
            vlc_port=c.vlc_port, home=str(c.home), runtime_dir=str(self.runtime),
            dbus_address=self.env["DBUS_SESSION_BUS_ADDRESS"], env=dict(self.env),
        )  # fmt: skip
        return self.info

    def _screen_ready(self, url: str) -> bool:
        headers = {"Authorization": f"Bearer {self.config.token}"} if self.config.token else {}
        try:
            response = httpx.get(f"{url}/screenshot", headers=headers, timeout=5)
        except httpx.HTTPError:
            return False
        return response.status_code == 200 and not is_black(response.content)

    def stop(self) -> None:
        """Stop every component, newest first; safe to call twice."""
        while self.children:
            self.children.pop().stop()
        if self._own_runtime:
            shutil.rmtree(self.runtime, ignore_errors=True)

    def as_dict(self) -> dict[str, object]:
        return asdict(self.info) if self.info else {}


def is_black(png: bytes, threshold: int = 8) -> bool:
    """True if no channel of any pixel exceeds threshold (OSWorld's 'black screen' failure)."""
    extrema = cast(
        tuple[tuple[int, int], ...], Image.open(io.BytesIO(png)).convert("RGB").getextrema()
    )
    return all(high <= threshold for _, high in extrema)
