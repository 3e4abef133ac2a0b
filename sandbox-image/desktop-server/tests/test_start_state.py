"""A fresh desktop session starts where OSWorld's VM starts (osworld_start_state.toml): every value
of the profile read back from the running desktop through the tools tasks use (gsettings, pactl)
and the files apps read (vlcrc, LibreOffice's registry, Chrome's Preferences and Web Data), and
Chrome started as a task starts it leaves its profile so. desktop-env's own getters read the same
values in sandbox-image/episode-server/tests/test_start_state.py."""

from __future__ import annotations

import json
import os
import re
import sqlite3
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from xml.etree import ElementTree

import pytest

from kubecua_desktop.session import chrome_profile, start_state, window_geometry
from tests.conftest import HEIGHT, WIDTH, Desktop, free_port, run, start_desktop, wait_for

CHROME = start_state.load()["chrome"]
WINDOWS = start_state.windows()


def _sh(desktop: Desktop, command: str) -> dict[str, Any]:
    return dict(run(desktop, command, shell=True))


def _engines(user_data: Path) -> dict[str, int]:
    """Prepopulated engine name -> prepopulate id, from the profile's Web Data (read-only)."""
    uri = f"file:{user_data / 'Default/Web Data'}?mode=ro&immutable=1"
    with sqlite3.connect(uri, uri=True) as db:
        rows = db.execute(
            "select short_name, prepopulate_id from keywords where prepopulate_id > 0"
        )
        return dict(rows.fetchall())


def _preferences(user_data: Path) -> dict[str, Any]:
    return dict(json.loads((user_data / "Default/Preferences").read_text()))


def _default_engine(prefs: dict[str, Any]) -> str:
    data = prefs.get("default_search_provider_data", {}).get("template_url_data", {})
    return str(data.get("short_name", "Google"))  # desktop-env's getter: absent means Google


def test_gnome_settings_start_at_the_start_states_values(desktop: Desktop) -> None:
    wrong = {}
    for s in start_state.dconf_settings():
        got = _sh(desktop, f"gsettings get {s.schema} {s.key}")
        if got["returncode"] != 0 or got["output"].strip() != s.value:
            wrong[f"{s.schema} {s.key}"] = (got["output"].strip() or got["error"], s.value)
    assert not wrong, wrong


def test_screen_lock_and_blanking_are_off_on_a_fresh_desktop(desktop: Desktop) -> None:
    """The keys a 'turn on automatic screen lock' task checks read as on OSWorld's VM, and the
    dimming task's key (bedcedc4) starts on, so its no-op fails as it does there."""
    lock = _sh(desktop, "gsettings get org.gnome.desktop.screensaver lock-enabled")["output"]
    idle = _sh(desktop, "gsettings get org.gnome.desktop.session idle-delay")["output"]
    dim = _sh(desktop, "gsettings get org.gnome.settings-daemon.plugins.power idle-dim")["output"]
    assert (lock, idle, dim) == ("false\n", "uint32 0\n", "true\n")


def test_sound_starts_below_full_volume_unmuted(desktop: Desktop) -> None:
    volume = _sh(desktop, "pactl get-sink-volume @DEFAULT_SINK@")["output"]
    percents = set(re.findall(r"(\d+)%", volume))
    assert percents == {str(start_state.load()["audio"]["volume_percent"])}, volume
    assert _sh(desktop, "pactl get-sink-mute @DEFAULT_SINK@")["output"].strip() == "Mute: no"


def test_vlc_config_turns_on_its_web_interface_with_osworlds_password(desktop: Desktop) -> None:
    lines = (desktop.home / ".config/vlc/vlcrc").read_text().splitlines()
    found = dict(line.split("=", 1) for line in lines if "=" in line)
    assert start_state.vlc_settings().items() <= found.items()
    assert lines.index("[qt]") < lines.index("qt-privacy-ask=0")  # VLC's sections, as tasks edit
    assert found["http-port"] == str(desktop.info.vlc_port)


