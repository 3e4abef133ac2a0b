# ruff: noqa: E501, RUF005  (a data table: instructions and solution code are long literals)
"""LibreOffice Calc and Writer tasks, driven through the GUI. Input documents are built here
(openpyxl, python-docx) and written by a setup step, so no headless LibreOffice conversion runs
per episode. Saving an .xlsx/.docx asks "Keep current format?"; the reference waits for that
dialog and answers it, as a careful agent would."""

from __future__ import annotations

import io
import re
import zipfile
from collections.abc import Sequence

import docx
import openpyxl
from taskkit import ACTIVE, WINDOWS, H, gui, poll, task, wait_drawn, wait_window, write_bytes

FIXED_TIME = (2026, 1, 1, 0, 0, 0)
CORE_STAMP = re.compile(rb"(<dcterms:(?:created|modified)[^>]*>)[^<]*(</dcterms:)")


def stable(document: bytes) -> bytes:
    """The same bytes on every run: openpyxl and python-docx stamp the current time into
    docProps/core.xml and into every zip entry, so each regeneration rewrote the task JSON."""
    src, out = zipfile.ZipFile(io.BytesIO(document)), io.BytesIO()
    with zipfile.ZipFile(out, "w") as dst:
        for info in src.infolist():
            body = src.read(info)
            if info.filename == "docProps/core.xml":
                body = CORE_STAMP.sub(rb"\g<1>2026-01-01T00:00:00Z\g<2>", body)
            dst.writestr(zipfile.ZipInfo(info.filename, FIXED_TIME), body, zipfile.ZIP_DEFLATED)
    return out.getvalue()


def xlsx(rows: Sequence[tuple[object, ...]]) -> bytes:
    wb = openpyxl.Workbook()
    ws = wb.active
    ws.title = "Sheet1"
    for row in rows:
        ws.append(row)
    buf = io.BytesIO()
    wb.save(buf)
    return stable(buf.getvalue())


def docx_bytes(lines: list[str]) -> bytes:
    doc = docx.Document()
    for line in lines:
        doc.add_paragraph(line)
    buf = io.BytesIO()
    doc.save(buf)
    return stable(buf.getvalue())


def open_in_office(path: str, title: str) -> list[dict]:
    activate = {"type": "activate_window", "parameters": {"window_name": title, "strict": False}}
    return [
        {"type": "open", "parameters": {"path": path}},
        wait_window(title),
        wait_drawn(),
        activate,
    ]


# Save in the file's own format: ctrl+s, wait (up to 30 s: the first save of a session loads the
# export filters) until either the file on disk has changed or LibreOffice's "Keep current
# format" dialog (a second window of the app) has the focus, press Enter on its default button
# only in the second case, then wait until the file has changed, as a careful agent checks before
# saying DONE (the save is asynchronous; the evaluation reads it at once). The dialog comes only
# where Microsoft's formats are not the default: the OSWorld start state makes them the default
# (desktop-server's session/osworld_start_state.toml), so here the save usually goes straight
# through, and waiting for a dialog that never comes cost 30 s a save.
def save_keep_format(name: str) -> dict:
    return gui(
        "import pathlib, subprocess\n"
        f"doc = pathlib.Path.home() / {name!r}\n"
        f"def n(): return len({WINDOWS}.splitlines())\n"
        f"def active(): return {ACTIVE}\n"
        "def stamp(): return doc.stat().st_mtime_ns if doc.exists() else 0\n"
        "before, old = n(), stamp(); pyautogui.hotkey('ctrl', 's')\n"
        + poll(f"stamp() != old or n() > before and {name!r} not in active()")
        + "\nif stamp() == old: time.sleep(0.3); pyautogui.press('enter')\n"
        + poll("stamp() != old")
        + "\ntime.sleep(0.5)"
    )


BUDGET = [("item", "cost"), ("rent", 30), ("food", 20)]


