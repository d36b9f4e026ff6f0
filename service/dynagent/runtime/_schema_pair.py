"""An agent's own output schema together with the one a caller asks for.

OpenAI clients ask for structured output with ``response_format`` (``parse()``,
LangChain's ``with_structured_output``, pydantic-ai's ``NativeOutput``, the Agents
SDK's ``output_type``). On an agent with its own schema the answer must satisfy both:
``json_object`` is satisfied by the agent's JSON object; a caller's ``json_schema`` is a
second constraint, validated (and retried) with the agent's as ``allOf``. Only a schema
that cannot hold together with the agent's is refused, saying where and why.

A model's structured answer is read as JSON, taken out of a Markdown code fence first.
"""

from __future__ import annotations

from typing import Any

_OBJECT = {"type": "object"}


def joined(own: dict[str, Any] | None, asked: dict[str, Any] | None) -> dict[str, Any] | None:
    """The schema an answer must satisfy: the agent's, the caller's, or both."""
    if asked is None or asked == own:
        return own
    if own is None:
        return asked
    if asked == _OBJECT and "object" in (_types(own) or {"object"}):
        return own
    return {"allOf": [_rebased(own, "#/allOf/0"), _rebased(asked, "#/allOf/1")]}


def _rebased(schema: Any, base: str) -> Any:
    """``schema`` with its local references (``#/$defs/X``) pointing into ``base``."""
    if isinstance(schema, dict):
        out = {k: _rebased(v, base) for k, v in schema.items() if k != "$ref"}
        ref = schema.get("$ref")
        if isinstance(ref, str) and ref.startswith("#"):
            out["$ref"] = base + ref[1:]
        elif "$ref" in schema:
            out["$ref"] = ref
        return out
    if isinstance(schema, list):
        return [_rebased(item, base) for item in schema]
    return schema


def clash(own: Any, asked: Any, where: str = "") -> str | None:
    """Why no answer can satisfy both schemas, where that shows in their structure."""
    if not (isinstance(own, dict) and isinstance(asked, dict)):
        return None
    at = where or "/"
    mine, theirs = _types(own), _types(asked)
    if mine is not None and theirs is not None and not _overlap(mine, theirs):
        return f"at {at} the agent answers {_listed(mine)}; the request asks for {_listed(theirs)}"
    values, wanted = _values(own), _values(asked)
    if values is not None and wanted is not None and not any(v in wanted for v in values):
        return f"at {at} the agent answers one of {values}; the request asks for one of {wanted}"
    if "object" in (mine or {"object"}) and "object" in (theirs or {"object"}):
        return _object_clash(own, asked, where)
    return None


def _object_clash(own: dict[str, Any], asked: dict[str, Any], where: str) -> str | None:
    mine, theirs = own.get("properties") or {}, asked.get("properties") or {}
    needed, wanted = set(own.get("required") or ()), set(asked.get("required") or ())
    for name in sorted(wanted - set(mine)):
        if own.get("additionalProperties") is False:
            return (
                f"the request requires {where}/{name}, which the agent's schema does not "
                "allow (additionalProperties: false)"
            )
    for name in sorted(needed - set(theirs)):
        if asked.get("additionalProperties") is False:
            return (
                f"the agent always answers {where}/{name}, which the request's schema does "
                "not allow (additionalProperties: false)"
            )
    for name in sorted((needed | wanted) & set(mine) & set(theirs)):
        found = clash(mine[name], theirs[name], f"{where}/{name}")
        if found:
            return found
    return None


def _types(schema: dict[str, Any]) -> set[str] | None:
    kind = schema.get("type")
    if isinstance(kind, str):
        return {kind}
    if isinstance(kind, list) and all(isinstance(k, str) for k in kind):
        return set(kind)
    return None


def _overlap(mine: set[str], theirs: set[str]) -> bool:
    if mine & theirs:
        return True
    return ("integer" in mine and "number" in theirs) or ("number" in mine and "integer" in theirs)


def _values(schema: dict[str, Any]) -> list[Any] | None:
    if "const" in schema:
        return [schema["const"]]
    enum = schema.get("enum")
    return list(enum) if isinstance(enum, list) else None


def _listed(kinds: set[str]) -> str:
    return " or ".join(sorted(kinds))


def unfenced(text: str) -> str:
    """The JSON inside a Markdown code fence (```` ```json … ``` ````), else ``text``.

    Plain string operations, linear in the text: the regex this replaces took cubic
    time on a fence followed by spaces."""
    if len(text) < 6 or not (text.startswith("```") and text.endswith("```")):
        return text
    inner = text[3:-3]
    return inner.removeprefix("json").strip()
