"""The verifier of a TaskVerification (the operator's Job, operator/kubecua_operator/
taskverification/children.py): `kubecua tasks verify ...` as it is, then the manifest it wrote
into the TaskVerification's ConfigMap, where the operator reads it for the status.

    python -m kubecua_tasks.verify_job --config-map NAME --namespace NS -- \\
        tasks verify DIR --pool POOL ... --manifest /tmp/verified.json

Exit status: verify's (0 with a manifest, whatever its verdicts; 2 for bad input), or 1 when the
manifest cannot be written into the ConfigMap (the API's answer is printed: a manifest over the
ConfigMap's 1 MiB, a missing grant). Only the ConfigMap's key verified.json is written (a merge
patch; the operator made the ConfigMap and the Role grants patch on it alone).
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path
from typing import Any

from kubecua_api.taskmanifest import VerifiedManifest

MANIFEST_KEY = "verified.json"  # kubecua_api.taskverification.MANIFEST_KEY


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m kubecua_tasks.verify_job", description=__doc__)
    p.add_argument("--config-map", required=True, help="the ConfigMap the manifest goes into")
    p.add_argument("--namespace", required=True, help="its namespace")
    p.add_argument("verify", nargs=argparse.REMAINDER, help="-- then `kubecua`'s arguments")
    return p


def manifest_path(verify_args: list[str]) -> Path:
    """Where verify writes the manifest: its --manifest, else DIR/verified.json.

    >>> str(manifest_path(["tasks", "verify", "/t", "--manifest", "/tmp/m.json"]))
    '/tmp/m.json'
    >>> str(manifest_path(["tasks", "verify", "/t", "--pool", "p"]))
    '/t/verified.json'
    """
    if "--manifest" in verify_args:
        return Path(verify_args[verify_args.index("--manifest") + 1])
    return Path(verify_args[2]) / MANIFEST_KEY


def publish(text: str, name: str, namespace: str, api_client: Any = None) -> None:
    """Write `text` (a verified manifest) under key verified.json of ConfigMap `name`."""
    from kubernetes import client, config

    if api_client is None:
        try:
            config.load_incluster_config()
        except config.ConfigException:
            config.load_kube_config(config_file=os.environ.get("KUBECONFIG") or None)
    core = client.CoreV1Api(api_client)
    core.patch_namespaced_config_map(name, namespace, {"data": {MANIFEST_KEY: text}})


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    verify_args = args.verify[1:] if args.verify[:1] == ["--"] else args.verify
    from kubecua_tasks.cli import main as kubecua

    try:
        kubecua(verify_args)
    except SystemExit as done:  # verify_command always exits
        code = done.code if isinstance(done.code, int) else (0 if done.code is None else 1)
        if code:
            return code
    path = manifest_path(verify_args)
    text = path.read_text()
    VerifiedManifest.model_validate_json(text)  # never publish what the operator cannot read
    try:
        publish(text, args.config_map, args.namespace)
    except Exception as err:
        print(f"verify_job: the manifest ({len(text)} bytes) could not be written into ConfigMap"
              f" {args.namespace}/{args.config_map}: {err}", file=sys.stderr)  # fmt: skip
        return 1
    print(f"verify_job: manifest written into ConfigMap {args.namespace}/{args.config_map}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
