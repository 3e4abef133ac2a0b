"""`kubecua tasks verify`: local desktops or a pool's, then the manifest, then a summary line."""

from __future__ import annotations

import argparse
import asyncio
import sys

from kubecua_api.taskmanifest import VerifiedManifest
from kubecua_sandbox_client import read_token
from kubecua_tasks.desktops import local_desktops
from kubecua_tasks.files import MANIFEST
from kubecua_tasks.plugin import ParamError
from kubecua_tasks.pool import PoolWatch
from kubecua_tasks.verify import load_folder, verify


async def _run(args: argparse.Namespace) -> VerifiedManifest:
    if args.pool:
        token = args.token_file.read_text().strip() if args.token_file else read_token()
        watch = PoolWatch(args.pool, args.namespace)
        try:
            await watch.start()
        except LookupError as err:
            raise ParamError(f"--pool {args.pool}: {err}") from None
        try:  # the pool is followed while verification runs: sandboxes come and go
            if watch.foreign:
                print(f"ignored slices the operator did not make for the pool: "
                      f"{', '.join(sorted(watch.foreign))}")  # fmt: skip
            if not watch.sandboxes.urls:
                raise ParamError(
                    f"--pool {args.pool}: no ready sandboxes in namespace {args.namespace}"
                )
            return await verify(
                args.dir, watch.sandboxes, token, args.repeats, args.a11y,
                max_sandboxes=args.max_sandboxes,
            )  # fmt: skip
        finally:
            await watch.stop()
    async with local_desktops(args.desktops) as (urls, token):
        return await verify(args.dir, urls, token, args.repeats, args.a11y)


def verify_command(args: argparse.Namespace) -> None:
    if not args.dir.is_dir():
        raise ParamError(f"{args.dir}: not a folder of tasks")
    if args.repeats < 2:
        raise ParamError(f"--repeats {args.repeats}: at least 2, or a flaky task cannot show")
    if args.desktops < 1:
        raise ParamError(f"--desktops {args.desktops}: at least 1")
    if args.max_sandboxes is not None and (args.max_sandboxes < 1 or not args.pool):
        raise ParamError(f"--max-sandboxes {args.max_sandboxes}: at least 1, with --pool")
    try:
        load_folder(args.dir)
    except ValueError as err:
        raise ParamError(str(err)) from None
    manifest = asyncio.run(_run(args))
    out = args.manifest or args.dir / MANIFEST
    out.write_text(manifest.model_dump_json(indent=2) + "\n")
    s = manifest.summary
    counts = ", ".join(f"{k} {v}" for k, v in sorted(s.items()) if k != "usable")
    where = f"{len(manifest.sandboxes)} desktops"
    print(f"{len(manifest.tasks)} tasks in {manifest.seconds:.0f} s on {where}: ")
    print(f"  {s.get('usable', 0)} usable; {counts}; manifest {out}")
    sys.exit(0)
