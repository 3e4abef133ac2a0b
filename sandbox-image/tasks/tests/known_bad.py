"""Known-bad tasks, each wrong in one way verification must catch (tests/test_verify.py):

- known-bad-broken-reference: the reference writes the wrong text, so it never scores 1;
- known-bad-noop-passes: the setup already leaves what the check wants, so doing nothing passes;
- known-bad-random-start: a window shows a black square at a random place, so no two episodes
  start from the same screen (its solutions are right: only its start is wrong).

Built with taskkit like any family; only the test writes them (into a temporary folder)."""

from __future__ import annotations

from taskkit import H, check, collect, launch, py, task, wait_window, write

TITLE = "kubecua-random-start"
# Full screen, white, one 400x400 black square at a random place: a different first screen
# every time (two draws within one dHash cell of each other in both axes: about 1 in 70).
RANDOM_APP = (
    "import random, tkinter as tk\n"
    f"root = tk.Tk(); root.title({TITLE!r}); root.attributes('-fullscreen', True)\n"
    "w, h = root.winfo_screenwidth(), root.winfo_screenheight()\n"
    "c = tk.Canvas(root, width=w, height=h, bg='white', highlightthickness=0); c.pack()\n"
    "x, y = random.randint(0, w - 400), random.randint(0, h - 400)\n"
    "c.create_rectangle(x, y, x + 400, y + 400, fill='black', width=0)\n"
    "root.mainloop()\n"
)


def _tasks() -> None:
    task(
        "known-bad",
        "known-bad-broken-reference",
        "Create a file named hello.txt in your home folder that contains the text: hello world",
        [],
        check(f"cat {H}/hello.txt", ["hello world"]),
        [py("(HOME/'hello.txt').write_text('hello wrld\\n')")],  # the broken reference
        [py("(HOME/'hello.txt').write_text('goodbye world\\n')")],
    )
    task(
        "known-bad",
        "known-bad-noop-passes",
        "Create a file named done.txt in your home folder that contains the text: done",
        [write(f"{H}/done.txt", "done\n")],  # the setup already solves it
        check(f"cat {H}/done.txt", ["done"]),
        [py("(HOME/'done.txt').write_text('done\\n')")],
        [py("(HOME/'done.txt').write_text('not yet\\n')")],
    )
    task(
        "known-bad",
        "known-bad-random-start",
        "Write the word square into square.txt in your home folder.",
        [launch("python3", "-c", RANDOM_APP), wait_window(TITLE)],
        check(f"cat {H}/square.txt", ["square"]),
        [py("(HOME/'square.txt').write_text('square\\n')")],
        [py("(HOME/'square.txt').write_text('circle\\n')")],
        apps=["python3-tk"],
    )


def known_bad_files() -> dict[str, str]:
    return collect(_tasks)


EXPECTED = {
    "known-bad-broken-reference": ("reference-fails", True),
    "known-bad-noop-passes": ("noop-passes", True),
    "known-bad-random-start": ("verified", False),
}
