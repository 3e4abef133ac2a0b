"""Pieces both kinds share: the model base, Kubernetes types, and the helpers the CRD needs.

Every model maps camelCase YAML to snake_case Python and forbids unknown fields, so a typo such as
`groupsize` fails naming its path. What JSON Schema cannot say but the CRD needs (int-or-string,
`default: {}` on a sub-object) is written here once, through `json_schema_extra`/`WithJsonSchema`.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal, TypeVar

from pydantic import BaseModel, ConfigDict, Field, StringConstraints, WithJsonSchema
from pydantic.alias_generators import to_camel


class ApiModel(BaseModel):
    model_config = ConfigDict(alias_generator=to_camel, populate_by_name=True, extra="forbid")


M = TypeVar("M", bound=BaseModel)


def defaulted(model: type[M], description: str) -> Any:
    """A sub-object whose every field has a default: absent means all defaults. The CRD says so
    with `default: {}` (the API server then fills in each field's own default)."""
    return Field(default_factory=model, description=description, json_schema_extra={"default": {}})


# A Kubernetes quantity (e.g. 500m, 2Gi or 4): the API server's int-or-string with its pattern,
# never negative (the Pod API refuses a negative request or limit, a pod at a time: issue 42).
QUANTITY_PATTERN = (
    r"^\+?(([0-9]+(\.[0-9]*)?)|(\.[0-9]+))(([KMGTPE]i)|[numkMGTPE]"
    r"|([eE](\+|-)?(([0-9]+(\.[0-9]*)?)|(\.[0-9]+))))?$"
)
Quantity = Annotated[
    Annotated[int, Field(ge=0)]
    | Annotated[str, StringConstraints(max_length=64, pattern=QUANTITY_PATTERN)],
    WithJsonSchema(
        {
            "x-kubernetes-int-or-string": True,
            "anyOf": [{"type": "integer"}, {"type": "string"}],
            "minimum": 0,
            "maxLength": 64,
            "pattern": QUANTITY_PATTERN,
        }
    ),
]

# Patterns of strings the operator copies into a Job, Pod or Service, so that the API server
# refuses a bad one at the run's or pool's admission, naming the field, and not later at the
# child's (where only a condition can tell of it). An image reference as the kubelet parses it
# (docker's grammar: [registry[:port]/]path[:tag][@digest]); a label value (a Kueue queue name
# lands on the trainer Job as one); an absolute mount path (the API refuses ':').
IMAGE_PATTERN = (
    r"^([A-Za-z0-9]([-A-Za-z0-9]*[A-Za-z0-9])?(\.[A-Za-z0-9]([-A-Za-z0-9]*[A-Za-z0-9])?)*"
    r"(:[0-9]+)?/)?[a-z0-9]+(([._]|__|-+)[a-z0-9]+)*(/[a-z0-9]+(([._]|__|-+)[a-z0-9]+)*)*"
    r"(:[A-Za-z0-9_][A-Za-z0-9_.-]{0,127})?(@[A-Za-z][A-Za-z0-9]*([-_+.][A-Za-z][A-Za-z0-9]*)*"
    r":[0-9a-fA-F]{32,})?$"
)
Image = Annotated[str, StringConstraints(max_length=1024, pattern=IMAGE_PATTERN)]
LABEL_VALUE_PATTERN = r"^(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?$"
MOUNT_PATH_PATTERN = r"^/[^:]*$"

# RFC 3339 time as the API server writes it; kept a string (status is patched as JSON).
DateTime = Annotated[str, WithJsonSchema({"type": "string", "format": "date-time"})]


class Condition(ApiModel):
    type: str = Field(description="Condition type.")
    status: Literal["True", "False", "Unknown"] = Field(description="Condition status.")
    reason: str | None = Field(default=None, description="CamelCase reason from a closed set.")
    message: str | None = Field(default=None, description="Human-readable detail.")
    last_transition_time: DateTime | None = Field(
        default=None, description="When status last changed."
    )
    observed_generation: int | None = Field(
        default=None, description="Generation this condition describes."
    )


def conditions(description: str) -> Any:
    """status.conditions: a list keyed by type (server-side apply merges it by type)."""
    return Field(
        default=None,
        description=description,
        json_schema_extra={"x-kubernetes-list-type": "map", "x-kubernetes-list-map-keys": ["type"]},
    )