def _xcu_items(xcu: Path) -> dict[tuple[str, str], str | None]:
    """(path, name) -> value of a LibreOffice registry file, read as XML: LibreOffice rewrites
    the file when it quits (quotes in paths become &apos;), so the text is not ours to match."""
    oor = "{http://openoffice.org/2001/registry}"
    items = {}
    for item in ElementTree.parse(xcu).getroot().iter("item"):
        for prop in item.iter("prop"):
            value = prop.find("value")
            items[item.get(f"{oor}path", ""), prop.get(f"{oor}name", "")] = (
                value.text if value is not None else None
            )
    return items


def test_libreoffice_profile_holds_every_start_state_item(desktop: Desktop) -> None:
    """Holds whether or not LibreOffice ran first in this session (it rewrites the profile)."""
    items = _xcu_items(desktop.home / ".config/libreoffice/4/user/registrymodifications.xcu")
    wrong = {
        (path, name): (items.get((path, name)), value)
        for path, name, value in start_state.libreoffice_items()
        if items.get((path, name)) != value
    }
    assert not wrong, wrong


def test_chrome_profile_starts_with_chromes_engines_and_google(desktop: Desktop) -> None:
    user_data = desktop.home / ".config/google-chrome"
    engines = _engines(user_data)  # Chromium's list follows its country: Chrome's names, trimmed
    assert set(engines) <= set(CHROME["engines"])
    assert engines["Google"] == 1
    assert engines["Bing"] == 3  # Chrome's Bing, renamed, not a new engine
    prefs = _preferences(user_data)
    assert _default_engine(prefs) == CHROME["default_engine"]
    assert "default_content_setting_values" not in prefs.get("profile", {})
    assert (user_data / "First Run").exists()
    assert (desktop.home / ".local/share/keyrings/login.keyring").exists()


def test_chrome_window_placement_is_the_sessions_screen_and_no_template_carries_one(
    desktop: Desktop,
) -> None:
    """The headless Chromium that makes the template records a placement for its 800x600
    screen; Chrome restored it (a 780x580 window at the top left). The template holds none, and
    the home holds the start state's (maximised) for this session's screen."""
    template = chrome_profile.template_for(Path(desktop.info.env["KUBECUA_CHROME_BIN"]))
    assert "window_placement" not in _preferences(template).get("browser", {})
    placement = _preferences(desktop.home / ".config/google-chrome")["browser"]["window_placement"]
    assert placement["maximized"] is (start_state.window("chrome")["state"] == "maximized")
    assert (placement["work_area_right"], placement["work_area_bottom"]) == (WIDTH, HEIGHT)
    assert (placement["work_area_left"], placement["work_area_top"]) == (0, 0)


def test_chrome_started_by_a_task_keeps_the_profile_without_a_migration_marker(
    desktop: Desktop,
) -> None:
    """OSWorld's tasks start `google-chrome --remote-debugging-port=1337`; the browser's first
    start must not write profile.default_content_setting_values, nor change the engines."""
    if _sh(desktop, "command -v google-chrome")["returncode"] != 0:
        pytest.skip("google-chrome wrapper not on the session PATH")
    user_data = desktop.home / ".config/google-chrome"
    before = (user_data / "Default/Preferences").stat().st_mtime_ns
    port = free_port()
    launched = desktop.client.post(
        "/setup/launch", json={"command": ["google-chrome", f"--remote-debugging-port={port}"]}
    )
    assert launched.status_code == 200, launched.text
    try:
        wait_for(lambda: "chrome" in _sh(desktop, "wmctrl -lx")["output"].lower(), 90,
                 "a Chrome window")  # fmt: skip
    finally:
        # Closed as a user closes it (the episode server does the same before profile getters):
        # Chromium writes its whole profile.
        _sh(
            desktop, "wmctrl -lx | awk 'tolower($3) ~ /chrom/ {print $1}' | xargs -rn1 wmctrl -i -c"
        )
        mine = 'pgrep -f -- "--user-data-dir=$HOME/.config/google-chrome"'  # not other sessions'
        wait_for(lambda: _sh(desktop, mine)["returncode"] != 0, 60, "Chrome to exit")
    assert (user_data / "Default/Preferences").stat().st_mtime_ns != before, "Chrome never wrote"
    prefs = _preferences(user_data)
    assert "default_content_setting_values" not in prefs["profile"], prefs["profile"]
    assert _default_engine(prefs) == "Google"
    assert set(_engines(user_data)) <= set(CHROME["engines"])
    assert {"Google", "Bing"} <= set(_engines(user_data))


