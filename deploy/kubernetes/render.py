#!/usr/bin/env python3
"""Renders a kustomization under deploy/kubernetes as `kustomize build` does, so that
the manifests can be checked where kustomize is not installed:

    python3 deploy/kubernetes/render.py deploy/kubernetes/base

Only the kustomize features these manifests use are implemented, and anything else
(another kustomization field, a generator option, a strategic-merge patch, a JSON
patch `move`...) is refused with exit status 2 instead of being ignored, so that the
output cannot quietly drift from kustomize's. Within what is implemented:

* fields: `resources` (files and directories), `namespace`, `labels` (`pairs` only:
  metadata labels, not selectors or templates), `configMapGenerator` (`name`,
  `behavior`, `files`, `literals`), `patches` (JSON 6902 operations add, remove,
  replace and test, inline or from a file, with a `target` by group, version, kind,
  name and namespace);
* generated ConfigMaps get kustomize's content-hash name suffix, and references to
  them are rewritten in pod templates (volumes, envFrom, env), nowhere else;
* objects come out in the order they were read, not kustomize's order by kind;
* files are read by PyYAML, which follows YAML 1.1 (an unquoted `on` is a boolean);
* stricter than kustomize: a patch whose target matches nothing is an error, and so
  is a Namespace object whose name is not the kustomization's `namespace`.

A test compares this output with kustomize's wherever kustomize is installed.
"""

import copy
import hashlib
import json
import os
import re
import sys

import yaml


class RenderError(Exception):
    pass


KUSTOMIZATION_FIELDS = {
    "apiVersion",
    "kind",
    "resources",
    "namespace",
    "labels",
    "configMapGenerator",
    "patches",
}

# Kinds that take no namespace; anything else, custom resources included, gets one.
CLUSTER_SCOPED = {
    "APIService",
    "ClusterRole",
    "ClusterRoleBinding",
    "CSIDriver",
    "CSINode",
    "CustomResourceDefinition",
    "IngressClass",
    "MutatingWebhookConfiguration",
    "Namespace",
    "Node",
    "PersistentVolume",
    "PriorityClass",
    "RuntimeClass",
    "StorageClass",
    "ValidatingWebhookConfiguration",
}

# Where each workload kind keeps its pod spec.
POD_SPEC_PATHS = {
    "Pod": ("spec",),
    "Deployment": ("spec", "template", "spec"),
    "DaemonSet": ("spec", "template", "spec"),
    "StatefulSet": ("spec", "template", "spec"),
    "ReplicaSet": ("spec", "template", "spec"),
    "Job": ("spec", "template", "spec"),
    "CronJob": ("spec", "jobTemplate", "spec", "template", "spec"),
}


def only(mapping, allowed, where):
    """Refuses the keys of `mapping` this renderer does not implement."""
    if not isinstance(mapping, dict):
        raise RenderError(f"{where}: expected a mapping, found {type(mapping).__name__}")
    unknown = sorted(set(mapping) - set(allowed))
    if unknown:
        raise RenderError(f"{where}: {', '.join(unknown)} not supported by this renderer")


def render(directory):
    """The objects `kustomize build directory` outputs."""
    objects, hashed = build(directory)
    add_hash_suffixes(objects, hashed)
    return objects


def build(directory):
    """One kustomization and those it includes, before name suffixes: its objects and
    the generated ConfigMaps among them (which get a suffix at the very end, as in
    kustomize, so that an overlay's merge changes the hash)."""
    path = os.path.join(directory, "kustomization.yaml")
    try:
        with open(path, encoding="utf-8") as file:
            kustomization = yaml.safe_load(file)
    except OSError as error:
        raise RenderError(f"{directory}: no kustomization.yaml ({error.strerror})") from None
    only(kustomization, KUSTOMIZATION_FIELDS, path)
    if kustomization.get("kind") != "Kustomization":
        raise RenderError(f"{path}: kind is not Kustomization")

    objects, hashed = [], []
    for resource in kustomization.get("resources", []):
        resource_path = os.path.join(directory, resource)
        if os.path.isdir(resource_path):
            more, more_hashed = build(resource_path)
            objects += more
            hashed += more_hashed
        else:
            objects += read_objects(resource_path)
    for generator in kustomization.get("configMapGenerator", []):
        generate_config_map(directory, generator, objects, hashed)
    for index, patch in enumerate(kustomization.get("patches", [])):
        apply_patch(directory, patch, objects, f"{path}: patches[{index}]")
    if "namespace" in kustomization:
        set_namespace(objects, kustomization["namespace"], path)
    for index, labels in enumerate(kustomization.get("labels", [])):
        add_labels(objects, labels, f"{path}: labels[{index}]")
    check_unique(objects, path)
    return objects, hashed


def read_objects(path):
    try:
        with open(path, encoding="utf-8") as file:
            documents = [doc for doc in yaml.safe_load_all(file) if doc is not None]
    except OSError as error:
        raise RenderError(f"{path}: {error.strerror}") from None
    for doc in documents:
        if not isinstance(doc, dict) or not all(
            isinstance(doc.get(key), str) for key in ("apiVersion", "kind")
        ):
            raise RenderError(f"{path}: a resource needs apiVersion and kind")
        if not isinstance(doc.get("metadata", {}).get("name"), str):
            raise RenderError(f"{path}: a {doc['kind']} needs metadata.name")
    return documents


