"""Writes the families a TOML file declares (untuned_families.toml: one table a family, naming its
generator plugin and that generator's parameters) into a folder, one subfolder a family, each
through its plugin as `kubecua tasks generate` runs it:

    sandbox-image/tasks/.venv/bin/python sandbox-image/tasks/make_families.py \
        sandbox-image/tasks/untuned_families.toml --out out/families [--check | --commands]

Each family's folder is emptied before it is written, so a file of an earlier declaration (a
task id that changed with a key) never lies beside the new ones: the benchmark reads every JSON
of a split folder. --check writes nothing and fails while a file differs from what the
generator writes; --commands prints the `kubecua tasks generate` command of each family instead
(the same files: tests/test_untuned_families.py). Leaves out: families that are not generated
from parameters (the built-in ones are make_tasks.py's)."""

from __future__ import annotations

import argparse
import json
import shlex
import shutil
import sys
import tomllib
from pathlib import Path
from typing import Any

from kubecua_tasks.files import stale, write
from kubecua_tasks.plugin import ParamError, discover


def declared(spec: Path) -> dict[str, tuple[str, dict[str, Any]]]:
    """name -> (generator, parameters) for each table of `spec`; the name is the table's."""
    out = {}
    for name, table in tomllib.loads(spec.read_text()).items():
        params = dict(table)
        generator = params.pop("generator", None)
        if not isinstance(generator, str):
            raise SystemExit(f'{spec}: [{name}] needs generator = "<plugin name>"')
        if "name" in params:  # the folder is the table's name: one name, not two
            raise SystemExit(f"{spec}: [{name}] sets name; the table's name is the family's")
        out[name] = (generator, {"name": name, **params})
    return out


def files(generator: str, params: dict[str, Any]) -> dict[str, str]:
    families = discover()
    if generator not in families:
        known = ", ".join(families)
        raise ParamError(f"no task family {generator!r} is installed (installed: {known})")
    family = families[generator]
    return family.generate(family.parse(params))


def commands(spec: Path, out: Path) -> list[str]:
    """The `kubecua tasks generate` command line of each declared family."""
    lines = []
    for generator, params in declared(spec).values():
        args = ["kubecua", "tasks", "generate", generator]
        for key, value in params.items():
            shown = value if isinstance(value, str) else json.dumps(value, separators=(",", ":"))
            args += ["--param", f"{key}={shown}"]
        lines.append(shlex.join([*args, "--out", str(out)]))
    return lines


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description="Write the families a TOML file declares.")
    parser.add_argument("spec", type=Path, help="the TOML file (untuned_families.toml)")
    parser.add_argument("--out", type=Path, required=True, help="each family goes in OUT/<name>")
    mode = parser.add_mutually_exclusive_group()
    mode.add_argument("--check", action="store_true", help="write nothing; fail if any is stale")
    mode.add_argument("--commands", action="store_true", help="print the kubecua commands")
    args = parser.parse_args(argv)
    if args.commands:
        print("\n".join(commands(args.spec, args.out)))
        return
    bad = []
    for name, (generator, params) in declared(args.spec).items():
        try:
            written = files(generator, params)
        except ParamError as err:  # names the parameter and what to fix
            sys.exit(f"{args.spec} [{name}]: {err}")
        if args.check:
            bad += stale(written, args.out, {name})
            continue
        shutil.rmtree(args.out / name, ignore_errors=True)
        write(written, args.out)
        tasks = sum(1 for n in written if n.endswith(".solutions.json"))
        print(f"{name}: wrote {tasks} tasks ({len(written)} files) under {args.out / name}")
    if bad:
        sys.exit(f"stale family files in {args.out} (run without --check): {', '.join(bad[:10])}")


if __name__ == "__main__":
    main()
