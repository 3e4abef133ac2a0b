"""Run the kubecua operator: `python -m kubecua_operator [--namespace NS ...]`.

Watches SandboxPools and TrainingRuns (and their children) in the given namespaces, or in the whole
cluster without --namespace. Reads the kubeconfig from KUBECONFIG, or the in-cluster service
account. Settings come from KUBECUA_OPERATOR_* variables (see settings.py); /metrics listens on
KUBECUA_OPERATOR_METRICS_PORT (default 8080). Logs are JSON lines on stderr.
"""

from __future__ import annotations

import argparse
import asyncio
import logging

import kopf

from kubecua_operator import main as _handlers  # noqa: F401  (registers the kopf handlers)
from kubecua_operator import tokens, watches


def cli(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m kubecua_operator")
    parser.add_argument("--namespace", "-n", action="append", default=[], help="repeatable")
    parser.add_argument("--verbose", action="store_true")
    parser.add_argument("--liveness", default="", help="e.g. http://0.0.0.0:8081/healthz")
    args = parser.parse_args(argv)
    # kopf's JSON lines: message, timestamp, severity, and the object of a per-object logger.
    kopf.configure(verbose=args.verbose, log_format=kopf.LogFormat.JSON)
    for chatty in ("kubernetes", "httpx"):  # one line per request at DEBUG
        logging.getLogger(chatty).setLevel(logging.WARNING)
    try:
        tokens.key()  # refuse to start with no usable key rather than fail at the first pool
    except tokens.TokenKeyError as err:
        parser.error(str(err))
    watches.install()  # before kopf starts a watcher: a failed watch starts again
    asyncio.run(
        kopf.operator(
            namespaces=args.namespace,
            clusterwide=not args.namespace,
            liveness_endpoint=args.liveness or None,
            standalone=True,
        )
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(cli())
