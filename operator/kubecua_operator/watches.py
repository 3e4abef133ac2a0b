"""Watches that never stop, and whether each one is up (issue 42, item 1).

kopf retries a failing request a few times (settings.networking.error_backoffs) and then lets the
error out of its watch stream, which ends the watcher task for good: nothing restarts it while
the operator runs (kopf issues 1145 and 1276, open). A ClusterRoleBinding deleted for half a
minute, an expired token or an API server that stays away past the retries then left the pools
blind to their children and their own specs until someone restarted the operator, while its
liveness probe said 200.

So every kopf watch stream goes through `resilient_watch`: when the stream fails, it is started
again, list first, after a backoff that doubles up to `watch_backoff_max_seconds`, for as long as
the operator runs. Each stream's state is kept in WATCHES: down from the moment its error came
out until a list succeeds again. The liveness probe (main.py) fails while any stream is down,
so a watch that cannot recover ends in a restart by the kubelet; and when a stream is back, the
API epoch moves on (apihealth.py), so every pool re-reads itself and re-lists its children: what
was deleted meanwhile never reached kopf's indexes as a DELETED event.

kopf offers no hook for this: `install()` replaces the one function its watchers call
(kopf._cogs.clients.watching.infinite_watch, looked up at each call). kopf is pinned
(operator/pyproject.toml); `install` refuses to run on a kopf whose function has another
signature, and tests/test_watch_recovery.py checks the whole path on the real API server.
"""

from __future__ import annotations

import asyncio
import inspect
import logging
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Any

from kopf._cogs.clients import watching

from kubecua_operator import metrics
from kubecua_operator import settings as settings_mod
from kubecua_operator.apihealth import HEALTH

log = logging.getLogger(__name__)
KOPF_STREAM = watching.infinite_watch  # kopf's own: list, then watch, until an error escapes
KOPF_PARAMS = ["settings", "resource", "namespace", "operator_paused", "_iterations"]


@dataclass
class WatchState:
    down_since: float | None = None  # when its error came out; None while up
    error: str = ""
    failures: int = 0  # in a row, for the backoff


class Watches:
    """The state of every kopf watch stream, by name (`<resource>@<namespace or cluster>`)."""

    def __init__(self) -> None:
        self.streams: dict[str, WatchState] = {}

    def started(self, name: str) -> None:
        self.streams.setdefault(name, WatchState())
        metrics.WATCH_UP.labels(name).set(0)

    def listed(self, name: str) -> bool:
        """A list succeeded; True when the stream was down before (it has recovered)."""
        state = self.streams.setdefault(name, WatchState())
        recovered = state.down_since is not None
        state.down_since, state.error, state.failures = None, "", 0
        metrics.WATCH_UP.labels(name).set(1)
        return recovered

    def failed(self, name: str, error: BaseException) -> int:
        """The stream's error came out; returns how many times in a row it has failed."""
        state = self.streams.setdefault(name, WatchState())
        if state.down_since is None:
            state.down_since = time.monotonic()
        state.error = f"{type(error).__name__}: {error}"[:300]
        state.failures += 1
        metrics.WATCH_UP.labels(name).set(0)
        metrics.WATCH_RESTARTS.labels(name).inc()
        return state.failures

    def down(self) -> dict[str, tuple[float, str]]:
        """Streams that are down now: name -> (seconds down, the last error)."""
        now = time.monotonic()
        return {
            name: (now - state.down_since, state.error)
            for name, state in sorted(self.streams.items())
            if state.down_since is not None
        }


WATCHES = Watches()


def backoff(failures: int, cap: float) -> float:
    """Seconds before restarting a stream that failed `failures` times in a row: 1, 2, 4, ...
    up to `cap`.

    >>> [backoff(n, 10.0) for n in (1, 2, 3, 4, 5, 9)]
    [1.0, 2.0, 4.0, 8.0, 10.0, 10.0]
    """
    return float(min(cap, 2 ** min(failures - 1, 30)))


def stream_name(resource: Any, namespace: Any) -> str:
    """e.g. `sandboxpools.v1alpha1.kubecua.dev@cluster`, `pods.v1@team-a`."""
    return f"{resource}@{namespace or 'cluster'}"


async def resilient_watch(
    *,
    settings: Any,
    resource: Any,
    namespace: Any,
    operator_paused: Any = None,
    _iterations: int | None = None,
) -> AsyncIterator[Any]:
    """kopf's stream of one resource, started again (list, then watch) whenever it fails."""
    name = stream_name(resource, namespace)
    WATCHES.started(name)
    while True:
        try:
            async for event in KOPF_STREAM(
                settings=settings, resource=resource, namespace=namespace,
                operator_paused=operator_paused, _iterations=_iterations,
            ):  # fmt: skip
                if event is watching.Bookmark.LISTED and WATCHES.listed(name):
                    log.warning("watch %s is back: listed again", name)
                    HEALTH.resync()  # every pool re-reads what the down watch missed
                yield event
        except Exception as err:  # any error ends kopf's stream; none ends ours
            failures = WATCHES.failed(name, err)
        else:
            if _iterations is not None:  # kopf's own tests bound the loop; we never do
                return
            failures = WATCHES.failed(name, RuntimeError("the stream ended"))
        delay = backoff(failures, settings_mod.get().watch_backoff_max_seconds)
        log.warning("watch %s is down (%s); listing again in %.0fs",
                    name, WATCHES.streams[name].error, delay)  # fmt: skip
        await asyncio.sleep(delay)


def install() -> None:
    """Make every kopf watcher use resilient_watch (before kopf starts its watchers)."""
    params = list(inspect.signature(KOPF_STREAM).parameters)
    if params != KOPF_PARAMS:
        raise RuntimeError(
            f"kopf's infinite_watch takes {params}, not {KOPF_PARAMS}: kopf changed; "
            "check kubecua_operator/watches.py against it before upgrading"
        )
    watching.infinite_watch = resilient_watch


def probe_message() -> str:
    """'' while every stream is up, else what the liveness probe reports."""
    down = WATCHES.down()
    return "; ".join(f"watch {n} down for {s:.0f}s ({e})" for n, (s, e) in down.items())
