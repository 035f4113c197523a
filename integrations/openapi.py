"""OpenAPI 3.0 and 3.1 documents imported as integrations: each operation becomes an action that the
openapi.operation executor (integrations.executors.openapi) sends to the integration's base URL.

What an import takes from a document:
- The integration: its id (the caller's, else `x-atrium-integration.id`, else info.title made an
  identifier ending in `_tools`), name, category and agent instructions (`x-atrium-integration`,
  else info), description (info.description), base URL (`servers[0].url` with its variables'
  defaults, a relative one resolved against the document's URL; or the caller's server URL) and auth
  scheme (the first security requirement's scheme: apiKey, http bearer or basic, oauth2 with an
  authorizationCode flow; none when there is no requirement).
- One action per GET, POST, PUT, PATCH, DELETE and HEAD operation, named by its operationId (made
  [A-Za-z0-9_]) or by method and path. Its input is an object with one property per path, query and
  header parameter (path parameters always required) and `body` for a JSON request body; its output
  is the 200 (else 201) JSON response's schema.
- Local `$ref`s (`#/...`) are resolved into the schemas, within bounds on nesting and size; a
  recursive schema is refused, as is a reference to another document.
- OpenAPI 3.0 schemas become JSON Schema: `nullable` adds null, boolean exclusiveMinimum/Maximum
  become numbers, `example` becomes `examples`, and OpenAPI's own keywords (discriminator, xml,
  externalDocs, x-*) are dropped.
Left out: OPTIONS and TRACE operations and those whose required body is not JSON (the report lists
them as skipped), cookie parameters, and servers given per path or operation. A path parameter
may declare `allowReserved: true` (OpenAPI defines it for query parameters only) to keep `/` in
its value unescaped, as a file path in a repository needs.

Anything wrong is an InvalidInput naming where in the document it is, and the import writes
nothing: the whole document is read and checked before the first row changes.
"""

from __future__ import annotations

import copy
import json
import re
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import unquote, urljoin

import httpx
from django.db import transaction

import safeyaml
from core.errors import InvalidInput
from integrations.executors.openapi import OPERATION_EXECUTOR, PATH_TEMPLATE
from integrations.models import IDENTIFIER, Action, AuthScheme, Integration

MAX_DOCUMENT_BYTES = 8 * 1024 * 1024
MAX_OPERATIONS = 500
MAX_SCHEMA_DEPTH = 40
MAX_SCHEMA_NODES = 10_000  # in one action's input or output schema, once resolved
MAX_IMPORT_NODES = 500_000  # in all of them together
YAML_BOUNDS = safeyaml.Bounds(depth=100, values=1_000_000, aliases=1_000, anchors=True, tags=False)

METHODS = ("get", "put", "post", "delete", "options", "head", "patch", "trace")
SUPPORTED_METHODS = frozenset({"get", "put", "post", "delete", "head", "patch"})
# OpenAPI: header parameters with these names "SHALL be ignored" (the request sets them itself).
IGNORED_HEADERS = frozenset({"accept", "content-type", "authorization"})
EXTENSION_KEYS = frozenset({"id", "name", "category", "agentFriendlyInstructions", "description"})

SCHEMA_MAPS = frozenset({"properties", "patternProperties", "$defs", "definitions", "dependentSchemas"})
SCHEMA_LISTS = frozenset({"allOf", "anyOf", "oneOf", "prefixItems"})
SCHEMA_VALUES = frozenset({"items", "not", "additionalProperties", "contains", "if", "then", "else",
                           "propertyNames", "unevaluatedItems", "unevaluatedProperties", "additionalItems",
                           "contentSchema"})
OPENAPI_ONLY = frozenset({"discriminator", "xml", "externalDocs", "example", "nullable"})
ANNOTATIONS = frozenset({"description", "title", "default", "examples", "deprecated", "readOnly", "writeOnly"})

_PLAIN_KEY = re.compile(r"^[A-Za-z_$][A-Za-z0-9_$-]*$")


