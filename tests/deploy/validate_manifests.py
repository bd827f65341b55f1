#!/usr/bin/env python3
"""Validates Kubernetes manifests offline, as an API server with strict field validation would.

Each object is checked against the schema of its apiVersion/kind, and a field that the schema does
not know is an error (a typo such as `readinessprobe` is rejected, not silently dropped):

- the built-in kinds against the Kubernetes 1.32 OpenAPI schema that kubernetes-validate ships
  (its strict variant: additionalProperties false), the release that matches kubectl 1.32;
- the prometheus-operator kinds (monitoring.coreos.com, e.g. ServiceMonitor) against the JSON
  schema of the pydantic models that cloudcoil-models-prometheus-operator generates from the
  operator's CRDs, made strict here (every object schema that lists its properties gets
  additionalProperties false: those models themselves let unknown fields through).

    python validate_manifests.py [--dump-json OUT.json] [--parse-only] FILE.yaml...

Prints one line per problem ("FILE: Kind/name: spec.x.y: message") and exits 1 if there is any,
else prints "validated N objects: Kind/name ..." and exits 0. For each object that fails its schema
it reports jsonschema's best match (kubernetes-validate stops at one error), and when that is an
unknown field, every unknown field of the same mapping. --dump-json writes every object, in order,
as one JSON array (the C++ tests cross-check that form); --parse-only skips the schemas (only YAML
errors count, and only PyYAML is needed), which is what those cross-checks need. The YAML is read
with PyYAML's safe loader, except that a mapping with a duplicate key is an error (strict field
validation rejects duplicate fields too) and unquoted dates stay strings (as they do in
Kubernetes' YAML-to-JSON conversion).

The packages and their versions are in requirements.txt beside this file.
"""

import json
import re
import sys

import yaml

# The Kubernetes release whose schema the built-in kinds are checked against: kubectl's.
KUBERNETES_VERSION = "1.32"
PROMETHEUS_OPERATOR_GROUP = "monitoring.coreos.com"


class ManifestLoader(yaml.SafeLoader):
    """PyYAML's safe loader, but a repeated key in one mapping is an error, not "the last wins"."""

    def construct_mapping(self, node, deep=False):
        if isinstance(node, yaml.MappingNode):
            seen = {}
            for key_node, _ in node.value:
                if key_node.tag == "tag:yaml.org,2002:merge":
                    continue  # "<<: *anchor": merged keys may be overridden, as YAML allows
                key = self.construct_object(key_node, deep=True)
                try:
                    first = seen.setdefault(key, key_node)
                except TypeError:
                    continue  # an unhashable key: the base class reports it
                if first is not key_node:
                    raise yaml.constructor.ConstructorError(
                        None, None,
                        "duplicate mapping key %s (first at line %d, column %d)"
                        % (json.dumps(key, default=str), first.start_mark.line + 1,
                           first.start_mark.column + 1),
                        key_node.start_mark)
        return super().construct_mapping(node, deep=deep)


def _scalar_text(loader, node):
    return loader.construct_scalar(node)


# Kubernetes (sigs.k8s.io/yaml) keeps an unquoted date as a string; PyYAML would make a datetime.
ManifestLoader.add_constructor("tag:yaml.org,2002:timestamp", _scalar_text)
# A plain "=" is the YAML 1.1 value key to PyYAML, which cannot construct it; it is a string.
ManifestLoader.add_constructor("tag:yaml.org,2002:value", _scalar_text)


def path_text(path):
    out = ""
    for p in path:
        out += "[%d]" % p if isinstance(p, int) else ("." + p if out else p)
    return out


def _short(message, limit=300):
    return message if len(message) <= limit else message[:limit] + "..."


def unknown_fields(error):
    """The keys of an additionalProperties error's object that its schema does not define."""
    properties = error.schema.get("properties", {})
    patterns = error.schema.get("patternProperties", {})
    return [k for k in error.instance
            if k not in properties and not any(re.search(p, k) for p in patterns)]


def _is_null_branch(errors):
    return all(e.validator == "type" and e.validator_value == "null" for e in errors)


def _deepest(error):
    """An anyOf/oneOf error of an optional field ([X, null]) as X's error: best_match stops there
    when the branches' errors rate equal (9 is not valid under any of the given schemas)."""
    import jsonschema

    while error.validator in ("anyOf", "oneOf") and error.context:
        branches = {}
        for e in error.context:
            branches.setdefault(e.relative_schema_path[0], []).append(e)
        real = [errors for errors in branches.values() if not _is_null_branch(errors)]
        if len(real) != 1:
            break
        error = jsonschema.exceptions.best_match(real[0])
    return error


def describe(error, api_version, kind):
    """A jsonschema ValidationError as problem lines ("path: message")."""
    error = _deepest(error)
    path = list(error.absolute_path)
    if not path:
        if error.validator == "additionalProperties" and {"apiVersion", "kind"} & set(
                unknown_fields(error)):
            # A sub-schema (e.g. Affinity) that happens to share a kind's file name.
            return ["no schema for apiVersion %s kind %s" % (api_version, kind)]
    if path in (["apiVersion"], ["kind"]) and error.validator in ("enum", "const"):
        # Found by a case-insensitive kind or a group's first label only: not this apiVersion/kind.
        return ["no schema for apiVersion %s kind %s" % (api_version, kind)]
    if error.validator == "additionalProperties" and isinstance(error.instance, dict):
        return ['%s: unknown field "%s"' % (path_text(path + [k]), k)
                for k in unknown_fields(error)]
    return ["%s: %s" % (path_text(path) or "(object)", _short(error.message))]


