# ruff: noqa: E501  (a data table: instructions and solution code are long literals)
"""The offline suite's files, terminal and editor areas (its other tables: office_tasks.py,
browser_tasks.py, desktop_tasks.py, system_tasks.py; suite_tasks.py makes them one family).

Every task runs with no network: inputs are written by setup steps, checks use desktop-env's
getters (vm_command_line, vm_file) and light metrics (check_include_exclude, exact_match,
compare_table). Paths say /home/user as in OSWorld; the episode server maps that to the
sandbox's real home. Reference solutions are pyautogui-space code (OSWorld runs it as python on
the desktop); GUI tasks type and click for real. Leaves out: tasks needing the internet."""

from __future__ import annotations

from taskkit import (
    FAIL,
    TASKS,
    WINDOWS,
    H,
    check,
    gui,
    ok_if,
    poll,
    py,
    sh,
    task,
    wait_drawn,
    wait_window,
    write,
)

# ---- files and terminal (difficulty 1..3 steps) -------------------------------------------
task(
    "files",
    "create-hello-file",
    "Create a file named hello.txt in your home folder that contains the text: hello world",
    [],
    check(f"cat {H}/hello.txt", ["hello world"]),
    [py("(HOME/'hello.txt').write_text('hello world\\n')")],
    [py("(HOME/'hello.txt').write_text('goodbye world\\n')")],
)
task(
    "files",
    "make-nested-dir",
    "Create the folder projects/alpha inside your home folder.",
    [],
    check(ok_if(f"[ -d {H}/projects/alpha ]"), ["OK"]),
    [py("(HOME/'projects').mkdir()"), py("(HOME/'projects'/'alpha').mkdir()")],
    [py("(HOME/'projects'/'beta').mkdir(parents=True)")],
)
task(
    "files",
    "rename-notes",
    "Rename notes.txt in your home folder to notes.md, keeping its content.",
    [write(f"{H}/notes.txt", "# my notes\n")],
    check(f"cat {H}/notes.md; ls {H}", ["# my notes"], ["notes.txt"]),
    [py("(HOME/'notes.txt').rename(HOME/'notes.md')")],
    [py("shutil.copy(HOME/'notes.txt', HOME/'notes.md')")],
)
task(
    "files",
    "delete-junk-log",
    "Delete junk.log from your home folder, but keep keep.log.",
    [write(f"{H}/junk.log", "x\n"), write(f"{H}/keep.log", "y\n")],
    check(f"ls {H}", ["keep.log"], ["junk.log"]),
    [py("(HOME/'junk.log').unlink()")],
    [py("(HOME/'keep.log').unlink()"), py("(HOME/'junk.log').unlink()")],
)
task(
    "files",
    "backup-report",
    "Copy report.txt into a new folder named backup in your home folder.",
    [write(f"{H}/report.txt", "Q3 revenue up 4%\n")],
    check(f"cat {H}/backup/report.txt; ls {H}", ["Q3 revenue up 4%", "report.txt"]),
    [
        py("(HOME/'backup').mkdir()"),
        py("shutil.copy(HOME/'report.txt', HOME/'backup'/'report.txt')"),
    ],
    [py("(HOME/'backup').mkdir()"), py("shutil.move(HOME/'report.txt', HOME/'backup.txt')")],
)
task(
    "files",
    "count-lines",
    "Count the lines of data.txt and write just that number into count.txt (both in your home folder).",
    [write(f"{H}/data.txt", "".join(f"row {i}\n" for i in range(17)))],
    {
        "func": "exact_match",
        "result": {
            "type": "vm_command_line",
            "command": f"tr -d ' \\n' < {H}/count.txt",
            "shell": True,
        },
        "expected": {"type": "rule", "rules": {"expected": "17"}},
    },
    [py("(HOME/'count.txt').write_text(str(len((HOME/'data.txt').read_text().splitlines())))")],
    [py("(HOME/'count.txt').write_text('16')")],
)
task(
    "files",
    "sort-names",
    "Sort the lines of names.txt alphabetically and save the result as sorted.txt in your home folder.",
    [write(f"{H}/names.txt", "mallory\nalice\ntrent\nbob\n")],
    check(f"tr '\\n' ',' < {H}/sorted.txt", ["alice,bob,mallory,trent,"]),
    [
        py(
            "lines = sorted((HOME/'names.txt').read_text().split())\n(HOME/'sorted.txt').write_text('\\n'.join(lines) + '\\n')"
        )
    ],
    [py("(HOME/'sorted.txt').write_text((HOME/'names.txt').read_text())")],
)
task(
    "files",
    "uppercase-words",
    "Write the content of words.txt in upper case into upper.txt (home folder).",
    [write(f"{H}/words.txt", "kube cua\nrl agents\n")],
    check(f"cat {H}/upper.txt", ["KUBE CUA", "RL AGENTS"], ["kube"]),
    [py("(HOME/'upper.txt').write_text((HOME/'words.txt').read_text().upper())")],
    [py("(HOME/'upper.txt').write_text((HOME/'words.txt').read_text().title())")],
)
task(
    "files",
    "make-executable",
    "Make the script run.sh in your home folder executable.",
    [write(f"{H}/run.sh", "#!/bin/sh\necho ran\n")],
    check(f"{H}/run.sh", ["ran"]),
    [py("os.chmod(HOME/'run.sh', 0o755)")],
    [py("os.chmod(HOME/'run.sh', 0o644)")],
)
task(
    "files",
    "sum-numbers",
    "Add up the numbers in numbers.txt (one per line) and write the sum into sum.txt.",
    [write(f"{H}/numbers.txt", "12\n30\n7\n51\n")],
    {
        "func": "exact_match",
        "result": {
            "type": "vm_command_line",
            "command": f"tr -d ' \\n' < {H}/sum.txt",
            "shell": True,
        },
        "expected": {"type": "rule", "rules": {"expected": "100"}},
    },
    [
        py("nums = [int(x) for x in (HOME/'numbers.txt').read_text().split()]"),
        py("(HOME/'sum.txt').write_text(str(12 + 30 + 7 + 51))"),
    ],
    [py("(HOME/'sum.txt').write_text('99')")],
)
task(
    "files",
    "grep-errors",
    "Put every line of app.log that contains ERROR into errors.txt in your home folder.",
    [write(f"{H}/app.log", "INFO start\nERROR disk full\nWARN slow\nERROR timeout\n")],
    check(f"cat {H}/errors.txt", ["ERROR disk full", "ERROR timeout"], ["INFO", "WARN"]),
    [
        py(
            "lines = [l for l in (HOME/'app.log').read_text().splitlines() if 'ERROR' in l]\n(HOME/'errors.txt').write_text('\\n'.join(lines) + '\\n')"
        )
    ],
    [py("(HOME/'errors.txt').write_text('ERROR disk full\\n')")],
)
task(
    "files",
    "replace-in-config",
    "In config.ini, change every occurrence of foo to bar.",
    [write(f"{H}/config.ini", "[main]\nname = foo\npath = /opt/foo\n")],
    check(f"cat {H}/config.ini", ["name = bar", "path = /opt/bar"], ["foo"]),
    [py("p = HOME/'config.ini'; p.write_text(p.read_text().replace('foo', 'bar'))")],
    [py("p = HOME/'config.ini'; p.write_text(p.read_text().replace('foo', 'bar', 1))")],
)
task(
    "files",
    "symlink-latest",
    "Create a symbolic link named latest in your home folder that points to releases/v2.",
    [sh(f"mkdir -p {H}/releases/v1 {H}/releases/v2")],
    check(f"readlink -f {H}/latest", ["/releases/v2"]),
    [py("(HOME/'latest').symlink_to(HOME/'releases'/'v2')")],
    [py("(HOME/'latest').symlink_to(HOME/'releases'/'v1')")],
)
task(
    "files",
    "move-photos",
    "Move all .jpg files from Downloads into Pictures; leave other files in Downloads.",
    [
        write(f"{H}/Downloads/a.jpg", "a"),
        write(f"{H}/Downloads/b.jpg", "b"),
        write(f"{H}/Downloads/c.pdf", "c"),
        sh(f"mkdir -p {H}/Pictures"),
    ],
    check(f"echo D: $(ls {H}/Downloads) P: $(ls {H}/Pictures)", ["D: c.pdf P: a.jpg b.jpg"]),
    [
        py("src = HOME/'Downloads'"),
        py("for f in (HOME/'Downloads').glob('*.jpg'): shutil.move(f, HOME/'Pictures'/f.name)"),
    ],
    [py("shutil.move(HOME/'Downloads'/'a.jpg', HOME/'Pictures'/'a.jpg')")],
)
task(
    "files",
    "archive-docs",
    "Make a gzip-compressed tar archive docs.tar.gz of the docs folder in your home folder.",
    [write(f"{H}/docs/one.md", "1"), write(f"{H}/docs/two.md", "2")],
    check(f"tar -tzf {H}/docs.tar.gz", ["docs/one.md", "docs/two.md"]),
    [
        py(
            "import tarfile\nwith tarfile.open(HOME/'docs.tar.gz', 'w:gz') as t: t.add(HOME/'docs', arcname='docs')"
        )
    ],
    [
        py(
            "import tarfile\nwith tarfile.open(HOME/'docs.tar.gz', 'w:gz') as t: t.add(HOME/'docs'/'one.md', arcname='docs/one.md')"
        )
    ],
)
task(
    "files",
    "largest-file",
    "Write the name of the largest file in the data folder into largest.txt.",
    [
        write(f"{H}/data/small.bin", "x" * 10),
        write(f"{H}/data/big.bin", "x" * 5000),
        write(f"{H}/data/mid.bin", "x" * 900),
    ],
    check(f"cat {H}/largest.txt", ["big.bin"]),
    [
        py(
            "files = sorted((HOME/'data').iterdir(), key=lambda f: f.stat().st_size)\n(HOME/'largest.txt').write_text(files[-1].name)"
        )
    ],
    [py("(HOME/'largest.txt').write_text('mid.bin')")],
)
task(
    "files",
    "enable-debug-json",
    "In settings.json set the key debug to true and leave the other keys as they are.",
    [write(f"{H}/settings.json", '{"debug": false, "level": 3}')],
    check(
        f"python3 -c \"import json; d=json.load(open('{H}/settings.json')); print(d['debug'] is True and d['level'] == 3)\"",
        ["True"],
    ),
    [
        py(
            "import json\np = HOME/'settings.json'; d = json.loads(p.read_text()); d['debug'] = True; p.write_text(json.dumps(d))"
        )
    ],
    [py("import json\n(HOME/'settings.json').write_text(json.dumps({'debug': True}))")],
)
task(
    "files",
    "csv-total",
    "Compute the total of the amount column in expenses.csv and write it into total.txt.",
    [write(f"{H}/expenses.csv", "item,amount\ncoffee,3.5\nlunch,12\nbook,20.5\n")],
    {
        "func": "exact_match",
        "result": {
            "type": "vm_command_line",
            "command": f"tr -d ' \\n' < {H}/total.txt",
            "shell": True,
        },
        "expected": {"type": "rule", "rules": {"expected": "36"}},
    },
    [
        py("import csv\nrows = list(csv.DictReader(open(HOME/'expenses.csv')))"),
        py(
            "import csv\nt = sum(float(r['amount']) for r in csv.DictReader(open(HOME/'expenses.csv')))\n(HOME/'total.txt').write_text(f'{t:g}')"
        ),
    ],
    [py("(HOME/'total.txt').write_text('35.5')")],
)
task(
    "files",
    "strip-empty-lines",
    "Remove all empty lines from draft.txt.",
    [write(f"{H}/draft.txt", "one\n\ntwo\n\n\nthree\n")],
    check(f"tr '\\n' '|' < {H}/draft.txt", ["one|two|three|"]),
    [
        py(
            "p = HOME/'draft.txt'; p.write_text(''.join(l for l in p.read_text().splitlines(True) if l.strip()))"
        )
    ],
    [py("p = HOME/'draft.txt'; p.write_text(p.read_text().replace('\\n\\n\\n', '\\n'))")],
)
task(
    "files",
    "batch-files",
    "Create a folder batch with three empty files a.txt, b.txt and c.txt in it.",
    [],
    check(f"echo $(ls {H}/batch)", ["a.txt b.txt c.txt"]),
    [
        py("(HOME/'batch').mkdir()"),
        py("(HOME/'batch'/'a.txt').touch()"),
        py("(HOME/'batch'/'b.txt').touch()"),
        py("(HOME/'batch'/'c.txt').touch()"),
    ],
    [py("(HOME/'batch').mkdir()"), py("(HOME/'batch'/'a.txt').touch()")],
)
task(
    "files",
    "word-count",
    "Write the number of words in essay.txt into wc.txt.",
    [write(f"{H}/essay.txt", "reinforcement learning for computer use agents on kubernetes\n")],
    {
        "func": "exact_match",
        "result": {
            "type": "vm_command_line",
            "command": f"tr -d ' \\n' < {H}/wc.txt",
            "shell": True,
        },
        "expected": {"type": "rule", "rules": {"expected": "8"}},
    },
    [py("(HOME/'wc.txt').write_text(str(len((HOME/'essay.txt').read_text().split())))")],
    [py("(HOME/'wc.txt').write_text('7')")],
)
task(
    "files",
    "dedupe-emails",
    "Write the lines of emails.txt without duplicates, in their original order, into unique.txt.",
    [write(f"{H}/emails.txt", "b@x.org\na@x.org\nb@x.org\nc@x.org\na@x.org\n")],
    check(f"tr '\\n' ',' < {H}/unique.txt", ["b@x.org,a@x.org,c@x.org,"]),
    [
        py(
            "seen = list(dict.fromkeys((HOME/'emails.txt').read_text().split()))\n(HOME/'unique.txt').write_text('\\n'.join(seen) + '\\n')"
        )
    ],
    [
        py(
            "(HOME/'unique.txt').write_text('\\n'.join(sorted(set((HOME/'emails.txt').read_text().split()))) + '\\n')"
        )
    ],
)
task(
    "files",
    "reverse-lines",
    "Write the lines of steps.txt in reverse order into reversed.txt.",
    [write(f"{H}/steps.txt", "first\nsecond\nthird\n")],
    check(f"tr '\\n' ',' < {H}/reversed.txt", ["third,second,first,"]),
    [
        py(
            "l = (HOME/'steps.txt').read_text().splitlines()[::-1]\n(HOME/'reversed.txt').write_text('\\n'.join(l) + '\\n')"
        )
    ],
    [py("(HOME/'reversed.txt').write_text((HOME/'steps.txt').read_text())")],
)
task(
    "files",
    "site-skeleton",
    "Create site/index.html containing <h1>Hi</h1> and site/css/style.css containing body{margin:0} in your home folder.",
    [],
    check(f"cat {H}/site/index.html {H}/site/css/style.css", ["<h1>Hi</h1>", "body{margin:0}"]),
    [
        py("(HOME/'site'/'css').mkdir(parents=True)"),
        py("(HOME/'site'/'index.html').write_text('<h1>Hi</h1>\\n')"),
        py("(HOME/'site'/'css'/'style.css').write_text('body{margin:0}\\n')"),
    ],
    [py("(HOME/'site').mkdir()"), py("(HOME/'site'/'index.html').write_text('<h1>Hi</h1>\\n')")],
)
task(
    "files",
    "infeasible-cloud-upload",
    "Upload report.txt to the company's cloud drive.",
    [write(f"{H}/report.txt", "quarterly\n")],
    {"func": "infeasible"},
    [],
    [],
)
TASKS[-1]["reference"] = [FAIL]  # infeasible: the right answer is to say so
# ---- terminal window, typed for real (difficulty 4..6) -------------------------------------
task(
    "terminal",
    "terminal-mkdir",
    "Use a terminal to create the folder logs/2024 in your home folder.",
    [],
    check(ok_if(f"[ -d {H}/logs/2024 ]"), ["OK"]),
    [py("import subprocess; subprocess.run(['mkdir', '-p', str(HOME/'logs'/'2024')], check=True)")],
    [py("import subprocess; subprocess.run(['mkdir', '-p', str(HOME/'logs'/'2023')], check=True)")],
)


