"""The API server enforces a CRD's structural schema and names the offending field path."""

import pytest
from kubernetes import client
from kubernetes.client.rest import ApiException

GROUP, PLURAL = "smoke.kubecua.dev", "widgets"

CRD = {
    "apiVersion": "apiextensions.k8s.io/v1",
    "kind": "CustomResourceDefinition",
    "metadata": {"name": f"{PLURAL}.{GROUP}"},
    "spec": {
        "group": GROUP,
        "scope": "Namespaced",
        "names": {"plural": PLURAL, "singular": "widget", "kind": "Widget"},
        "versions": [
            {
                "name": "v1",
                "served": True,
                "storage": True,
                "schema": {
                    "openAPIV3Schema": {
                        "type": "object",
                        "properties": {
                            "spec": {
                                "type": "object",
                                "required": ["size"],
                                "properties": {
                                    "size": {"type": "integer", "minimum": 1},
                                    "color": {"type": "string", "enum": ["red", "blue"]},
                                },
                            }
                        },
                    }
                },
            }
        ],
    },
}


@pytest.fixture(scope="module")
def widgets(cluster):
    api = cluster.api_client()
    ext = client.ApiextensionsV1Api(api)
    ext.create_custom_resource_definition(CRD)
    cluster.kubectl("wait", "--for=condition=Established", f"crd/{PLURAL}.{GROUP}", "--timeout=60s")
    yield client.CustomObjectsApi(api)
    ext.delete_custom_resource_definition(f"{PLURAL}.{GROUP}")


def widget(name, spec):
    return {"apiVersion": f"{GROUP}/v1", "kind": "Widget", "metadata": {"name": name}, "spec": spec}


def create(widgets, namespace, body):
    return widgets.create_namespaced_custom_object(GROUP, "v1", namespace, PLURAL, body)


def test_valid_widget_is_stored(widgets, namespace):
    created = create(widgets, namespace, widget("ok", {"size": 3, "color": "red"}))
    assert created["spec"] == {"size": 3, "color": "red"}


@pytest.mark.parametrize(
    ("spec", "field"),
    [
        ({"size": 0}, "spec.size"),
        ({"size": "big"}, "spec.size"),
        ({"size": 2, "color": "green"}, "spec.color"),
        ({"color": "red"}, "spec.size"),
    ],
)
def test_invalid_widget_is_rejected_naming_the_field(widgets, namespace, spec, field):
    with pytest.raises(ApiException) as err:
        create(widgets, namespace, widget("bad", spec))
    assert err.value.status == 422
    assert field in err.value.body
