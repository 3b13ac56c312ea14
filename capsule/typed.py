"""Typed records from JSON: one declaration per record gives parsing with precise errors and its JSON
Schema. Records are frozen dataclasses; each field's constraints live in its metadata (see `spec`).

Parsing validates without transforming: integers stay integers, and the signed JSON a peer sent is what
gets verified. Errors name the field path and say what was expected and what arrived, e.g.
`$.cpu.cores: expected an integer >= 1, got -3`.
"""

from __future__ import annotations

import dataclasses
import functools
import math
import re
import types
import typing
from collections.abc import Callable, Mapping
from typing import Any, TypeVar

T = TypeVar("T")


class ValidationError(ValueError):
    """Data that does not match a record; `path` is the JSON path of the offending field."""

    def __init__(self, path: str, message: str) -> None:
        super().__init__(f"{path}: {message}")
        self.path = path
        self.reason = message


def spec(
    *,
    minimum: float | None = None,
    maximum: float | None = None,
    enum: tuple[str, ...] | None = None,
    pattern: str | None = None,
    max_length: int | None = None,
    check: Callable[[Any], None] | None = None,
    description: str = "",
    unit: str = "",
    default: Any = dataclasses.MISSING,
    absent_when_none: bool = False,
) -> Any:
    """A dataclass field with constraints. `check` raises ValueError with a reason for custom rules.
    `absent_when_none`: an optional field (default None) that is either a value or left out, never null, so a
    signed record has one form: to_json leaves it out when None, parse refuses an explicit null (a field added
    to a record later, which records signed before it do not carry)."""
    meta = {"minimum": minimum, "maximum": maximum, "enum": enum, "pattern": pattern, "max_length": max_length,
            "check": check, "description": description, "unit": unit, "absent_when_none": absent_when_none}
    return dataclasses.field(default=default, metadata=meta)