@dataclass
class ImportReport:
    integration: Integration = field(repr=False)
    integration_id: str
    integration_created: bool
    name: str
    base_url: str
    auth_scheme: str
    created: list[str] = field(default_factory=list)
    updated: list[str] = field(default_factory=list)
    unchanged: list[str] = field(default_factory=list)
    removed: list[str] = field(default_factory=list)
    skipped: list[str] = field(default_factory=list)  # "METHOD /path: why"

    def summary(self) -> str:
        counts = {"created": self.created, "updated": self.updated, "removed": self.removed,
                  "skipped": self.skipped}
        return ", ".join(f"{len(names)} action(s) {what}" for what, names in counts.items() if names) or "no change"


@dataclass(frozen=True)
class _Action:
    name: str
    description: str
    input_schema: dict[str, Any]
    output_schema: Any
    config: dict[str, Any]


@dataclass
class _Parsed:
    id: str
    name: str
    description: str
    category: str
    agent_instructions: str
    base_url: str
    auth_scheme: str
    auth_config: dict[str, Any]
    text: str
    actions: list[_Action] = field(default_factory=list)
    skipped: list[str] = field(default_factory=list)


Where = tuple[str | int, ...]


def _where(parts: Where) -> str:
    out = ""
    for part in parts:
        if isinstance(part, int):
            out += f"[{part}]"
        elif _PLAIN_KEY.match(part):
            out += f".{part}" if out else part
        else:
            out += f"[{part!r}]"
    return out or "the document"


@dataclass
class _Walk:
    """One schema's resolution: the references open above the current node, and the nodes built."""

    origin: Where
    stack: list[str] = field(default_factory=list)
    nodes: int = 0


