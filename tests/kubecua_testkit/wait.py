"""Wait on Kubernetes state through watches, never through fixed sleeps."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from kubernetes import watch


def wait_for_objects(
    list_func: Callable[..., Any],
    predicate: Callable[[list[Any]], bool],
    *,
    timeout: float = 60,
    **list_kwargs: Any,
) -> list[Any]:
    """List, then watch, until predicate(current objects) holds; returns those objects.

    `list_func` is a kubernetes client list call (e.g. CoreV1Api.list_namespaced_pod) and
    `list_kwargs` its arguments (namespace, label_selector, ...). The current set is kept by
    name and updated on every event, so the predicate always sees the whole state."""
    deadline = time.monotonic() + timeout
    listing = list_func(**list_kwargs)
    objects = {o.metadata.name: o for o in listing.items}
    version = listing.metadata.resource_version
    while not predicate(list(objects.values())):
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            raise TimeoutError(f"condition not met within {timeout}s; last state: {list(objects)}")
        stream = watch.Watch().stream(
            list_func,
            resource_version=version,
            timeout_seconds=max(1, int(remaining)),
            **list_kwargs,
        )
        for event in stream:
            obj = event["object"]
            version = obj.metadata.resource_version
            if event["type"] == "DELETED":
                objects.pop(obj.metadata.name, None)
            else:
                objects[obj.metadata.name] = obj
            if predicate(list(objects.values())):
                break
    return list(objects.values())


def wait_for_object(
    custom: Any,
    group: str,
    version: str,
    namespace: str,
    plural: str,
    name: str,
    predicate: Callable[[dict], bool],
    *,
    timeout: float,
    what: str,
) -> dict:
    """Get, then watch, one custom object (a CustomObjectsApi's) until predicate(object) holds;
    returns it. `what` names the wait in the TimeoutError, beside the object's last status."""
    args = (group, version, namespace, plural)
    deadline = time.monotonic() + timeout
    obj: dict = custom.get_namespaced_custom_object(*args, name)
    while not predicate(obj):
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            raise TimeoutError(f"{what}: not within {timeout}s; status {obj.get('status')}")
        stream = watch.Watch().stream(
            custom.list_namespaced_custom_object,
            *args,
            field_selector=f"metadata.name={name}",
            resource_version=obj["metadata"]["resourceVersion"],
            timeout_seconds=max(1, int(remaining)),
        )
        for event in stream:
            obj = event["object"]
            if predicate(obj):
                break
    return obj
