"""Chrome's profile files settle before evaluation reads them.

Chrome keeps preferences, bookmarks, history and cookies in memory and writes them to the profile
later (preferences about 10 s after a change, bookmarks 2.5 s), so a getter that reads a profile
file right after a fast agent's change sees the old value and a correct episode scores 0. A
human's browser writes them when its windows are closed; this does the same before such getters
run, and waits for the browser to exit.
Tasks that also read the live browser (tabs over CDP) are left alone: closing it would break
those getters (docs/osworld-compat.md)."""

from __future__ import annotations

import logging
from typing import Any

import requests

log = logging.getLogger("kubecua.episode")

# desktop-env getters (result/expected "type") that read files of Chrome's profile.
PROFILE_GETTERS = frozenset({
    "default_search_engine", "cookie_data", "history", "enabled_experiments", "profile_name",
    "chrome_language", "chrome_font_size", "bookmarks", "extensions_installed_from_shop",
    "enable_do_not_track", "enable_enhanced_safety_browsing", "enable_safe_browsing",
    "new_startup_page", "find_unpacked_extension_path", "find_installed_extension_name",
    "data_delete_automacally",
})  # fmt: skip
# ... and those that talk to the running browser (CDP) or read its window.
LIVE_GETTERS = frozenset({
    "info_from_website", "page_info", "open_tabs_info", "active_url_from_accessTree",
    "active_tab_info", "pdf_from_url", "chrome_saved_address", "number_of_search_results",
    "active_tab_html_parse", "gotoRecreationPage_and_get_html_content", "active_tab_url_parse",
    "url_dashPart", "macys_product_url_parse", "url_path_parse",
})  # fmt: skip

# The browser processes of this desktop's user: `chrome` without --type= (renderers, GPU and
# zygotes have one), started with this home's profile (local sandboxes share a host) or with
# the default one (OSWorld's VM). Their windows are closed as a user closes them (a full
# shutdown: every profile file is written; SIGTERM only commits preferences), then SIGTERM
# for a browser still running after 10 s. Exit 0 once they are gone, 1 if they outlive that.
CLOSE_BROWSER = r"""
pids=""
for p in $(pgrep -x 'chrome|chromium'); do
  cmd=$(tr '\0' ' ' < /proc/$p/cmdline 2>/dev/null) || continue
  case "$cmd" in *--type=*) continue ;; esac
  case "$cmd" in
    *"--user-data-dir=$HOME/.config/google-chrome"*) ;;
    *--user-data-dir=*) continue ;;
  esac
  pids="$pids $p"
done
[ -z "$pids" ] && exit 0
gone() { for p in $pids; do kill -0 $p 2>/dev/null && return 1; done; return 0; }
wait_gone() { for i in $(seq $1); do gone && return 0; sleep 0.1; done; return 1; }
for p in $pids; do
  for w in $(wmctrl -lp 2>/dev/null | awk -v p=$p '$3 == p {print $1}'); do wmctrl -i -c $w; done
done
wait_gone 100 && exit 0
kill -TERM $pids 2>/dev/null
wait_gone 50 && exit 0
echo "chrome did not exit: $pids" >&2; exit 1
"""


def _getter_types(evaluator: dict[str, Any]) -> set[str]:
    found = set()
    for key in ("result", "expected"):
        specs = evaluator.get(key)
        for spec in specs if isinstance(specs, list) else [specs]:
            if isinstance(spec, dict) and isinstance(spec.get("type"), str):
                found.add(spec["type"])
    return found


def needs_flush(evaluator: dict[str, Any]) -> bool:
    types = _getter_types(evaluator)
    return bool(types & PROFILE_GETTERS) and not types & LIVE_GETTERS


def close_browser(desktop_url: str) -> None:
    """Close this desktop's Chrome cleanly, so its profile files hold what it showed."""
    resp = requests.post(f"{desktop_url}/setup/execute", timeout=30,
                         json={"command": CLOSE_BROWSER, "shell": True})  # fmt: skip
    body = resp.json() if resp.status_code == 200 else {}
    if body.get("returncode") != 0:
        log.warning("chrome was not closed before evaluation: %s", str(body or resp.text)[:300])