class _Document:
    def __init__(self, root: dict[str, Any], *, source: str, version: str) -> None:
        self.root = root
        self.source = source
        self.version = version
        self.nodes = 0

    def fail(self, where: Where, problem: str) -> InvalidInput:
        return InvalidInput(f"{self.source}: {_where(where)}: {problem}", code="invalid_openapi")

    def mapping(self, value: Any, where: Where, *, what: str = "an object") -> dict[str, Any]:
        if not isinstance(value, dict):
            raise self.fail(where, f"must be {what}")
        return value

    def text(self, value: Any, where: Where, *, limit: int | None = None) -> str:
        if not isinstance(value, str):
            raise self.fail(where, "must be a string")
        if limit is not None and len(value) > limit:
            raise self.fail(where, f"is longer than {limit} characters")
        return value

    def pointer(self, ref: Any, where: Where) -> tuple[Any, Where]:
        """The node a local `$ref` names, and where it is."""
        if not isinstance(ref, str):
            raise self.fail((*where, "$ref"), "must be a string")
        if not ref.startswith("#"):
            raise self.fail((*where, "$ref"), f"{ref} refers to another document: only local references "
                                               "(#/components/...) are supported")
        if ref != "#" and not ref.startswith("#/"):
            raise self.fail((*where, "$ref"), f"{ref} is not a JSON pointer (#/components/...)")
        node: Any = self.root
        parts: list[str | int] = []
        for raw in ref.split("/")[1:]:
            key = unquote(raw).replace("~1", "/").replace("~0", "~")
            if isinstance(node, dict) and key in node:
                node = node[key]
                parts.append(key)
            elif isinstance(node, list) and key.isdigit() and int(key) < len(node):
                node = node[int(key)]
                parts.append(int(key))
            else:
                raise self.fail((*where, "$ref"), f"{ref} points at nothing in the document")
        return node, tuple(parts)

    def deref(self, node: Any, where: Where) -> tuple[Any, Where]:
        """A parameter, request body, response or path item, following `$ref`s to it."""
        seen: list[str] = []
        while isinstance(node, dict) and "$ref" in node:
            ref = node["$ref"]
            if ref in seen:
                raise self.fail(where, f"$ref {ref} refers back to itself ({' -> '.join([*seen, ref])})")
            seen.append(ref)
            node, where = self.pointer(ref, where)
        return node, where

    # Schemas

    def schema(self, node: Any, where: Where) -> Any:
        walk = _Walk(origin=where)
        return self._schema(node, where, walk, 0)

    def _count(self, walk: _Walk) -> None:
        walk.nodes += 1
        self.nodes += 1
        if walk.nodes > MAX_SCHEMA_NODES:
            raise self.fail(walk.origin, f"the schema resolves to more than {MAX_SCHEMA_NODES:,} schema objects; "
                                         "simplify it")
        if self.nodes > MAX_IMPORT_NODES:
            raise self.fail(walk.origin, f"the document's schemas resolve to more than {MAX_IMPORT_NODES:,} schema "
                                         "objects in all; import a smaller document")

    def _schema(self, node: Any, where: Where, walk: _Walk, depth: int) -> Any:
        if isinstance(node, bool):
            return node
        node = self.mapping(node, where, what="a schema (an object)")
        self._count(walk)
        if depth > MAX_SCHEMA_DEPTH:
            raise self.fail(where, f"the schema is nested more than {MAX_SCHEMA_DEPTH} levels deep")
        if "$ref" in node:
            return self._reference(node, where, walk, depth)
        out: dict[str, Any] = {}
        for raw_key, value in node.items():
            key = str(raw_key)
            here = (*where, key)
            if key.startswith("x-") or key in OPENAPI_ONLY:
                continue
            if key in SCHEMA_MAPS:
                out[key] = {str(name): self._schema(sub, (*here, str(name)), walk, depth + 1)
                            for name, sub in self.mapping(value, here).items()}
            elif key in SCHEMA_LISTS:
                if not isinstance(value, list):
                    raise self.fail(here, "must be a list of schemas")
                out[key] = [self._schema(sub, (*here, i), walk, depth + 1) for i, sub in enumerate(value)]
            elif key in SCHEMA_VALUES:
                out[key] = self._schema(value, here, walk, depth + 1)
            else:
                out[key] = copy.deepcopy(value)
        if "example" in node and "examples" not in out:
            out["examples"] = [copy.deepcopy(node["example"])]
        if self.version == "3.0":
            for bound, limit in (("exclusiveMinimum", "minimum"), ("exclusiveMaximum", "maximum")):
                if out.get(bound) is True and limit in out:
                    out[bound] = out.pop(limit)
                elif isinstance(out.get(bound), bool):
                    del out[bound]
            if node.get("nullable") is True:
                return _nullable(out)
        return out

    def _reference(self, node: dict[str, Any], where: Where, walk: _Walk, depth: int) -> Any:
        ref = node["$ref"]
        target, target_where = self.pointer(ref, where)
        if ref in walk.stack:
            chain = " -> ".join([*walk.stack[walk.stack.index(ref):], ref])
            raise self.fail(walk.origin, f"the schema is recursive ({chain}): recursive schemas are not supported")
        walk.stack.append(ref)
        resolved = self._schema(target, target_where, walk, depth)
        walk.stack.pop()
        siblings = {key: value for key, value in node.items() if key != "$ref"}
        if not siblings:
            return resolved
        beside = self._schema(siblings, where, walk, depth)
        # A description or default beside the reference describes this use of it; anything else
        # constrains it further, which is what allOf says.
        if isinstance(resolved, dict) and set(beside) <= ANNOTATIONS:
            merged = {**resolved, **beside}
        else:
            merged = {"allOf": [resolved, beside]}
        # 3.0 documents write a nullable reference as `$ref` with `nullable: true` beside it.
        return _nullable(merged) if self.version == "3.0" and node.get("nullable") is True else merged


def _nullable(schema: dict[str, Any]) -> dict[str, Any]:
    kind = schema.get("type")
    if kind is None:
        return {"anyOf": [schema, {"type": "null"}]} if schema else schema
    if isinstance(kind, str):
        schema["type"] = [kind, "null"]
    elif isinstance(kind, list) and "null" not in kind:
        schema["type"] = [*kind, "null"]
    if isinstance(schema.get("enum"), list) and None not in schema["enum"]:
        schema["enum"] = [*schema["enum"], None]
    return schema


def _is_json(media_type: str) -> bool:
    media = media_type.split(";")[0].strip().lower()
    return media == "application/json" or (media.startswith("application/") and media.endswith("+json"))


