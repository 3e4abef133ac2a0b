"""Chrome's profile as OSWorld's Chrome starts: Chrome's engine names and Google as the default
search engine (osworld_start_state.toml, [chrome]), made by Chromium itself.

Search engines live in the profile's "Web Data" database and the chosen one in Preferences,
whose tracked entries carry MACs: Chromium discards a database or preference edited behind its
back (an edited engine name made it drop every engine but the default, tried here). So Chromium
makes the profile: a headless Chromium on a fresh user-data directory, driven over its DevTools
pipe (--remote-debugging-pipe: JSON on fds 3 and 4, no extra library), opens
chrome://settings/search and calls the page's own handlers, as a user's clicks would: make Google
the default, rename engines, remove the ones Chrome does not list. The result is a template,
made once per Chromium version and profile (KUBECUA_CHROME_PROFILE_TEMPLATE, built into the
image, else a cache in the temp directory), and copied into each new home.

The template holds no window placement: the headless Chromium that makes it records one for its
own 800x600 screen, and Chrome restores a saved placement, so every session opened a 780x580 window
at the top left. Each home gets the placement of its own screen instead ([[window]] "chrome" of
osworld_start_state.toml: maximised), as a used Chrome keeps it.

    python -m kubecua_desktop.session.chrome_profile DIR   # make a template in DIR (the image)
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import json
import logging
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from kubecua_desktop.session import start_state

log = logging.getLogger(__name__)
TEMPLATE_ENV = "KUBECUA_CHROME_PROFILE_TEMPLATE"
STAMP = "kubecua-template.json"
# Bumped when what a template holds changes (2: no window placement), so cached ones are remade.
TEMPLATE_FORMAT = 2
# Chrome's inset of a restored (not maximised) window from the work area's edges.
RESTORED_INSET = 10
# What a new profile needs from the template; Chromium makes the rest on its first start.
FILES = ("Local State", "Last Version", "Default/Preferences", "Default/Secure Preferences",
         "Default/Web Data")  # fmt: skip
# chrome://settings/search's handlers (SearchEnginesHandler): ChoiceMadeLocation 1 is
# kSearchSettings, what the settings page itself sends.
LIST_ENGINES = """new Promise((resolve, reject) => {
  const id = 'kubecua-' + Math.random(), previous = window.cr.webUIResponse;
  window.cr.webUIResponse = (cid, ok, response) => {
    if (cid !== id) return previous(cid, ok, response);
    window.cr.webUIResponse = previous; resolve(response);
  };
  chrome.send('getSearchEnginesList', [id]);
  setTimeout(() => reject('no answer to getSearchEnginesList'), 20000);
})"""
PAGE_READY = "!!(window.cr && window.cr.webUIResponse && window.chrome && chrome.send)"


class ProfileError(RuntimeError):
    """Chromium did not make the profile the start state asks for."""


def _chrome_settings() -> dict[str, Any]:
    return dict(start_state.load()["chrome"])


def chromium_identity(binary: Path) -> str:
    """Which Chromium is installed, without starting it: its binary's size and modification time
    (`chrome --version` loads the whole 300 MB browser, which took minutes under a VM's emulator
    at every desktop start). An upgrade changes both; the image and its VM disk keep them."""
    st = binary.resolve().stat()
    return f"{st.st_size}-{st.st_mtime_ns}"


def template_key(binary: Path) -> str:
    """The installed Chromium and the profile's [chrome] table: a template made for others is
    stale."""
    data = json.dumps([TEMPLATE_FORMAT, chromium_identity(binary), _chrome_settings()],
                      sort_keys=True)  # fmt: skip
    return hashlib.sha256(data.encode()).hexdigest()[:16]


class DevToolsPipe:
    """Chromium's DevTools protocol over --remote-debugging-pipe: requests on the child's fd 3,
    answers and events on its fd 4, each message JSON ended by a NUL byte."""

    def __init__(self, argv: list[str]) -> None:
        to_chrome_r, self._to_chrome = os.pipe()
        self._from_chrome, from_chrome_w = os.pipe()

        def fds_3_and_4() -> None:  # in the child: the pipe ends on the numbers Chromium reads
            high_r, high_w = os.dup(to_chrome_r), os.dup(from_chrome_w)
            os.dup2(high_r, 3)
            os.dup2(high_w, 4)

        self.proc = subprocess.Popen(
            argv, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
            preexec_fn=fds_3_and_4, pass_fds=(3, 4), start_new_session=True,
        )  # fmt: skip
        os.close(to_chrome_r)
        os.close(from_chrome_w)
        self._buffer = b""
        self._next = 0

    def call(self, method: str, session: str | None = None, timeout: float = 60.0,
             **params: Any) -> dict[str, Any]:  # fmt: skip
        self._next += 1
        message: dict[str, Any] = {"id": self._next, "method": method, "params": params}
        if session:
            message["sessionId"] = session
        os.write(self._to_chrome, json.dumps(message).encode() + b"\0")
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            while b"\0" in self._buffer:
                raw, self._buffer = self._buffer.split(b"\0", 1)
                answer = json.loads(raw)
                if answer.get("id") == self._next:
                    if "error" in answer:
                        raise ProfileError(f"{method}: {answer['error']}")
                    return dict(answer.get("result", {}))
            chunk = os.read(self._from_chrome, 1 << 16)
            if not chunk:
                raise ProfileError(f"{method}: Chromium closed its DevTools pipe")
            self._buffer += chunk
        raise ProfileError(f"{method}: no answer after {timeout:g} s")

    def evaluate(self, session: str, expression: str) -> Any:
        result = self.call("Runtime.evaluate", session, expression=expression,
                           awaitPromise=True, returnByValue=True)  # fmt: skip
        if "exceptionDetails" in result:
            raise ProfileError(f"{expression[:60]}...: {result['exceptionDetails']}")
        return result["result"].get("value")

    def close(self) -> None:
        with contextlib.suppress(ProfileError, OSError):
            self.call("Browser.close", timeout=30)
        try:
            self.proc.wait(30)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        for fd in (self._to_chrome, self._from_chrome):
            with contextlib.suppress(OSError):
                os.close(fd)


def _engines(pipe: DevToolsPipe, session: str) -> list[dict[str, Any]]:
    """The prepopulated engines as the settings page lists them (not the @-keyword starter pack)."""
    listing = pipe.evaluate(session, LIST_ENGINES)
    return [e for e in listing["defaults"] + listing["others"] if e.get("isPrepopulated")]


def configure_engines(pipe: DevToolsPipe, session: str) -> list[dict[str, Any]]:
    want = _chrome_settings()
    renamed: dict[str, str] = want["renamed_engines"]
    for engine in _engines(pipe, session):
        name = engine["name"]
        if name in renamed:
            args = json.dumps([renamed[name], engine["keyword"], engine["url"]])
            pipe.evaluate(session, f"chrome.send('searchEngineEditStarted', [{engine['id']}])")
            pipe.evaluate(session, f"chrome.send('searchEngineEditCompleted', {args})")
    engines = _engines(pipe, session)
    default = next((e for e in engines if e["name"] == want["default_engine"]), None)
    if default is None:
        raise ProfileError(f"Chromium lists no engine named {want['default_engine']!r}")
    pipe.evaluate(session, f"chrome.send('setDefaultSearchEngine', [{default['id']}, 1, null])")
    for engine in _engines(pipe, session):
        if engine["name"] not in want["engines"] and not engine["default"]:
            pipe.evaluate(session, f"chrome.send('removeSearchEngine', [{engine['id']}])")
    return _engines(pipe, session)


def make_template(binary: Path, dest: Path, timeout: float = 180.0) -> None:
    """A fresh profile made by headless Chromium, configured through its settings page."""
    want = _chrome_settings()
    work = Path(tempfile.mkdtemp(prefix="kubecua-chrome-profile-"))
    try:
        argv = [str(binary), "--headless=new", f"--user-data-dir={work}", "--no-first-run",
                "--no-default-browser-check", "--password-store=basic", "--no-sandbox",
                f"--disable-features={','.join(want['disable_features'])}",
                "--remote-debugging-pipe", "about:blank"]  # fmt: skip
        pipe = DevToolsPipe(argv)
        try:
            target = pipe.call("Target.createTarget", url="chrome://settings/search")["targetId"]
            session = pipe.call("Target.attachToTarget", targetId=target, flatten=True)
            sid = str(session["sessionId"])
            deadline = time.monotonic() + timeout
            while not pipe.evaluate(sid, PAGE_READY):
                if time.monotonic() > deadline:
                    raise ProfileError("chrome://settings/search did not load")
                time.sleep(0.2)
            engines = configure_engines(pipe, sid)
        finally:
            pipe.close()
        strip_window_placement(work / "Default/Preferences")
        names = sorted(e["name"] for e in engines)
        defaults = [e["name"] for e in engines if e["default"]]
        renamed = set(want["renamed_engines"])
        if (
            not set(names) <= set(want["engines"])
            or set(names) & renamed
            or defaults != [want["default_engine"]]
        ):
            raise ProfileError(f"engines {names}, default {defaults}: not the start state's")
        dest.mkdir(parents=True, exist_ok=True)
        for name in FILES:
            if (work / name).exists():
                (dest / name).parent.mkdir(parents=True, exist_ok=True)
                shutil.copy2(work / name, dest / name)
        stamp = {"key": template_key(binary), "engines": names, "default": defaults[0]}
        (dest / STAMP).write_text(json.dumps(stamp))
    finally:
        shutil.rmtree(work, ignore_errors=True)


def _valid(template: Path, key: str) -> bool:
    try:
        return bool(json.loads((template / STAMP).read_text())["key"] == key)
    except (OSError, ValueError, KeyError):
        return False


def template_for(binary: Path) -> Path:
    """The image's template when it matches this Chromium, else one cached in the temp dir
    (made on first use, under a lock: several sessions may start at once)."""
    key = template_key(binary)
    built = os.environ.get(TEMPLATE_ENV)
    if built and _valid(Path(built), key):
        return Path(built)
    cached = Path(tempfile.gettempdir()) / f"kubecua-chrome-profile-{os.getuid()}-{key}"
    with open(f"{cached}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not _valid(cached, key):
            shutil.rmtree(cached, ignore_errors=True)
            make_template(binary, cached)
    return cached


def strip_migration_marker(preferences: Path) -> None:
    """Remove has_migrated_local_network_access (and the dictionary it leaves empty) from a
    profile a Chromium without the wrapper's flag has run. Not a tracked preference: no MAC."""
    try:
        data = json.loads(preferences.read_text())
    except (OSError, ValueError):
        return
    profile = data.get("profile") or {}
    values = profile.get("default_content_setting_values")
    if not isinstance(values, dict) or "has_migrated_local_network_access" not in values:
        return
    del values["has_migrated_local_network_access"]
    if not values:
        del profile["default_content_setting_values"]
    preferences.write_text(json.dumps(data))


