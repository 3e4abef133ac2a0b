# ruff: noqa: E501  (a data table: instructions and solution code are long literals)
"""Desktop settings and multi-step GUI tasks: commands typed into a real GNOME Terminal, a
GNOME setting changed (read back with gsettings, as OSWorld's settings tasks do), and a
several-step edit in the text editor. Reference solutions only type and press keys."""

from __future__ import annotations

from taskkit import (
    ACTIVE,
    WINDOWS,
    H,
    check,
    gui,
    launch,
    poll,
    task,
    wait_drawn,
    wait_until,
    wait_window,
    write,
)


def terminal_setup() -> list[dict]:
    return [
        launch("gnome-terminal", "--title=kubecua-terminal", f"--working-directory={H}"),
        # By window class: a user's ~/.bashrc (the image's, Ubuntu's) retitles the window.
        wait_until("wmctrl -lx | grep -qi 'gnome-terminal'", "gnome-terminal window"),
        wait_drawn(min_colors=20),
    ]


def typed(line: str) -> dict:
    return gui(f"pyautogui.write({line + chr(10)!r}, interval=0.01)")


task(
    "settings", "settings-dark-style",
    "Switch the desktop to the dark style (the GNOME interface setting color-scheme should prefer dark).",
    terminal_setup(),
    check("gsettings get org.gnome.desktop.interface color-scheme", ["prefer-dark"]),
    [typed("gsettings set org.gnome.desktop.interface color-scheme prefer-dark")],
    [typed("gsettings set org.gnome.desktop.interface color-scheme prefer-light")],
    apps=["settings", "terminal"],
)  # fmt: skip
task(
    "settings", "settings-clock-seconds",
    "Make the top bar clock show seconds and the weekday (GNOME interface settings clock-show-seconds and clock-show-weekday).",
    terminal_setup(),
    check("gsettings get org.gnome.desktop.interface clock-show-seconds; gsettings get org.gnome.desktop.interface clock-show-weekday", ["true\ntrue"]),
    [typed("gsettings set org.gnome.desktop.interface clock-show-seconds true"), typed("gsettings set org.gnome.desktop.interface clock-show-weekday true")],
    [typed("gsettings set org.gnome.desktop.interface clock-show-seconds true")],
    apps=["settings", "terminal"],
)  # fmt: skip
task(
    "terminal", "terminal-project-layout",
    "In the open terminal, create a project folder demo in your home with src/main.py printing hi, a README.md saying Demo, and make main.py executable.",
    terminal_setup(),
    check(f"cd {H}/demo && cat README.md && python3 src/main.py && test -x src/main.py && echo EXEC", ["Demo", "hi", "EXEC"]),
    [
        typed("mkdir -p demo/src"),
        typed("cd demo"),
        typed("echo '# Demo' > README.md"),
        typed("printf '#!/usr/bin/env python3\\nprint(\"hi\")\\n' > src/main.py"),
        typed("chmod +x src/main.py"),
        typed("ls -R"),
    ],
    [typed("mkdir -p demo/src"), typed("cd demo"), typed("echo '# Demo' > README.md")],
    apps=["terminal"],
)  # fmt: skip
# ctrl+shift+s, then wait (up to 30 s) until gedit's Save As dialog has the keyboard focus: a
# scripted solution cannot look at the screen, and the settle may end before the dialog is up.
SAVE_AS = gui(
    f"import subprocess\ndef active(): return {ACTIVE}.strip()\n"
    "pyautogui.hotkey('ctrl', 'shift', 's')\n" + poll("active() == 'Save As'") + "\ntime.sleep(0.3)"
)
# Enter in the dialog, then wait (up to 30 s) for the editor's title to name the saved file.
SAVED_AS = gui(
    "import subprocess\npyautogui.press('enter')\n" + poll(f"'list-final.txt' in {WINDOWS}")
)
task(
    "editor", "gedit-shopping-list",
    "The text editor has list.txt open with two items. Add the items eggs and bread on their own lines at the end, then save it as list-final.txt in your home folder.",
    [write(f"{H}/list.txt", "milk\napples"), launch("gedit", f"{H}/list.txt"), wait_window("list.txt"), wait_drawn(min_colors=20),
     {"type": "activate_window", "parameters": {"window_name": "list.txt", "strict": False}}],
    check(f"tr '\\n' ',' < {H}/list-final.txt", ["milk,apples,eggs,bread"]),
    [
        gui("pyautogui.hotkey('ctrl', 'end')"),
        gui("pyautogui.press('enter')"),
        gui("pyautogui.write('eggs', interval=0.02)"),
        gui("pyautogui.press('enter')"),
        gui("pyautogui.write('bread', interval=0.02)"),
        SAVE_AS,
        gui("pyautogui.hotkey('ctrl', 'a'); pyautogui.write('list-final.txt', interval=0.02)"),
        SAVED_AS,
    ],
    [
        gui("pyautogui.hotkey('ctrl', 'end')"),
        gui("pyautogui.press('enter')"),
        gui("pyautogui.write('eggs', interval=0.02)"),
        SAVE_AS,
        gui("pyautogui.hotkey('ctrl', 'a'); pyautogui.write('list-final.txt', interval=0.02)"),
        SAVED_AS,
    ],
    apps=["gedit"],
)  # fmt: skip