def _action_name(text: str) -> str:
    name = re.sub(r"_+", "_", re.sub(r"[^A-Za-z0-9_]", "_", text)).strip("_")
    if name and not name[0].isalpha():
        name = "op_" + name
    return name[:100]


def _integration_id(title: str) -> str:
    slug = re.sub(r"[^a-z0-9]+", "_", title.lower()).strip("_")
    if not slug or not slug[0].isalpha():
        slug = "api_" + slug
    slug = slug.removesuffix("_tools")[:57].rstrip("_")
    return f"{slug}_tools"


def _load(document: str | bytes, source: str) -> tuple[str, dict[str, Any]]:
    size = len(document) if isinstance(document, bytes) else len(document.encode("utf-8", "surrogatepass"))
    if size > MAX_DOCUMENT_BYTES:
        raise InvalidInput(f"{source}: the document is larger than {MAX_DOCUMENT_BYTES:,} bytes.", code="too_large")
    if isinstance(document, bytes):
        try:
            text = document.decode("utf-8-sig")
        except UnicodeDecodeError as exc:
            raise InvalidInput(f"{source}: the document is not UTF-8 text (byte {exc.start}).",
                               code="invalid_openapi") from exc
    else:
        text = document.removeprefix("\ufeff")
    try:
        root = safeyaml.load(text, schema=safeyaml.CORE, bounds=YAML_BOUNDS)
    except safeyaml.InvalidYAML as exc:
        code = "unsafe_yaml" if exc.unsafe else "invalid_openapi"
        raise InvalidInput(f"{source}: not a YAML or JSON document: {exc.message}.", code=code) from exc
    if not isinstance(root, dict):
        raise InvalidInput(f"{source}: an OpenAPI document is an object (with openapi, info and paths).",
                           code="invalid_openapi")
    return text, root


def _version(root: dict[str, Any], source: str) -> str:
    if "swagger" in root:
        raise InvalidInput(f"{source}: swagger: Swagger 2.0 documents are not supported; convert the document to "
                           "OpenAPI 3 first.", code="invalid_openapi")
    declared = root.get("openapi")
    # `openapi: 3.1` unquoted is a number in YAML.
    text = str(declared) if isinstance(declared, str | float) else ""
    for version in ("3.0", "3.1"):
        if text == version or text.startswith(version + "."):
            return version
    raise InvalidInput(f"{source}: openapi: must be an OpenAPI 3.0 or 3.1 version such as \"3.1.0\" "
                       f"(found {declared!r}).", code="invalid_openapi")


def _absolute_url(doc: _Document, text: str, where: Where, *, limit: int = 500) -> str:
    try:
        url = httpx.URL(text)
    except (httpx.InvalidURL, ValueError) as exc:
        raise doc.fail(where, f"{text!r} is not a URL") from exc
    if url.scheme not in ("http", "https") or not url.host:
        raise doc.fail(where, f"{text!r} is not an absolute http:// or https:// URL")
    if url.query or url.fragment or url.userinfo:
        raise doc.fail(where, f"{text!r} may not have a query, fragment, user name or password")
    if len(text) > limit:
        raise doc.fail(where, f"is longer than {limit} characters")
    return text


def _base_url(doc: _Document, server_url: str | None) -> str:
    if server_url:
        return _absolute_url(doc, server_url.strip(), ("server_url",)).rstrip("/")
    servers = doc.root.get("servers")
    if not servers:
        raise doc.fail(("servers",), "the document names no server: give the API's URL as the server URL "
                                     "(--server-url)")
    if not isinstance(servers, list):
        raise doc.fail(("servers",), "must be a list")
    server = doc.mapping(servers[0], ("servers", 0))
    url = doc.text(server.get("url"), ("servers", 0, "url"))
    variables = doc.mapping(server.get("variables") or {}, ("servers", 0, "variables"))

    def fill(match: re.Match[str]) -> str:
        name = match[1]
        variable = variables.get(name)
        if not isinstance(variable, dict) or "default" not in variable:
            raise doc.fail(("servers", 0, "variables"), f"{{{name}}} in the server URL has no default")
        return str(variable["default"])

    url = PATH_TEMPLATE.sub(fill, url)
    if "://" not in url and re.match(r"^https?://", doc.source):
        url = urljoin(doc.source, url)
    if "://" not in url:
        raise doc.fail(("servers", 0, "url"), f"{url!r} is relative: give the API's URL as the server URL "
                                              "(--server-url)")
    return _absolute_url(doc, url, ("servers", 0, "url")).rstrip("/")