def cell_rules(cells: dict[str, object]) -> dict:
    return {
        "func": "compare_table",
        "result": {"type": "vm_file", "path": f"{H}/budget.xlsx", "dest": "budget.xlsx"},
        "options": {
            "rules": [
                {"type": "check_cell", "sheet_idx": "RI0", "coordinate": c,
                 "props": {"value": {"method": "eq", "ref": v}}}
                for c, v in cells.items()
            ]
        },
    }  # fmt: skip


def calc_task(tid: str, instruction: str, cells: dict[str, object], ref: list, wrong: list) -> None:
    task(
        "libreoffice", tid, instruction,
        [write_bytes(f"{H}/budget.xlsx", xlsx(BUDGET))] + open_in_office(f"{H}/budget.xlsx", "budget.xlsx"),
        cell_rules(cells), ref + [save_keep_format("budget.xlsx")], wrong + [save_keep_format("budget.xlsx")], apps=["libreoffice_calc"],
    )  # fmt: skip


TO_B4 = gui("pyautogui.hotkey('ctrl', 'home'); pyautogui.press(['right', 'down', 'down', 'down'])")
calc_task(
    "calc-fill-total",
    "In the open spreadsheet budget.xlsx, enter 50 into cell B4 and save the file in its current format.",
    {"B4": 50},
    [TO_B4, gui("pyautogui.write('50\\n')")],
    [TO_B4, gui("pyautogui.write('51\\n')")],
)
calc_task(
    "calc-sum-formula",
    "In budget.xlsx, put a formula in B4 that sums B2:B3 and one in B5 that averages B2:B3, then save it in its current format.",
    {"B4": 50, "B5": 25},
    [
        gui("pyautogui.hotkey('ctrl', 'home')"),
        gui("pyautogui.press(['right', 'down', 'down', 'down'])"),
        gui("pyautogui.write('=SUM(B2:B3)\\n')"),
        gui("pyautogui.write('=AVERAGE(B2:B3)\\n')"),
    ],
    [TO_B4, gui("pyautogui.write('=SUM(B2:B3)\\n=MAX(B2:B3)\\n')")],
)
calc_task(
    "calc-add-row",
    "Add a row to budget.xlsx below food: item misc, cost 15. Save it in its current format.",
    {"A4": "misc", "B4": 15},
    [
        gui("pyautogui.hotkey('ctrl', 'home')"),
        gui("pyautogui.hotkey('ctrl', 'down')"),
        gui("pyautogui.press('down')"),
        gui("pyautogui.write('misc\\t15\\n')"),
    ],
    [gui("pyautogui.hotkey('ctrl', 'home')"), gui("pyautogui.write('misc\\t15\\n')")],
)
task(
    "libreoffice",
    "writer-append-line",
    "In the open document letter.docx, add the line: Kind regards at the end and save it in its current format.",
    [write_bytes(f"{H}/letter.docx", docx_bytes(["Dear team,", "the sandbox works."]))]
    + open_in_office(f"{H}/letter.docx", "letter.docx"),
    {
        "func": "check_include_exclude",
        "result": {
            "type": "vm_command_line",
            "command": f"python3 -c \"import zipfile; print(zipfile.ZipFile('{H}/letter.docx').read('word/document.xml').decode())\"",
            "shell": True,
        },
        "expected": {
            "type": "rule",
            "rules": {"include": ["Kind regards", "the sandbox works."], "exclude": []},
        },
    },
    [
        gui("pyautogui.hotkey('ctrl', 'end')"),
        gui("pyautogui.press('enter'); pyautogui.write('Kind regards', interval=0.01)"),
        save_keep_format("letter.docx"),
    ],
    [
        gui("pyautogui.hotkey('ctrl', 'end')"),
        gui("pyautogui.press('enter'); pyautogui.write('Kind', interval=0.01)"),
        save_keep_format("letter.docx"),
    ],
    apps=["libreoffice_writer"],
)
