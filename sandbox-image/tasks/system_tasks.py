# ruff: noqa: E501  (a data table: instructions and solution code are long literals)
"""OSWorld-style tasks on the system pieces OSWorld's tasks assume (sudo, VLC's and GIMP's config,
Chrome's profile, the sound server, default applications), checked with desktop-env's own getters
and metrics for those apps (vlc_config + check_qt_max_volume, gimp_config_file +
check_config_status, bookmarks + is_expected_bookmarks, default_video_player), as upstream's
tasks are. The suite runs each of them twice on one sandbox: a reset must undo all of it."""

from __future__ import annotations

from browser_tasks import WEB, chrome_setup, go_to
from taskkit import H, check, gui, py, sh, task, wait_until

# Root-only file made with sudo, as OSWorld's setups do ({CLIENT_PASSWORD} is desktop-env's).
SUDO_SETUP = sh(
    "echo '{CLIENT_PASSWORD}' | sudo -S sh -c "
    f"'printf \"token-7431\\n\" > {H}/root-note.txt && chown root:root {H}/root-note.txt && chmod 600 {H}/root-note.txt'"
)
task(
    "system", "sudo-copy-root-file",
    "The file root-note.txt in your home folder is readable by root only. Copy its contents into a new file note-copy.txt in your home folder, owned by you. Your password is 'password'.",
    [SUDO_SETUP],
    check(f"cat {H}/note-copy.txt; test -O {H}/note-copy.txt && echo MINE", ["token-7431", "MINE"]),
    [py("import subprocess\nsubprocess.run('echo password | sudo -S cat ~/root-note.txt > ~/note-copy.txt', shell=True, check=True)")],
    [py("(HOME / 'note-copy.txt').write_text('token\\n')")],
    apps=["os", "terminal"],
)  # fmt: skip


def vlcrc_set(line: str) -> dict:
    """Edit VLC's config as its Preferences dialog saves it (VLC is not running)."""
    return py(
        f"rc = HOME / '.config/vlc/vlcrc'\nrc.write_text(rc.read_text().replace('[qt]\\n', '[qt]\\n{line}\\n', 1))"
    )


task(
    "system", "vlc-max-volume",
    "Let VLC's volume slider go up to 200% (the maximum volume shown in its interface).",
    [],
    {
        "func": "check_qt_max_volume",
        "result": {"type": "vlc_config", "dest": "vlcrc"},
        "expected": {"type": "rule", "rules": {"expected_qt_max_volume": "200"}},
    },
    [vlcrc_set("qt-max-volume=200")],
    [vlcrc_set("qt-max-volume=150")],
    apps=["vlc"],
)  # fmt: skip


def gimprc(text: str) -> dict:
    return py(
        f"rc = HOME / '.config/GIMP/2.10/gimprc'\nrc.parent.mkdir(parents=True, exist_ok=True)\nrc.write_text({text!r})"
    )


task(
    "system", "gimp-undo-levels",
    "Configure GIMP 2.10 to keep 100 undo levels.",
    [],
    {
        "func": "check_config_status",
        "result": {"type": "gimp_config_file", "file_name": "gimprc", "dest": "gimprc"},
        "expected": {"type": "rule", "rules": {"key": "undo-levels", "value": "100"}},
    },
    [gimprc("# GIMP gimprc\n\n(undo-levels 100)\n")],
    [gimprc("# GIMP gimprc\n\n(undo-levels 50)\n")],
    apps=["gimp"],
)  # fmt: skip


def volume(percent: int) -> dict:
    return py(
        f"import subprocess\nsubprocess.run(['pactl', 'set-sink-volume', '@DEFAULT_SINK@', '{percent}%'], check=True)"
    )


task(
    "system", "sound-volume-80",
    "Set the speakers' volume to 80%.",
    [],
    check("pactl get-sink-volume @DEFAULT_SINK@ | grep -o '[0-9]*%' | sort -u", ["80%"], ["100%", "180%"]),
    [volume(80)],
    [volume(60)],
    apps=["os"],
)  # fmt: skip


def xdg_default(types: str) -> dict:
    return py(
        f"import subprocess\nsubprocess.run('xdg-mime default vlc.desktop ' + {types}, shell=True, check=True)"
    )


# Every video type VLC's desktop entry claims (what desktop-env's default_video_player counts).
ALL_VIDEO = "' '.join(t for t in open('/usr/share/applications/vlc.desktop').read().split('MimeType=')[1].split('\\n')[0].split(';') if t.startswith('video/'))"
task(
    "system", "default-video-player-vlc",
    "Make VLC the default application for opening videos.",
    [],
    {
        "func": "exact_match",
        "result": {"type": "default_video_player"},
        "expected": {"type": "rule", "rules": {"expected": "vlc.desktop\n"}},
    },
    [xdg_default(ALL_VIDEO)],
    [xdg_default("'video/mp4'")],
    apps=["vlc", "os"],
)  # fmt: skip

# Ctrl+Shift+B shows the bookmarks bar, Ctrl+D bookmarks the page (into "Other bookmarks").
# Chrome writes its Bookmarks file seconds later: evaluating at once also checks that
# evaluation closes the browser first (kubecua_episode.chrome).
SHOW_BAR = gui("pyautogui.hotkey('ctrl', 'shift', 'b')")
# In the bubble: Tab to the folder list, Up to "Bookmarks bar", Tab Tab to Done.
BOOKMARK = gui(
    "pyautogui.hotkey('ctrl', 'd'); time.sleep(1.0); pyautogui.press(['tab', 'up', 'tab', 'tab', 'enter'], interval=0.2)"
)
task(
    "system", "chrome-bookmark-page",
    "Bookmark the page that is open in the browser, in the bookmarks bar.",
    # Keys go to the focused window: wait until Chrome's page window has the focus.
    [*chrome_setup(), wait_until("xdotool getactivewindow getwindowname | grep -q '^Home'", "Chrome focused")],
    {
        "func": "is_expected_bookmarks",
        "result": {"type": "bookmarks"},
        "expected": {"type": "rule", "rules": {"type": "bookmark_bar_websites_urls", "urls": [f"file://{WEB}/index.html"]}},
    },
    [SHOW_BAR, BOOKMARK],
    [SHOW_BAR, go_to("about.html"), BOOKMARK],
    apps=["chrome"],
)  # fmt: skip