def identity(obj):
    metadata = obj["metadata"]
    return (obj["kind"], metadata.get("namespace", ""), metadata["name"])


def check_unique(objects, where):
    seen = set()
    for obj in objects:
        key = identity(obj)
        if key in seen:
            raise RenderError(f"{where}: {'/'.join(filter(None, key))} is defined twice")
        seen.add(key)


def generate_config_map(directory, generator, objects, hashed):
    where = f"{directory}: configMapGenerator {generator.get('name')}"
    only(generator, {"name", "behavior", "files", "literals"}, where)
    data = {}

    def put(key, value):
        if key in data:
            raise RenderError(f"{where}: key {key} given twice")
        data[key] = value

    for source in generator.get("files", []):
        key, _, file = source.rpartition("=")
        path = os.path.join(directory, file)
        try:
            with open(path, encoding="utf-8") as content:
                put(key or os.path.basename(file), content.read())
        except (OSError, UnicodeDecodeError) as error:
            # Binary files would go to binaryData, which is not implemented.
            raise RenderError(f"{where}: {path}: {error}") from None
    for literal in generator.get("literals", []):
        key, equals, value = literal.partition("=")
        if not equals:
            raise RenderError(f"{where}: literal {literal!r} is not KEY=VALUE")
        if len(value) >= 2 and value[0] == value[-1] and value[0] in "'\"":
            value = value[1:-1]
        put(key, value)

    name = generator["name"]
    existing = [o for o in objects if o["kind"] == "ConfigMap" and o["metadata"]["name"] == name]
    behavior = generator.get("behavior", "create")
    if behavior == "create":
        if existing:
            raise RenderError(f"{where}: exists already (use behavior merge or replace)")
        config_map = {
            "apiVersion": "v1",
            "kind": "ConfigMap",
            "metadata": {"name": name},
            "data": data,
        }
        objects.append(config_map)
        hashed.append(config_map)
    elif behavior in ("merge", "replace"):
        if len(existing) != 1:
            raise RenderError(f"{where}: behavior {behavior} needs one ConfigMap {name}")
        if behavior == "merge":
            existing[0].setdefault("data", {}).update(data)
        else:
            existing[0]["data"] = data
    else:
        raise RenderError(f"{where}: behavior {behavior} not supported")


def apply_patch(directory, patch, objects, where):
    only(patch, {"patch", "path", "target"}, where)
    if ("patch" in patch) == ("path" in patch):
        raise RenderError(f"{where}: needs one of patch and path")
    if "path" in patch:
        try:
            with open(os.path.join(directory, patch["path"]), encoding="utf-8") as file:
                text = file.read()
        except OSError as error:
            raise RenderError(f"{where}: {patch['path']}: {error.strerror}") from None
    else:
        text = patch["patch"]
    operations = yaml.safe_load(text)
    if not isinstance(operations, list):
        raise RenderError(f"{where}: strategic-merge patches are not supported, only JSON 6902")
    if "target" not in patch:
        raise RenderError(f"{where}: a JSON 6902 patch needs a target")
    targets = [o for o in objects if matches(o, patch["target"], where)]
    if not targets:
        raise RenderError(f"{where}: the target matches no resource")
    for obj in targets:
        for operation in operations:
            apply_operation(obj, operation, where)


def matches(obj, target, where):
    only(target, {"group", "version", "kind", "name", "namespace"}, f"{where}: target")
    group, _, version = obj["apiVersion"].rpartition("/")
    actual = {
        "group": group,
        "version": version,
        "kind": obj["kind"],
        "name": obj["metadata"]["name"],
        "namespace": obj["metadata"].get("namespace", ""),
    }
    # kustomize reads each selector as an anchored regular expression.
    return all(re.fullmatch(str(wanted), actual[field]) for field, wanted in target.items())


def apply_operation(obj, operation, where):
    only(operation, {"op", "path", "value"}, f"{where}: operation")
    op = operation.get("op")
    if op not in ("add", "remove", "replace", "test"):
        raise RenderError(f"{where}: op {op} not supported")
    if op != "remove" and "value" not in operation:
        raise RenderError(f"{where}: op {op} needs a value")
    tokens = [t.replace("~1", "/").replace("~0", "~") for t in operation["path"].split("/")[1:]]
    if not tokens:
        raise RenderError(f"{where}: a patch of the whole object is not supported")
    parent = obj
    for token in tokens[:-1]:
        parent = step(parent, token, operation["path"], where)
    last = tokens[-1]
    value = copy.deepcopy(operation.get("value"))
    if isinstance(parent, list):
        if op == "add" and last == "-":
            parent.append(value)
            return
        index = list_index(parent, last, operation["path"], where, op == "add")
        if op == "add":
            parent.insert(index, value)
        elif op == "remove":
            del parent[index]
        elif op == "replace":
            parent[index] = value
        elif parent[index] != value:
            raise RenderError(f"{where}: test of {operation['path']} failed")
        return
    if not isinstance(parent, dict):
        raise RenderError(f"{where}: {operation['path']} is inside a scalar")
    if op != "add" and last not in parent:
        raise RenderError(f"{where}: {operation['path']} does not exist")
    if op in ("add", "replace"):
        parent[last] = value
    elif op == "remove":
        del parent[last]
    elif parent[last] != value:
        raise RenderError(f"{where}: test of {operation['path']} failed")


