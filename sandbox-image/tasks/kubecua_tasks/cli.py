"""`kubecua`: the task commands.

    kubecua tasks list [--params]
    kubecua tasks generate NAME [--param KEY=VALUE ...] --out DIR [--check]
    kubecua tasks verify DIR [--desktops N | --pool NAME [--namespace NS] --token-file F
                             [--max-sandboxes N]] [--repeats 2] [--manifest DIR/verified.json]

Errors say what to fix and exit 2 (bad input) or 1 (a check that failed)."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from kubecua_tasks.files import stale, write
from kubecua_tasks.plugin import ParamError, discover, parse_assignments


def _parser() -> argparse.ArgumentParser:
    top = argparse.ArgumentParser(prog="kubecua", description="kubecua task families")
    groups = top.add_subparsers(dest="group", required=True)
    tasks = groups.add_parser("tasks", help="generate and verify task families").add_subparsers(
        dest="command", required=True
    )
    ls = tasks.add_parser("list", help="installed families (entry points kubecua.task_families)")
    ls.add_argument("--params", action="store_true", help="also each family's parameters")
    gen = tasks.add_parser("generate", help="write a family's task files")
    gen.add_argument("name")
    gen.add_argument("--param", action="append", default=[], metavar="KEY=VALUE",
                     help="VALUE: JSON, else a string; KEY may be dotted")  # fmt: skip
    gen.add_argument("--out", type=Path, required=True, help="folder the family's folder goes in")
    gen.add_argument("--check", action="store_true", help="write nothing; fail if a file differs")
    ver = tasks.add_parser(
        "verify", help="play each task's solutions on desktops; write a manifest"
    )
    ver.add_argument("dir", type=Path, help="folder of task JSON (searched recursively)")
    where = ver.add_mutually_exclusive_group()
    where.add_argument(
        "--desktops", type=int, default=2, help="local desktops to start (default 2)"
    )
    where.add_argument("--pool", help="a SandboxPool's sandboxes, leased through the episode API")
    ver.add_argument("--namespace", default="default", help="the pool's namespace")
    ver.add_argument("--token-file", type=Path, help="the pool's bearer token (its Secret's value)")
    ver.add_argument("--repeats", type=int, default=2, help="episodes of each solution (>= 2)")
    ver.add_argument("--max-sandboxes", type=int, help="with --pool: at most N sandboxes at once")
    ver.add_argument("--manifest", type=Path, help="where to write it (default DIR/verified.json)")
    ver.add_argument("--a11y", action="store_true", help="fingerprint the accessibility tree too")
    return top


def main(argv: list[str] | None = None) -> None:
    args = _parser().parse_args(argv)
    try:
        if args.command == "list":
            _list(args.params)
        elif args.command == "generate":
            _generate(args.name, args.param, args.out, args.check)
        else:
            from kubecua_tasks.verify_cli import verify_command

            verify_command(args)
    except ParamError as err:  # bad input: exit 2, as argparse does for its own errors
        print(f"kubecua: {err}", file=sys.stderr)
        sys.exit(2)


def _list(params: bool) -> None:
    for name, family in discover().items():
        print(f"{name:18} {family.summary}")
        if params:
            for pname, ptype, default in family.describe():
                print(f"    {pname:16} {ptype:28} default {default}")


def _generate(name: str, pairs: list[str], out: Path, check: bool) -> None:
    families = discover()
    if name not in families:
        known = ", ".join(families) or "none"
        raise ParamError(f"no task family {name!r} is installed (installed: {known})")
    family = families[name]
    files = family.generate(family.parse(parse_assignments(pairs)))
    if check:
        if bad := stale(files, out):
            sys.exit(f"kubecua: {len(bad)} stale files in {out}: {', '.join(bad[:10])}")
        print(f"{name}: {len(files)} files in {out} are as the generator writes them")
        return
    write(files, out)
    tasks = sum(1 for n in files if n.endswith(".solutions.json"))
    print(f"{name}: wrote {tasks} tasks ({len(files)} files) under {out}")


if __name__ == "__main__":
    main()