# ---- text editor (gedit), typed and saved through the GUI -----------------------------------
def saved(tid: str) -> dict:
    """Ctrl+S, then wait (up to 30 s) until gedit's title drops the '*' of unsaved changes."""
    return gui(
        "import subprocess\npyautogui.hotkey('ctrl', 's')\n" + poll(f"' {tid}.txt (' in {WINDOWS}")
    )


for _i, (tid, text) in enumerate(
    [
        ("gedit-todo", "buy milk"),
        ("gedit-greeting", "hello from kubecua"),
        ("gedit-poem", "roses are red"),
    ]
):
    task(
        "editor",
        tid,
        f"The text editor has {tid}.txt open. Type the line: {text} and save the file.",
        [
            write(f"{H}/{tid}.txt", ""),
            {"type": "launch", "parameters": {"command": ["gedit", f"{H}/{tid}.txt"]}},
            # Keys sent before gedit has drawn its window are lost; actions now start in ms.
            wait_window(f"{tid}.txt"),
            wait_drawn(min_colors=20),
            {
                "type": "activate_window",
                "parameters": {"window_name": f"{tid}.txt", "strict": False},
            },
        ],
        check(f"cat {H}/{tid}.txt", [text]),
        [gui(f"pyautogui.write({text!r}, interval=0.01)"), saved(tid)],
        [gui(f"pyautogui.write({text[:-2]!r}, interval=0.01)"), saved(tid)],
        apps=["gedit"],
    )
