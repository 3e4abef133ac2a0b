"""A spec the models refuse, worded as the API server words its own refusals: each field by its path
as kubectl writes it (spec.desktop.external.endpoints[0]). The one formatter of pydantic's errors:
the operator's status messages and Events and the trainer's ConfigError name the same path as
`kubectl apply` would.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, TypeVar

from pydantic import BaseModel, ValidationError

M = TypeVar("M", bound=BaseModel)


class InvalidSpec(ValueError):
    """A spec its model refuses; the message names each field (spec.<path>: <why>), "; " between
    fields."""


def field_path(loc: Sequence[int | str], root: str = "spec") -> str:
    """A pydantic error location as kubectl writes a field path: list indexes in brackets.

    >>> field_path(("desktop", "external", "endpoints", 0))
    'spec.desktop.external.endpoints[0]'
    >>> field_path(("spec", "model", "lora", "targetModules", 1), root="")
    'spec.model.lora.targetModules[1]'
    """
    path = root + "".join(f"[{p}]" if isinstance(p, int) else f".{p}" for p in loc)
    return path.removeprefix(".") or "<root>"


def field_errors(err: ValidationError, root: str = "spec", inputs: bool = False) -> list[str]:
    """Every error as `<path>: <message>`, the path under `root` (field_path). `inputs` adds the
    refused value, cut to 60 characters (for a file the author reads, not for a status message)."""
    lines = []
    for e in err.errors(include_url=False):
        got = f" (got {e.get('input')!r:.60})" if inputs and e["type"] != "missing" else ""
        lines.append(f"{field_path(e['loc'], root)}: {e['msg']}{got}")
    return lines


def validate_spec(model: type[M], spec: Any, root: str = "spec") -> M:
    """`spec` as `model`; raises InvalidSpec naming every field the model refuses.

    >>> from kubecua_api.sandboxpool import SandboxPoolSpec
    >>> validate_spec(SandboxPoolSpec, {"replicas": -1, "egress": [{}, {"to": [{"ipBlock": {}}]}]})
    Traceback (most recent call last):
    ...
    kubecua_api.errors.InvalidSpec: spec.replicas: Input should be greater than or equal to 0; spec.egress[1].to[0].ipBlock.cidr: Field required
    """  # noqa: E501
    try:
        return model.model_validate(spec)
    except ValidationError as err:
        raise InvalidSpec("; ".join(field_errors(err, root))) from None