def _auth(doc: _Document, requirements: Any, where: Where) -> tuple[str, dict[str, Any]]:
    """The integration's auth scheme and its configuration, from a list of security requirements."""
    if requirements is None:
        return AuthScheme.NONE, {}
    if not isinstance(requirements, list):
        raise doc.fail(where, "must be a list of security requirements")
    if not requirements or not requirements[0]:
        return AuthScheme.NONE, {}  # an empty requirement: calls need no credentials
    requirement = doc.mapping(requirements[0], (*where, 0))
    name = str(next(iter(requirement)))
    requested = requirement[name] or []
    if not isinstance(requested, list) or not all(isinstance(scope, str) for scope in requested):
        raise doc.fail((*where, 0, name), "must be a list of scope names")
    schemes = doc.mapping(doc.root.get("components", {}), ("components",)).get("securitySchemes") or {}
    if name not in schemes:
        raise doc.fail((*where, 0), f"names the security scheme {name!r}, which components.securitySchemes does "
                                    "not define")
    scheme, here = doc.deref(schemes[name], ("components", "securitySchemes", name))
    scheme = doc.mapping(scheme, here)
    kind = scheme.get("type")
    if kind == "apiKey":
        location = scheme.get("in")
        if location not in ("header", "query", "cookie"):
            raise doc.fail((*here, "in"), "must be header, query or cookie")
        return AuthScheme.API_KEY, {"in": location, "name": doc.text(scheme.get("name"), (*here, "name"), limit=200)}
    if kind == "http":
        http_scheme = str(scheme.get("scheme", "")).lower()
        if http_scheme == "bearer":
            return AuthScheme.BEARER, {}
        if http_scheme == "basic":
            return AuthScheme.BASIC, {}
        raise doc.fail((*here, "scheme"), f"HTTP auth scheme {scheme.get('scheme')!r} is not supported (bearer and "
                                          "basic are)")
    if kind == "oauth2":
        flows = doc.mapping(scheme.get("flows"), (*here, "flows"))
        if "authorizationCode" not in flows:
            raise doc.fail((*here, "flows"), "only the authorizationCode OAuth 2 flow is supported, and this scheme "
                                             "has none")
        flow_where = (*here, "flows", "authorizationCode")
        flow = doc.mapping(flows["authorizationCode"], flow_where)
        declared = doc.mapping(flow.get("scopes") or {}, (*flow_where, "scopes"))
        config = {
            "authorizationUrl": _absolute_url(doc, doc.text(flow.get("authorizationUrl"),
                                                            (*flow_where, "authorizationUrl")),
                                              (*flow_where, "authorizationUrl"), limit=2000),
            "tokenUrl": _absolute_url(doc, doc.text(flow.get("tokenUrl"), (*flow_where, "tokenUrl")),
                                      (*flow_where, "tokenUrl"), limit=2000),
            # The requirement's own scopes are what the API needs; without any, every scope the flow offers.
            "scopes": list(requested) or [str(scope) for scope in declared],
        }
        if flow.get("refreshUrl"):
            config["refreshUrl"] = _absolute_url(doc, doc.text(flow["refreshUrl"], (*flow_where, "refreshUrl")),
                                                 (*flow_where, "refreshUrl"), limit=2000)
        return AuthScheme.OAUTH2, config
    raise doc.fail((*here, "type"), f"security scheme type {kind!r} is not supported (apiKey, http bearer or basic, "
                                    "and oauth2 with an authorizationCode flow are)")