def test_chrome_wrapper_joins_its_disabled_feature_to_a_tasks_own_list() -> None:
    """Chromium keeps only the last --disable-features: a task's own list must not drop the one
    that stops the migration marker (run with `echo` standing in for Chromium)."""
    wrapper = Path(start_state.__file__).with_name("google-chrome")
    env = {"PATH": "/usr/bin:/bin", "HOME": "/home/user", "KUBECUA_CHROME_BIN": "/bin/echo"}

    def argv(*args: str) -> list[str]:
        done = subprocess.run(["sh", str(wrapper), *args], env=env, capture_output=True,
                              text=True, check=True)  # fmt: skip
        return done.stdout.split()

    own = argv("--disable-features=Translate", "--remote-debugging-port=1337")
    assert [a for a in own if a.startswith("--disable-features")] == [
        "--disable-features=Translate,LocalNetworkAccessChecks"
    ]
    plain = argv("--remote-debugging-port=1337")
    assert "--disable-features=LocalNetworkAccessChecks" in plain
    assert plain[-1] == "--remote-debugging-port=1337"


@pytest.fixture(scope="module")
def osworld_screen(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Desktop]:
    """A fresh desktop of OSWorld's size for the window tests: the shared desktop is 1280x720,
    where GIMP's own 1024x768 window at 200,100 would not fit as it does on the VM."""
    with start_desktop(tmp_path_factory.mktemp("osworld-home"), 1920, 1080) as d:
        yield d


def _close_app(desktop: Desktop, entry: dict[str, Any]) -> None:
    """Closes the app's windows as a user would, so the next app opens on an empty desktop
    (placement depends on what is already there); the ones that stay are killed by their pid."""

    def left() -> list[window_geometry.Window]:
        screen = window_geometry.parse(_sh(desktop, window_geometry.SCRIPT)["output"])
        return [w for w in screen.windows if w.wm_class == entry["wm_class"]]

    for w in left():
        _sh(desktop, f"wmctrl -i -c {w.id}")
    try:
        wait_for(lambda: not left(), 60, f"{entry['app']}'s windows to close")
    except AssertionError:
        for w in left():
            _sh(desktop, f"kill $(xprop -id {w.id} _NET_WM_PID | sed -n 's/.*= //p')")
        wait_for(lambda: not left(), 30, f"{entry['app']} to exit")


@pytest.mark.parametrize("entry", WINDOWS, ids=[e["app"] for e in WINDOWS])
def test_each_app_opens_where_osworlds_vm_opens_it(
    osworld_screen: Desktop, entry: dict[str, Any], capsys: pytest.CaptureFixture[str]
) -> None:
    """Started as a task's `launch` step starts it, on an empty 1920x1080 desktop: maximised,
    centred or at its own place as [[window]] says; its first frame goes to the output folder."""
    desktop = osworld_screen
    if entry["app"] == "vlc" and os.geteuid() == 0:
        pytest.skip("VLC refuses to run as root; the episode server's test_start_state.py runs "
                    "it as the desktop account")  # fmt: skip
    if _sh(desktop, f"command -v {entry['launch'][0]}")["returncode"] != 0:
        pytest.skip(f"{entry['launch'][0]} is not on the desktop's PATH (make setup-apt)")
    launched = desktop.client.post("/setup/launch", json={"command": entry["launch"]})
    assert launched.status_code == 200, launched.text

    def read() -> str:
        return str(_sh(desktop, window_geometry.SCRIPT)["output"])

    try:
        window_geometry.wait_where(read, entry, 240)
        frame = window_geometry.painted(lambda: desktop.client.get("/screenshot").content)
        folder = window_geometry.output_dir("desktop-server")
        (folder / f"{entry['app']}.png").write_bytes(frame)
        with capsys.disabled():
            print(f"\n{entry['app']}'s first frame: {folder / (entry['app'] + '.png')}")
        _, wrong = window_geometry.where(window_geometry.parse(read()), entry)
        assert wrong is None, f"moved after it opened: {wrong}"
    finally:
        _close_app(desktop, entry)