def _read_preferences(preferences: Path) -> dict[str, Any] | None:
    try:
        data = json.loads(preferences.read_text())
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) else None


def strip_window_placement(preferences: Path) -> None:
    """Drop browser.window_placement (not a tracked preference: no MAC), which holds the screen
    of whichever Chromium wrote it."""
    data = _read_preferences(preferences)
    if data is None or "window_placement" not in data.get("browser", {}):
        return
    del data["browser"]["window_placement"]
    preferences.write_text(json.dumps(data))


def window_placement(width: int, height: int) -> dict[str, Any]:
    """Chrome's saved placement on a width x height screen, in the start state's window state.
    The restored bounds are inferred (Chrome's own inset); only the state shows."""
    maximized = start_state.window("chrome")["state"] == "maximized"
    inset = RESTORED_INSET
    return {"left": inset, "top": inset, "right": width - inset, "bottom": height - inset,
            "maximized": maximized, "work_area_left": 0, "work_area_top": 0,
            "work_area_right": width, "work_area_bottom": height}  # fmt: skip


def place_window(preferences: Path, width: int, height: int) -> None:
    """The start state's placement for this screen, unless the profile holds one for it already
    (a user's own). A placement for another screen size is replaced: Chrome would restore it."""
    data = _read_preferences(preferences)
    if data is None:
        return
    browser = data.setdefault("browser", {})
    held = browser.get("window_placement") or {}
    area = (held.get("work_area_right"), held.get("work_area_bottom"))
    if area == (width, height) and held.get("work_area_left") == held.get("work_area_top") == 0:
        return
    browser["window_placement"] = window_placement(width, height)
    preferences.write_text(json.dumps(data))


def seed_profile(home: Path, binary: Path, width: int, height: int) -> None:
    """A new home gets the template's profile; an existing profile is the user's to keep, less
    the migration marker. Either way the window opens as the start state says on this screen."""
    user_data = home / ".config/google-chrome"
    preferences = user_data / "Default/Preferences"
    if preferences.exists():
        strip_migration_marker(preferences)
        place_window(preferences, width, height)
        return
    if not binary.exists():
        log.warning("%s missing: Chrome's profile is left for Chromium to make", binary)
        return
    template = template_for(binary)
    for name in FILES:
        if (template / name).exists():
            (user_data / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(template / name, user_data / name)
    place_window(preferences, width, height)


def main() -> None:
    if len(sys.argv) != 2:
        sys.exit("usage: python -m kubecua_desktop.session.chrome_profile DIR")
    binary = Path(os.environ.get("KUBECUA_CHROME_BIN", "/usr/lib/chromium/chrome"))
    dest = Path(sys.argv[1])
    shutil.rmtree(dest, ignore_errors=True)
    make_template(binary, dest)
    print(json.loads((dest / STAMP).read_text()))


if __name__ == "__main__":
    main()