def _parameter_schema(doc: _Document, parameter: dict[str, Any], where: Where) -> Any:
    if "schema" in parameter:
        schema = doc.schema(parameter["schema"], (*where, "schema"))
    elif "content" in parameter:
        content = doc.mapping(parameter["content"], (*where, "content"))
        media, media_schema = next(iter(content.items()), ("", {}))
        schema = doc.schema(doc.mapping(media_schema, (*where, "content", media)).get("schema", {}),
                            (*where, "content", media, "schema"))
    else:
        schema = {}
    if isinstance(schema, dict):
        if parameter.get("description") and "description" not in schema:
            schema["description"] = doc.text(parameter["description"], (*where, "description"))
        if parameter.get("deprecated") is True:
            schema["deprecated"] = True
        if "example" in parameter and "examples" not in schema:
            schema["examples"] = [copy.deepcopy(parameter["example"])]
    return schema


def _json_schema(doc: _Document, content: Any, where: Where) -> tuple[bool, Any, list[str]]:
    """Whether `content` (a media type map) has a JSON entry, its resolved schema, and the media types there are."""
    content = doc.mapping(content or {}, where)
    for media, entry in content.items():
        if _is_json(str(media)):
            entry = doc.mapping(entry or {}, (*where, str(media)))
            return True, doc.schema(entry.get("schema", {}), (*where, str(media), "schema")), list(map(str, content))
    return False, None, list(map(str, content))


def _operation(doc: _Document, path: str, method: str, operation: dict[str, Any], shared: list[Any],
               where: Where, parsed: _Parsed) -> _Action | None:
    label = f"{method.upper()} {path}"
    parameters: dict[tuple[str, str], tuple[dict[str, Any], Where]] = {}
    for source_where, listed in (((*where[:-1], "parameters"), shared),
                                 ((*where, "parameters"), operation.get("parameters") or [])):
        if not isinstance(listed, list):
            raise doc.fail(source_where, "must be a list of parameters")
        for index, item in enumerate(listed):
            parameter, here = doc.deref(item, (*source_where, index))
            parameter = doc.mapping(parameter, here)
            name = doc.text(parameter.get("name"), (*here, "name"), limit=200)
            location = parameter.get("in")
            if location not in ("path", "query", "header", "cookie"):
                raise doc.fail((*here, "in"), "must be path, query, header or cookie")
            parameters[(name, location)] = (parameter, here)
    template_names = PATH_TEMPLATE.findall(path)
    declared_path = {name for name, location in parameters if location == "path"}
    for name in template_names:
        if name not in declared_path:
            raise doc.fail(where, f"the path has {{{name}}} but no path parameter {name} is declared")
    properties: dict[str, Any] = {}
    required: list[str] = []
    config_parameters: list[dict[str, Any]] = []
    homes: dict[str, str] = {}
    for (name, location), (parameter, here) in parameters.items():
        if location == "cookie" or (location == "header" and name.lower() in IGNORED_HEADERS):
            continue
        if location == "path" and name not in template_names:
            continue
        if name in homes:
            raise doc.fail(here, f"{location} parameter {name} has the name of a {homes[name]} parameter: an "
                                 "action's input has one property per name")
        homes[name] = location
        properties[name] = _parameter_schema(doc, parameter, here)
        if location == "path" or parameter.get("required") is True:
            required.append(name)
        entry: dict[str, Any] = {"name": name, "in": location}
        if location == "path" and parameter.get("allowReserved") is True:
            entry["allowReserved"] = True
        config_parameters.append(entry)
    has_body = False
    if "requestBody" in operation:
        body, here = doc.deref(operation["requestBody"], (*where, "requestBody"))
        body = doc.mapping(body, here)
        found, schema, media_types = _json_schema(doc, body.get("content"), (*here, "content"))
        if found:
            if "body" in homes:
                raise doc.fail(here, f"the {homes['body']} parameter body has the name the request body takes in "
                                     "an action's input")
            if isinstance(schema, dict) and body.get("description") and "description" not in schema:
                schema["description"] = doc.text(body["description"], (*here, "description"))
            properties["body"] = schema
            if body.get("required") is True:
                required.append("body")
            has_body = True
        elif body.get("required") is True:
            parsed.skipped.append(f"{label}: its request body is {', '.join(media_types) or 'of no type'}, not JSON")
            return None
    output: Any = {}
    responses = doc.mapping(operation.get("responses") or {}, (*where, "responses"))
    by_status = {str(status): response for status, response in responses.items()}
    for status in ("200", "201"):
        if status in by_status:
            response, here = doc.deref(by_status[status], (*where, "responses", status))
            response = doc.mapping(response, here)
            found, schema, _ = _json_schema(doc, response.get("content"), (*here, "content"))
            output = schema if found else {}
            break
    summary = doc.text(operation.get("summary") or "", (*where, "summary")).strip()
    details = doc.text(operation.get("description") or "", (*where, "description")).strip()
    description = "\n\n".join(part for part in (summary, details) if part) or label
    if operation.get("deprecated") is True:
        description = "Deprecated. " + description
    operation_id = operation.get("operationId")
    name = _action_name(doc.text(operation_id, (*where, "operationId"), limit=300)) if operation_id else ""
    name = name or _action_name(f"{method}_{path}") or method
    input_schema = {"type": "object", "properties": properties, "additionalProperties": False}
    if required:
        input_schema["required"] = required
    for schema_where, value in (((*where, "parameters"), input_schema), ((*where, "responses"), output)):
        try:
            json.dumps(value, allow_nan=False)
        except ValueError as exc:
            raise doc.fail(schema_where, "numbers in schemas must be finite (no .nan or .inf)") from exc
    return _Action(name=name, description=description, input_schema=input_schema, output_schema=output,
                   config={"method": method.upper(), "path": path, "parameters": config_parameters,
                           "hasBody": has_body})