def step(node, token, path, where):
    if isinstance(node, list):
        return node[list_index(node, token, path, where, False)]
    if isinstance(node, dict) and token in node:
        return node[token]
    raise RenderError(f"{where}: {path} does not exist")


def list_index(items, token, path, where, may_append):
    limit = len(items) + (1 if may_append else 0)
    if not token.isdigit() or int(token) >= limit:
        raise RenderError(f"{where}: {path}: no item {token}")
    return int(token)


def set_namespace(objects, namespace, where):
    for obj in objects:
        if obj["kind"] == "Namespace":
            # kustomize renames such a Namespace; not implemented.
            if obj["metadata"]["name"] != namespace:
                raise RenderError(
                    f"{where}: Namespace {obj['metadata']['name']} is not {namespace}"
                )
        elif obj["kind"] not in CLUSTER_SCOPED:
            obj["metadata"]["namespace"] = namespace


def add_labels(objects, labels, where):
    only(labels, {"pairs", "includeSelectors", "includeTemplates"}, where)
    if labels.get("includeSelectors") or labels.get("includeTemplates"):
        raise RenderError(f"{where}: includeSelectors and includeTemplates are not supported")
    pairs = labels.get("pairs", {})
    if not all(isinstance(v, str) for v in pairs.values()):
        raise RenderError(f"{where}: label values must be strings")
    for obj in objects:
        obj["metadata"].setdefault("labels", {}).update(pairs)


def add_hash_suffixes(objects, hashed):
    renamed = {}
    for config_map in hashed:
        metadata = config_map["metadata"]
        new_name = f"{metadata['name']}-{content_hash(config_map)}"
        renamed[(metadata.get("namespace", ""), metadata["name"])] = new_name
        metadata["name"] = new_name
    for obj in objects:
        pod = pod_spec(obj)
        namespace = obj["metadata"].get("namespace", "")
        for ref in config_map_references(pod):
            ref["name"] = renamed.get((namespace, ref.get("name")), ref.get("name"))


def pod_spec(obj):
    pod = obj if obj["kind"] in POD_SPEC_PATHS else {}
    for key in POD_SPEC_PATHS.get(obj["kind"], ()):
        pod = pod.get(key) or {}
    return pod


def config_map_references(pod):
    """The objects in a pod spec whose `name` is a ConfigMap's."""
    for volume in pod.get("volumes", []):
        if "configMap" in volume:
            yield volume["configMap"]
        for source in volume.get("projected", {}).get("sources", []):
            if "configMap" in source:
                yield source["configMap"]
    for kind in ("initContainers", "containers", "ephemeralContainers"):
        for container in pod.get(kind, []):
            for source in container.get("envFrom", []):
                if "configMapRef" in source:
                    yield source["configMapRef"]
            for env in container.get("env", []):
                ref = env.get("valueFrom", {}).get("configMapKeyRef")
                if ref is not None:
                    yield ref


def content_hash(config_map):
    """kustomize's name suffix: the first ten hex digits of the SHA-256 of the Go JSON
    encoding of kind, name and data, with some digits and letters swapped so that the
    suffix cannot spell a word. The name kustomize hashes is always empty (it looks it
    up under a key that does not exist), so the same data gives the same suffix."""
    encoded = json.dumps(
        {"data": config_map.get("data", {}), "kind": "ConfigMap", "name": ""},
        sort_keys=True,
        separators=(",", ":"),
        ensure_ascii=False,
    )
    # Go's encoder escapes these for HTML; the hash is over its bytes.
    for char, escaped in (
        ("&", "\\u0026"),
        ("<", "\\u003c"),
        (">", "\\u003e"),
        ("\u2028", "\\u2028"),
        ("\u2029", "\\u2029"),
    ):
        encoded = encoded.replace(char, escaped)
    digest = hashlib.sha256(encoded.encode("utf-8")).hexdigest()[:10]
    return digest.translate(str.maketrans("013ae", "ghkmt"))


class Dumper(yaml.SafeDumper):
    pass


def represent_str(dumper, value):
    # Config files stay readable: multi-line strings as literal blocks.
    style = "|" if "\n" in value else None
    return dumper.represent_scalar("tag:yaml.org,2002:str", value, style=style)


Dumper.add_representer(str, represent_str)


def main(argv):
    if len(argv) != 2:
        print("usage: render.py KUSTOMIZATION_DIR", file=sys.stderr)
        return 2
    try:
        objects = render(argv[1])
    except (RenderError, yaml.YAMLError) as error:
        print(f"render.py: {error}", file=sys.stderr)
        return 2
    yaml.dump_all(objects, sys.stdout, Dumper=Dumper, sort_keys=False)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