_SUBSCHEMA = ("items", "contains", "not", "if", "then", "else", "additionalProperties",
              "unevaluatedProperties", "unevaluatedItems", "propertyNames")
_SUBSCHEMA_MAP = ("properties", "patternProperties", "$defs", "definitions", "dependentSchemas")
_SUBSCHEMA_LIST = ("anyOf", "oneOf", "allOf", "prefixItems")


def strict_schema(schema):
    """`schema` with additionalProperties false in every object schema that lists properties
    (where it has none, or true). Only schemas are changed, never values such as defaults."""
    if not isinstance(schema, dict):
        return schema
    out = dict(schema)
    for key in _SUBSCHEMA:
        if key in out:
            out[key] = strict_schema(out[key])
    for key in _SUBSCHEMA_MAP:
        if isinstance(out.get(key), dict):
            out[key] = {name: strict_schema(s) for name, s in out[key].items()}
    for key in _SUBSCHEMA_LIST:
        if isinstance(out.get(key), list):
            out[key] = [strict_schema(s) for s in out[key]]
    if isinstance(out.get("properties"), dict) and out.get("additionalProperties", True) is True:
        out["additionalProperties"] = False
    return out


_crd_validators = {}


def crd_validator(api_version, kind):
    """A jsonschema validator for a prometheus-operator kind, or None when there is no such kind."""
    if (api_version, kind) in _crd_validators:
        return _crd_validators[(api_version, kind)]
    import importlib

    import jsonschema
    from cloudcoil.resources import Resource

    validator = None
    version = api_version.split("/", 1)[1]
    try:
        module = importlib.import_module("cloudcoil.models.prometheus_operator." + version)
    except ImportError:
        module = None
    model = getattr(module, kind, None) if re.fullmatch(r"v[0-9a-z]+", version) else None
    if isinstance(model, type) and issubclass(model, Resource):
        gvk = model.gvk()
        if gvk.api_version == api_version and gvk.kind == kind:
            schema = strict_schema(model.model_json_schema(by_alias=True))
            cls = jsonschema.validators.Draft202012Validator
            cls.check_schema(schema)
            validator = cls(schema)
    _crd_validators[(api_version, kind)] = validator
    return validator


def validate_object(obj):
    """Problems of one object ("path: message"), none when it is valid."""
    if not isinstance(obj, dict):
        return ["the document is not a mapping"]
    api_version, kind = obj.get("apiVersion"), obj.get("kind")
    no_schema = ["no schema for apiVersion %s kind %s" % (api_version, kind)]
    if not isinstance(api_version, str) or not isinstance(kind, str) or not api_version or not kind:
        return no_schema
    if api_version.startswith(PROMETHEUS_OPERATOR_GROUP + "/"):
        import jsonschema

        validator = crd_validator(api_version, kind)
        if validator is None:
            return no_schema
        error = jsonschema.exceptions.best_match(validator.iter_errors(obj))
        return [] if error is None else describe(error, api_version, kind)

    import kubernetes_validate

    try:
        kubernetes_validate.validate(obj, KUBERNETES_VERSION, strict=True)
    except kubernetes_validate.SchemaNotFoundError:
        return no_schema
    except kubernetes_validate.ValidationError as error:
        return describe(error, api_version, kind)
    return []


def yaml_error_text(error):
    """A PyYAML error on one line: "line L, column C: problem (context)"."""
    if not isinstance(error, yaml.MarkedYAMLError) or error.problem_mark is None:
        return " ".join(str(error).split())
    mark = error.problem_mark
    text = "line %d, column %d: %s" % (mark.line + 1, mark.column + 1, error.problem)
    if error.context:
        text += " (%s" % error.context
        if error.context_mark is not None:
            text += " at line %d, column %d" % (error.context_mark.line + 1,
                                                error.context_mark.column + 1)
        text += ")"
    return " ".join(text.split())


def main(argv):
    dump = None
    parse_only = False
    files = []
    i = 0
    while i < len(argv):
        if argv[i] == "--dump-json" and i + 1 < len(argv):
            dump = argv[i + 1]
            i += 1
        elif argv[i] == "--parse-only":
            parse_only = True
        elif argv[i].startswith("--"):
            files = []
            break
        else:
            files.append(argv[i])
        i += 1
    if not files:
        print("usage: python validate_manifests.py [--dump-json OUT.json] [--parse-only] "
              "FILE.yaml...", file=sys.stderr)
        return 2

    objects = []
    names = []
    failures = 0
    for file in files:
        try:
            with open(file, encoding="utf-8") as f:
                text = f.read()
        except OSError as e:
            print("%s: cannot read: %s" % (file, e))
            failures += 1
            continue
        try:
            for obj in yaml.load_all(text, Loader=ManifestLoader):
                if obj is None:
                    continue  # an empty document
                objects.append(obj)
                meta = obj.get("metadata") if isinstance(obj, dict) else None
                name = "%s/%s" % (obj.get("kind") if isinstance(obj, dict) else None,
                                  meta.get("name") if isinstance(meta, dict) else None)
                names.append(name)
                for problem in [] if parse_only else validate_object(obj):
                    print("%s: %s: %s" % (file, name, problem))
                    failures += 1
        except yaml.YAMLError as e:
            # PyYAML stops at the first error: the documents before it are kept.
            print("%s: YAML: %s" % (file, yaml_error_text(e)))
            failures += 1
    if dump:
        with open(dump, "w", encoding="utf-8") as f:
            json.dump(objects, f, indent=1, default=str)
    if failures:
        return 1
    if not objects:
        print("no objects found")
        return 1
    print("%s %d objects: %s" % ("parsed" if parse_only else "validated", len(objects),
                                 " ".join(names)))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