def _operations(doc: _Document, parsed: _Parsed) -> Any:
    """Every operation's action into `parsed`; the first security requirement an operation declares."""
    paths = doc.mapping(doc.root.get("paths") or {}, ("paths",))
    names: dict[str, str] = {}
    first_security: tuple[Any, Where] | None = None
    for raw_path, raw_item in paths.items():
        path = str(raw_path)
        where: Where = ("paths", path)
        if not path.startswith("/") or "?" in path or "#" in path:
            raise doc.fail(where, "a path starts with / and has no query or fragment")
        item, item_where = doc.deref(raw_item, where)
        item = doc.mapping(item, item_where)
        for method in METHODS:
            if method not in item:
                continue
            label = f"{method.upper()} {path}"
            operation = doc.mapping(item[method], (*where, method))
            if method not in SUPPORTED_METHODS:
                parsed.skipped.append(f"{label}: {method.upper()} operations are not imported")
                continue
            if first_security is None and "security" in operation:
                first_security = (operation["security"], (*where, method, "security"))
            action = _operation(doc, path, method, operation, item.get("parameters") or [], (*where, method), parsed)
            if action is None:
                continue
            if action.name in names:
                raise doc.fail((*where, method), f"its action name {action.name} is also {names[action.name]}'s: "
                                                 "give one of them another operationId")
            names[action.name] = label
            parsed.actions.append(action)
            if len(parsed.actions) > MAX_OPERATIONS:
                raise doc.fail(("paths",), f"more than {MAX_OPERATIONS} operations: import a smaller document")
    if not parsed.actions:
        raise doc.fail(("paths",), "the document has no operation that can be imported")
    return first_security


def _extension(doc: _Document) -> dict[str, str]:
    extension = doc.mapping(doc.root.get("x-atrium-integration") or {}, ("x-atrium-integration",))
    unknown = sorted(set(map(str, extension)) - EXTENSION_KEYS)
    if unknown:
        raise doc.fail(("x-atrium-integration", unknown[0]), f"is not a setting Atrium knows (it knows "
                                                            f"{', '.join(sorted(EXTENSION_KEYS))})")
    return {key: doc.text(value, ("x-atrium-integration", key)) for key, value in extension.items()}


