# ruff: noqa: E501, RUF005  (a data table: instructions and solution code are long literals)
"""Chromium tasks on local file:// pages, started the OSWorld way (google-chrome with
--remote-debugging-port=1337, socat publishing it on 9222; the episode server rewrites both
ports per sandbox) and checked with desktop-env's Chrome CDP getter (get_open_tabs_info over
playwright). Reference solutions type into the real browser;
URLs are built from the desktop user's home at run time (tasks say /home/user)."""

from __future__ import annotations

from taskkit import WINDOWS, H, gui, poll, task, wait_drawn, wait_until, wait_window, write

WEB = f"{H}/web"
PAGES = {
    "index.html": "<title>Home</title><h1>Welcome</h1><p><a id='pricing' href='pricing.html'>Pricing</a></p>",
    "pricing.html": "<title>Pricing</title><h1>Pricing</h1><p>Free for sandboxes.</p>",
    "about.html": "<title>About</title><h1>About kubecua</h1>",
    "form.html": "<title>Sign up</title><form action='thanks.html'><input name='name' autofocus> <input name='team'> <button>Send</button></form>",
    "thanks.html": "<title>Thanks</title><h1>Thanks!</h1>",
}


def chrome_setup() -> list[dict]:
    pages = [write(f"{WEB}/{name}", body) for name, body in PAGES.items()]
    return pages + [
        {
            "type": "launch",
            "parameters": {
                "command": [
                    "google-chrome",
                    "--remote-debugging-port=1337",
                    f"file://{WEB}/index.html",
                ]
            },
        },
        {
            "type": "launch",
            "parameters": {
                "command": ["socat", "tcp-listen:9222,fork,reuseaddr", "tcp:localhost:1337"]
            },
        },
        wait_until(
            "python3 -c \"import urllib.request as u; u.urlopen('http://localhost:9222/json/version', timeout=2)\" 2>/dev/null",
            "Chrome DevTools on 9222",
        ),
        wait_window("Home - "),  # the start page has loaded in the window
        wait_drawn(),
    ]


TITLES = {
    "index.html": "Home",
    "pricing.html": "Pricing",
    "about.html": "About",
    "thanks.html": "Thanks",
}


def tabs_are(*pages: str) -> dict:
    """Open tabs (title and URL, in order) equal these pages. desktop-env's own is_expected_tabs
    lives in a metric module that imports PyMuPDF, borb and imagehash; literal_match (light)
    compares the same getter's list exactly."""
    tabs = [{"title": TITLES[p.split("?")[0]], "url": f"file://{WEB}/{p}"} for p in pages]
    return {
        "func": "literal_match",
        "result": {"type": "open_tabs_info"},
        "expected": {"type": "rule", "rules": tabs},
        "options": {"type": "list"},
    }


def tabs_include(*pages: str) -> dict:
    """Each page is open in some tab: Chrome lists its targets in an order that changes with tab
    activation, so several tabs are checked one by one (desktop-env's is_in_list, "and")."""
    rules = [
        {"type": "rule", "rules": {"expected": {"title": TITLES[p], "url": f"file://{WEB}/{p}"}}}
        for p in pages
    ]
    n = len(pages)
    return {
        "func": ["is_in_list"] * n,
        "conj": "and",
        "result": [{"type": "open_tabs_info"}] * n,
        "expected": rules,
    }


def title_of(page: str) -> str:
    return PAGES[page.split("?")[0]].split("<title>")[1].split("</title>")[0]


def until_shown(page: str) -> str:
    """Code that waits (up to 30 s) until the browser window shows the page's title, as a
    careful agent looks before it says DONE: the evaluation reads the tabs at once."""
    return "\nimport subprocess, time\n" + poll(f"' {title_of(page)} - ' in {WINDOWS}")


def go_to(page: str, new_tab: bool = False) -> dict:
    """Focus the address bar and type the page's file:// URL (the home is known only on the
    desktop); Alt+Enter opens it in a new foreground tab instead of the current one."""
    enter = "pyautogui.hotkey('alt', 'enter')" if new_tab else "pyautogui.press('enter')"
    url = "f'file://{pathlib.Path.home()}/web/" + page + "'"
    return gui(
        f"import pathlib; pyautogui.hotkey('ctrl', 'l'); pyautogui.write({url}, interval=0.005); {enter}"
        + until_shown(page)
    )


task(
    "browser", "chrome-open-page",
    "In the browser, open the page about.html from the web folder in your home, in the current tab.",
    chrome_setup(), tabs_are("about.html"),
    [go_to("about.html")], [go_to("pricing.html")], apps=["chrome"],
)  # fmt: skip
task(
    "browser", "chrome-follow-link",
    "In the browser, follow the Pricing link on the open page.",
    chrome_setup(), tabs_are("pricing.html"),
    [gui("pyautogui.press('tab')"), gui("pyautogui.press('enter')" + until_shown("pricing.html"))],
    [go_to("about.html")], apps=["chrome"],
)  # fmt: skip
task(
    "browser", "chrome-second-tab",
    "Keep the open page and open about.html from the web folder in your home in a second tab.",
    chrome_setup(), tabs_include("index.html", "about.html"),
    [go_to("about.html", new_tab=True)],
    [go_to("about.html")], apps=["chrome"],
)  # fmt: skip
task(
    "browser", "chrome-fill-form",
    "Open form.html from the web folder in your home in the browser, sign up with name Ada and team rl, and send the form.",
    chrome_setup(), tabs_are("thanks.html?name=Ada&team=rl"),
    [
        go_to("form.html"),
        gui("pyautogui.write('Ada', interval=0.02)"),
        gui("pyautogui.press('tab')"),
        gui("pyautogui.write('rl', interval=0.02)"),
        gui("pyautogui.press('enter')" + until_shown("thanks.html")),
    ],
    [go_to("form.html"), gui("pyautogui.write('Ada\\n', interval=0.02)")],
    apps=["chrome"],
)  # fmt: skip