def _describe(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


def _num(value: float) -> str:
    return str(int(value)) if float(value).is_integer() else repr(value)


def _type_name(value: Any) -> str:
    return {dict: "an object", list: "an array", str: "a string", bool: "a boolean", int: "an integer",
            float: "a number", type(None): "null"}.get(type(value), type(value).__name__)


def _bounds(lo: float | None, hi: float | None) -> str:
    return (f" in [{_num(lo)}, {_num(hi)}]" if lo is not None and hi is not None
            else f" >= {_num(lo)}" if lo is not None else f" <= {_num(hi)}" if hi is not None else "")


I_JSON_MAX_INT = 2**53 - 1  # RFC 7493: integers beyond this are not exact in every JSON reader (JavaScript)


@functools.cache
def _pattern(pattern: str) -> re.Pattern[str]:
    return re.compile(pattern)


def _check_scalar(tp: Any, value: Any, meta: Mapping[str, Any], path: str) -> None:
    lo, hi = meta.get("minimum"), meta.get("maximum")
    if tp is bool:
        if not isinstance(value, bool):
            raise ValidationError(path, f"expected a boolean, got {_type_name(value)}")
        return
    if tp is int:
        if isinstance(value, bool) or not isinstance(value, int):
            raise ValidationError(path, f"expected an integer{_bounds(lo, hi)}, got {_type_name(value)} "
                                        f"{_describe(value)}")
        if abs(value) > I_JSON_MAX_INT:
            raise ValidationError(path, f"expected an integer within I-JSON's exact range (|n| <= 2**53 - 1), "
                                        f"got {value}")
    elif tp is float:
        if isinstance(value, bool) or not isinstance(value, int | float):
            raise ValidationError(path, f"expected a number{_bounds(lo, hi)}, got {_type_name(value)} "
                                        f"{_describe(value)}")
        if not math.isfinite(value):
            raise ValidationError(path, f"expected a finite number, got {value}")
    elif tp is str:
        if not isinstance(value, str):
            raise ValidationError(path, f"expected a string, got {_type_name(value)} {_describe(value)}")
        max_length, pattern, enum = meta.get("max_length"), meta.get("pattern"), meta.get("enum")
        if max_length is not None and len(value) > max_length:
            raise ValidationError(path, f"expected at most {max_length} characters, got {len(value)}")
        if enum is not None and value not in enum:
            raise ValidationError(path, f"expected one of {', '.join(enum)}, got {_describe(value)}")
        if pattern is not None and not _pattern(pattern).fullmatch(value):
            raise ValidationError(path, f"expected a string matching {pattern}, got {_describe(value)}")
    if tp in (int, float) and ((lo is not None and value < lo) or (hi is not None and value > hi)):
        raise ValidationError(path, f"expected {'an integer' if tp is int else 'a number'}{_bounds(lo, hi)}, "
                                    f"got {value}")


@functools.cache
def _shape(tp: Any) -> tuple[str, Any]:
    """What kind of type annotation this is, worked out once per type (typing introspection is slow)."""
    origin = typing.get_origin(tp)
    if origin in (typing.Union, types.UnionType):
        (inner,) = [a for a in typing.get_args(tp) if a is not type(None)]
        return "optional", inner
    if origin is list:
        return "list", typing.get_args(tp)[0]
    if origin is dict:
        return "dict", None
    if dataclasses.is_dataclass(tp):
        return "record", tp
    return "scalar", tp


def _parse_value(tp: Any, value: Any, meta: Mapping[str, Any], path: str) -> Any:
    kind, arg = _shape(tp)
    if kind == "optional":
        return None if value is None else _parse_value(arg, value, meta, path)
    if kind == "list":
        if not isinstance(value, list):
            raise ValidationError(path, f"expected an array, got {_type_name(value)}")
        return [_parse_value(arg, v, meta, f"{path}[{i}]") for i, v in enumerate(value)]
    if kind == "dict":
        if not isinstance(value, dict):
            raise ValidationError(path, f"expected an object, got {_type_name(value)}")
        return value
    if kind == "record":
        return parse(arg, value, path)
    _check_scalar(tp, value, meta, path)
    check = meta.get("check")
    if check is not None:
        try:
            check(value)
        except ValueError as exc:
            raise ValidationError(path, str(exc)) from None
    return value


@functools.cache
def _fields_of(cls: type) -> tuple[dict[str, dataclasses.Field[Any]], dict[str, Any]]:
    """Fields and resolved type hints of a record, computed once (get_type_hints is slow)."""
    return {f.name: f for f in dataclasses.fields(cls)}, typing.get_type_hints(cls)


def parse(cls: type[T], data: Any, path: str = "$") -> T:
    """Builds `cls` from JSON data, or raises ValidationError naming the first problem."""
    if not isinstance(data, dict):
        raise ValidationError(path, f"expected an object, got {_type_name(data)}")
    fields, hints = _fields_of(typing.cast(type, cls))
    unknown = sorted(set(data) - set(fields))
    if unknown:
        raise ValidationError(f"{path}.{unknown[0]}", f"unknown field (expected only: {', '.join(fields)})")
    values = {}
    for name, f in fields.items():
        if name not in data:
            if f.default is not dataclasses.MISSING:
                continue
            raise ValidationError(f"{path}.{name}", "required field is missing")
        if data[name] is None and f.metadata.get("absent_when_none"):
            raise ValidationError(f"{path}.{name}", "expected a value, or the field left out; got null")
        values[name] = _parse_value(hints[name], data[name], f.metadata, f"{path}.{name}")
    return cls(**values)


def to_json(record: Any) -> Any:
    """The JSON form of a record (dataclasses to dicts, recursively)."""
    if dataclasses.is_dataclass(record) and not isinstance(record, type):
        return {f.name: to_json(getattr(record, f.name)) for f in dataclasses.fields(record)
                if not (f.metadata.get("absent_when_none") and getattr(record, f.name) is None)}
    if isinstance(record, list):
        return [to_json(v) for v in record]
    return record


def _present(tp: Any, f: dataclasses.Field[Any]) -> Any:
    """The type a field has where it is present: an absent_when_none field is never null."""
    if f.metadata.get("absent_when_none"):
        (inner,) = [a for a in typing.get_args(tp) if a is not type(None)]
        return inner
    return tp


def json_schema(cls: type, title: str = "") -> dict[str, Any]:
    """JSON Schema (draft 2020-12) of a record, generated from the same declarations `parse` uses."""
    schema = _schema_of(cls, {})
    schema["$schema"] = "https://json-schema.org/draft/2020-12/schema"
    if title:
        schema["title"] = title
    return schema


def _schema_of(tp: Any, meta: Mapping[str, Any]) -> dict[str, Any]:
    origin = typing.get_origin(tp)
    if origin in (typing.Union, types.UnionType):
        (inner,) = [a for a in typing.get_args(tp) if a is not type(None)]
        return {"anyOf": [_schema_of(inner, meta), {"type": "null"}]}
    if origin is list:
        return {"type": "array", "items": _schema_of(typing.get_args(tp)[0], meta)}
    if origin is dict:
        return {"type": "object"}
    if dataclasses.is_dataclass(tp):
        hints = typing.get_type_hints(tp)
        fields = dataclasses.fields(tp)
        return {
            "type": "object",
            "properties": {f.name: _schema_of(_present(hints[f.name], f), f.metadata) for f in fields},
            "required": [f.name for f in fields if f.default is dataclasses.MISSING],
            "additionalProperties": False,
        }
    out: dict[str, Any] = {"type": {int: "integer", float: "number", str: "string", bool: "boolean"}[tp]}
    for key, schema_key in (("minimum", "minimum"), ("maximum", "maximum"), ("pattern", "pattern"),
                            ("max_length", "maxLength"), ("description", "description")):
        if meta.get(key):
            out[schema_key] = meta[key]
        elif meta.get(key) == 0 and key in ("minimum", "maximum"):
            out[schema_key] = 0
    if meta.get("enum"):
        out["enum"] = list(meta["enum"])
    if meta.get("unit"):
        out["description"] = (out.get("description", "") + f" [{meta['unit']}]").strip()
    if tp is str and meta.get("pattern"):
        out["pattern"] = "^(?:" + meta["pattern"] + ")$"
    return out
