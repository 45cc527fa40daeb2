#!/usr/bin/env python3
"""Validates Kubernetes objects against the API's OpenAPI schemas, without a cluster:

    python3 deploy/kubernetes/validate.py deploy/kubernetes/base deploy/kubernetes/single-node deploy/kubernetes/overlays/*
    kubectl kustomize deploy/kubernetes/base | python3 deploy/kubernetes/validate.py -

A directory is rendered as kustomize would (render.py); a file, or `-` for standard
input, is read as YAML objects. Built-in kinds are checked with kubernetes-validate in
strict mode (an unknown field is an error, as with `kubectl apply --validate=strict`).
The Prometheus Operator's ServiceMonitor and PrometheusRule have no bundled schema
and are checked against the hand-written ones in schemas/; any other kind without a
schema is an error. What schemas cannot see (a Service port name over 15 characters,
a selector that matches no pod) is the API server's and the tests' business.

Exit status: 0 when every object is valid, 1 when one is not, 2 when an input cannot
be read or rendered. Needs PyYAML and kubernetes-validate (pip install).
"""

import argparse
import json
import os
import sys

import jsonschema
import kubernetes_validate
import referencing
import referencing.jsonschema
import yaml

import render

# Kept in step with the Kubernetes versions the manifests are meant for.
KUBERNETES_VERSION = "1.33"

SCHEMAS = os.path.join(os.path.dirname(os.path.abspath(__file__)), "schemas")
CUSTOM_SCHEMAS = {
    ("monitoring.coreos.com/v1", "ServiceMonitor"): "servicemonitor.json",
    ("monitoring.coreos.com/v1", "PrometheusRule"): "prometheusrule.json",
}


def custom_validators():
    """A validator per custom kind, with schemas/ as the registry their `$ref`s use."""
    resources = {}
    for name in sorted(os.listdir(SCHEMAS)):
        with open(os.path.join(SCHEMAS, name), encoding="utf-8") as file:
            resources[name] = referencing.Resource.from_contents(
                json.load(file), default_specification=referencing.jsonschema.DRAFT202012
            )
    registry = referencing.Registry().with_resources(resources.items())
    return {
        kind: jsonschema.Draft202012Validator(resources[name].contents, registry=registry)
        for kind, name in CUSTOM_SCHEMAS.items()
    }


def read(path):
    if path != "-" and os.path.isdir(path):
        return render.render(path)
    if path == "-":
        return [doc for doc in yaml.safe_load_all(sys.stdin) if doc is not None]
    with open(path, encoding="utf-8") as file:
        return [doc for doc in yaml.safe_load_all(file) if doc is not None]


def where(error):
    """The JSON path of an error, as `spec.containers[0].image`."""
    out = ""
    for part in error.absolute_path:
        out += f"[{part}]" if isinstance(part, int) else f".{part}"
    return out.lstrip(".") or "(object)"


def problems(obj, version, validators):
    if not isinstance(obj, dict) or not isinstance(obj.get("kind"), str):
        return ["not a Kubernetes object (no kind)"]
    validator = validators.get((obj.get("apiVersion"), obj["kind"]))
    if validator is not None:
        errors = sorted(validator.iter_errors(obj), key=lambda e: list(map(str, e.absolute_path)))
        return [f"{where(e)}: {e.message}" for e in errors]
    try:
        kubernetes_validate.validate(obj, version, strict=True)
    except kubernetes_validate.ValidationError as error:
        # kubernetes-validate stops at the first error of an object.
        return [f"{where(error)}: {error.message}"]
    except kubernetes_validate.SchemaNotFoundError as error:
        return [f"{error.message} (a custom resource's schema goes in schemas/ and CUSTOM_SCHEMAS)"]
    return []


def name(obj):
    if not isinstance(obj, dict):
        return "(not an object)"
    metadata = obj.get("metadata") or {}
    path = "/".join(filter(None, (metadata.get("namespace"), metadata.get("name"))))
    return f"{obj.get('kind', '?')} {path or '(unnamed)'}"


def main(argv):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "paths", nargs="+", metavar="PATH", help="kustomization directory, YAML file or -"
    )
    parser.add_argument("-k", "--kubernetes-version", default=KUBERNETES_VERSION)
    args = parser.parse_args(argv[1:])

    validators = custom_validators()
    invalid = False
    for path in args.paths:
        try:
            objects = read(path)
        except (render.RenderError, yaml.YAMLError, OSError) as error:
            print(f"{path}: {error}", file=sys.stderr)
            return 2
        found = [
            (name(obj), p)
            for obj in objects
            for p in problems(obj, args.kubernetes_version, validators)
        ]
        for what, problem in found:
            print(f"{path}: {what}: {problem}", file=sys.stderr)
        invalid = invalid or bool(found)
        if not found:
            kinds = ", ".join(sorted({obj["kind"] for obj in objects}))
            count = f"{len(objects)} object{'' if len(objects) == 1 else 's'}"
            print(f"{path}: {count} valid for Kubernetes {args.kubernetes_version} ({kinds})")
    return 1 if invalid else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