def _parse(*, document: str | bytes, source: str, integration_id: str | None, server_url: str | None) -> _Parsed:
    """Everything an import would write, read and checked; writes nothing."""
    text, root = _load(document, source)
    doc = _Document(root, source=source, version=_version(root, source))
    info = doc.mapping(root.get("info"), ("info",))
    title = doc.text(info.get("title"), ("info", "title"))
    extension = _extension(doc)
    if integration_id:
        chosen, where = integration_id, ("integration_id",)
    elif "id" in extension:
        chosen, where = extension["id"], ("x-atrium-integration", "id")
    else:
        chosen, where = _integration_id(title), ("info", "title")
    if not re.match(IDENTIFIER.regex, chosen):
        raise doc.fail(where, f"{chosen!r} is not an integration id: {IDENTIFIER.message}")
    name = extension.get("name") or title
    if len(name) > 200:
        raise doc.fail(("x-atrium-integration", "name") if "name" in extension else ("info", "title"),
                       "is longer than 200 characters")
    category = extension.get("category", "")
    if len(category) > 60:
        raise doc.fail(("x-atrium-integration", "category"), "is longer than 60 characters")
    description = extension.get("description") or doc.text(info.get("description") or "", ("info", "description"))
    parsed = _Parsed(id=chosen, name=name, description=description.strip(), category=category,
                     agent_instructions=extension.get("agentFriendlyInstructions", "").strip(),
                     base_url=_base_url(doc, server_url), auth_scheme=AuthScheme.NONE, auth_config={}, text=text)
    first_security = _operations(doc, parsed)
    if "security" in root:
        parsed.auth_scheme, parsed.auth_config = _auth(doc, root["security"], ("security",))
    elif first_security is not None:
        parsed.auth_scheme, parsed.auth_config = _auth(doc, *first_security)
    return parsed


@transaction.atomic
def integration_import(*, document: str | bytes, source: str, integration_id: str | None = None,
                       server_url: str | None = None) -> ImportReport:
    """Create or update the integration an OpenAPI document describes, with one action per operation,
    removing actions whose operation is gone from it. `source` (a file name or URL) names the document
    in messages and resolves a relative server URL."""
    parsed = _parse(document=document, source=source, integration_id=integration_id, server_url=server_url)
    integration = Integration.objects.select_for_update().filter(pk=parsed.id).first()
    if integration is not None and integration.kind != Integration.Kind.OPENAPI:
        raise InvalidInput(f"{parsed.id} is a built-in integration: import the document under another id.",
                           code="integration_exists")
    created = integration is None
    auth_config = dict(parsed.auth_config)
    # The OAuth client is registered by a curator in admin, not described by the document.
    if (integration is not None and integration.auth_scheme == parsed.auth_scheme == AuthScheme.OAUTH2
            and "clientId" in integration.auth_config):
        auth_config["clientId"] = integration.auth_config["clientId"]
    if integration is None:
        integration = Integration(id=parsed.id, kind=Integration.Kind.OPENAPI)
    integration.name = parsed.name
    integration.description = parsed.description
    integration.category = parsed.category
    integration.agent_instructions = parsed.agent_instructions
    integration.auth_scheme = parsed.auth_scheme
    integration.auth_config = auth_config
    integration.connection_required = parsed.auth_scheme != AuthScheme.NONE
    # A curator may point an imported integration at another server (an enterprise install, a
    # proxy); importing the document again keeps that unless the import names a server itself.
    if created or server_url or not integration.base_url:
        integration.base_url = parsed.base_url
    integration.source_document = parsed.text
    integration.save(force_insert=created)
    report = ImportReport(integration=integration, integration_id=parsed.id, integration_created=created,
                          name=parsed.name, base_url=integration.base_url, auth_scheme=parsed.auth_scheme,
                          skipped=parsed.skipped)
    existing = {action.name: action for action in integration.actions.select_for_update()}
    for spec in parsed.actions:
        fields = {"description": spec.description, "input_schema": spec.input_schema,
                  "output_schema": spec.output_schema, "executor": OPERATION_EXECUTOR, "config": spec.config}
        action = existing.pop(spec.name, None)
        if action is None:
            Action.objects.create(integration=integration, name=spec.name, **fields)
            report.created.append(spec.name)
        elif any(getattr(action, key) != value for key, value in fields.items()):
            for key, value in fields.items():
                setattr(action, key, value)
            action.save()
            report.updated.append(spec.name)
        else:
            report.unchanged.append(spec.name)
    if existing:
        Action.objects.filter(pk__in=[action.pk for action in existing.values()]).delete()
        report.removed = sorted(existing)
    return report
