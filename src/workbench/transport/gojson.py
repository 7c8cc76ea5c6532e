"""Go's ``encoding/json`` for the contract's types: the bytes ``json.Marshal`` writes and what ``json.Unmarshal`` reads.

modeld's wire is a JSON codec over Go structs (``runtime/transport/grpc/codec.go``: ``json.Marshal``/``json.Unmarshal``),
and the manifest digest is the sha256 of ``json.Marshal(manifest)`` (``runtime/contextasm/manifest.go`` ``digest``), so
the bytes matter, not only the values. What Go does (``encoding/json/encode.go``, Go 1.25), and so this module:

* fields in declaration order; the key is the field's tag name, else the Go field name (an untagged struct such as
  ``PrefixStatus`` writes ``"ReusedTokens"``); ``json:"-"`` is never written;
* ``omitempty`` drops false, 0, "", a nil pointer and an empty slice or map (never a struct);
* a nil slice, map or pointer is ``null``; ``[]byte`` is standard base64 with padding;
* strings escape ``"`` ``\\`` and controls (``\\b \\f \\n \\r \\t``, else ``\\u00xx`` lowercase), and HTML's ``<``
  ``>`` ``&`` and U+2028/U+2029 as ``\\u003c`` …; other non-ASCII is written as UTF-8; no spaces anywhere;
* a float is the shortest decimal that reads back as the same float64 (float32 for a ``float32`` field), in
  ``%f`` form unless its magnitude is below 1e-6 or at least 1e21, then ``%e`` with a two-digit exponent at least;
* map keys sorted.

Reading follows ``decode.go``: a key matches its field exactly, else case-insensitively; unknown keys are ignored; a
``null`` leaves the field's zero value; a value of the wrong JSON type is an error.

A type declares its Go shape once, with :func:`go` on each dataclass field: the JSON key, ``omitempty``, and the Go
kind where a Python type does not say it (``float32``, ``bytes``, a pointer that marshals ``null``).
"""

from __future__ import annotations

import base64
import dataclasses
import json
import math
import struct
import typing
from functools import lru_cache
from typing import Any, Mapping

SKIP = "-"


def go(key: str, default: Any = None, *, omitempty: bool = False, kind: str = "", factory: Any = None) -> Any:
    """A dataclass field with its Go JSON shape: ``key`` (the tag name or the Go field name; ``"-"``: never on the
    wire), ``omitempty``, and ``kind`` where Python's type does not say Go's: ``float32``, ``bytes``, ``ptr`` (a Go
    pointer: None marshals ``null``; without ``omitempty`` a None list marshals ``null`` too, as a nil slice does)."""
    meta = {"go": key, "omitempty": omitempty, "kind": kind}
    if factory is not None:
        return dataclasses.field(default_factory=factory, metadata=meta)
    return dataclasses.field(default=default, metadata=meta)


# --------------------------------------------------------------------------- marshal


_ESC = {'"': '\\"', "\\": "\\\\", "\b": "\\b", "\f": "\\f", "\n": "\\n", "\r": "\\r", "\t": "\\t",
        "<": "\\u003c", ">": "\\u003e", "&": "\\u0026", "\u2028": "\\u2028", "\u2029": "\\u2029"}


def _string(s: str) -> str:
    out = ['"']
    for ch in s:
        if ch in _ESC:
            out.append(_ESC[ch])
        elif ord(ch) < 0x20:
            out.append(f"\\u{ord(ch):04x}")
        elif 0xD800 <= ord(ch) <= 0xDFFF:  # a lone surrogate is not UTF-8: Go writes the replacement character
            out.append("\ufffd")
        else:
            out.append(ch)
    out.append('"')
    return "".join(out)


def _shortest32(x: float) -> str:
    """The shortest ``%g`` digits that read back as the same float32 (``strconv.FormatFloat(x, 'g', -1, 32)``)."""
    target = struct.pack("<f", x)
    for p in range(1, 10):
        s = f"{x:.{p}g}"
        if struct.pack("<f", float(s)) == target:
            return s
    return f"{x:.9g}"  # pragma: no cover - 9 significant digits always round-trip a float32


def _float(x: float, bits: int) -> str:
    """``encoding/json``'s ``floatEncoder``: shortest round-trip digits, ``%f`` unless tiny or huge."""
    if not math.isfinite(x):
        raise ValueError(f"json: unsupported value: {x}")  # Go's UnsupportedValueError
    if bits == 32:
        x = struct.unpack("<f", struct.pack("<f", x))[0]
    if x == 0:
        return "-0" if math.copysign(1.0, x) < 0 else "0"
    digits = _shortest32(x) if bits == 32 else repr(x)
    mantissa, _, exp = digits.lower().partition("e")
    a = abs(x)
    if a < 1e-6 or a >= 1e21:  # 'e' format: Go's %e of the shortest digits, exponent at least two digits
        sign = "-" if x < 0 else ""
        m = mantissa.lstrip("-")
        e = int(exp or 0)
        if "." in m:
            whole, frac = m.split(".")
        else:
            whole, frac = m, ""
        if len(whole) > 1:  # normalise to one digit before the point
            e += len(whole) - 1
            frac = whole[1:] + frac
            whole = whole[0]
        frac = frac.rstrip("0")
        body = whole + ("." + frac if frac else "")
        es = f"{'-' if e < 0 else '+'}{abs(e):02d}"
        # encoding/json then rewrites e-07 as e-7 ("clean up e-09 to e-9")
        if es.startswith("-0") and len(es) == 3:
            es = "-" + es[2]
        return f"{sign}{body}e{es}"
    # 'f' format with the shortest digits
    from decimal import Decimal

    d = Decimal(digits)
    s = format(d, "f")
    if "." in s:
        s = s.rstrip("0").rstrip(".")
    return s


def _hints(cls: type) -> dict[str, Any]:
    return _hints_cached(cls)


@lru_cache(maxsize=None)
def _hints_cached(cls: type) -> dict[str, Any]:
    return typing.get_type_hints(cls)


def _empty(v: Any, kind: str = "") -> bool:
    """Go's omitempty: a pointer is empty only when nil (a ``*bool`` false is written); otherwise false, 0, "" and
    an empty slice or map are."""
    if v is None:
        return True
    if kind == "ptr":
        return False
    if v is False:
        return True
    if isinstance(v, (int, float)) and not isinstance(v, bool):
        return v == 0
    if isinstance(v, (str, bytes, list, tuple, dict)):
        return len(v) == 0
    return False  # a struct is never empty to omitempty


def _number(v: Any, kind: str) -> str:
    if isinstance(v, int):
        return _float(float(v), 32) if kind == "float32" else str(int(v))
    if kind == "int":
        return str(int(v))
    return _float(v, 32 if kind == "float32" else 64)


def _value(v: Any, kind: str = "") -> str:
    if v is None:
        return "null"
    if dataclasses.is_dataclass(v) and not isinstance(v, type):
        return _struct(v)
    if isinstance(v, bool):
        return "true" if v else "false"
    if kind == "bytes" or isinstance(v, (bytes, bytearray)):
        return _string(base64.b64encode(bytes(v)).decode("ascii"))
    if isinstance(v, (int, float)):
        return _number(v, kind)
    if isinstance(v, str):
        return _string(v)
    if isinstance(v, Mapping):
        return "{" + ",".join(f"{_string(str(k))}:{_value(v[k], kind)}" for k in sorted(v)) + "}"
    if isinstance(v, (list, tuple)):
        return "[" + ",".join(_value(x, kind) for x in v) + "]"
    raise TypeError(f"json: unsupported type {type(v).__name__}")


def _struct(obj: Any) -> str:
    parts = []
    for f in dataclasses.fields(obj):
        key = f.metadata.get("go")
        if key is None:
            raise TypeError(f"{type(obj).__name__}.{f.name} declares no Go key (gojson.go)")
        if key == SKIP:
            continue
        v = getattr(obj, f.name)
        if f.metadata.get("omitempty") and _empty(v, f.metadata.get("kind", "")):
            continue
        parts.append(f"{_string(key)}:{_value(v, f.metadata.get('kind', ''))}")
    return "{" + ",".join(parts) + "}"


def marshal(obj: Any) -> bytes:
    """``json.Marshal(obj)``: the exact bytes Go writes."""
    return _value(obj).encode("utf-8")


# --------------------------------------------------------------------------- unmarshal


class GoJSONError(ValueError):
    """What ``json.Unmarshal`` refuses: invalid JSON, or a value of another JSON type than the field's."""


def unmarshal(cls: type, data: bytes | str | Mapping | None) -> Any:
    """``json.Unmarshal(data, &v)`` into a new ``cls``: keys matched exactly, else case-insensitively."""
    if isinstance(data, (bytes, bytearray, str)):
        try:
            data = json.loads(data) if data else None
        except (ValueError, UnicodeDecodeError) as e:
            raise GoJSONError(f"invalid JSON: {e}") from None
    return _decode(cls, data, "")


def _find(obj: Mapping, key: str) -> tuple[bool, Any]:
    if key in obj:
        return True, obj[key]
    low = key.lower()
    for k, v in obj.items():
        if isinstance(k, str) and k.lower() == low:
            return True, v
    return False, None


def _fields(cls: type, obj: Any, where: str) -> Any:
    if obj is None:
        return cls()
    if not isinstance(obj, Mapping):
        raise GoJSONError(f"json: cannot unmarshal {type(obj).__name__} into {where or cls.__name__}")
    hints = _hints(cls)
    values = {}
    for f in dataclasses.fields(cls):
        key = f.metadata.get("go")
        if key in (None, SKIP):
            continue
        found, raw = _find(obj, key)
        if not found or raw is None:
            continue
        values[f.name] = _decode(hints[f.name], raw, f"{where}.{key}" if where else key, f.metadata.get("kind", ""))
    return cls(**values)


def _wrong(raw: Any, where: str, what: str) -> GoJSONError:
    return GoJSONError(f"json: cannot unmarshal {raw!r} into {where} of type {what}")


def _bytes(raw: Any, where: str) -> bytes:
    if not isinstance(raw, str):
        raise _wrong(type(raw).__name__, where, "[]byte")
    try:
        return base64.b64decode(raw, validate=True)
    except ValueError as e:
        raise GoJSONError(f"illegal base64 data in {where}: {e}") from None


def _bool(raw: Any, where: str) -> bool:
    if not isinstance(raw, bool):
        raise _wrong(raw, where, "bool")
    return raw


def _int(raw: Any, where: str) -> int:
    if isinstance(raw, bool) or not isinstance(raw, (int, float)) or (isinstance(raw, float) and not raw.is_integer()):
        raise _wrong(raw, where, "int")
    return int(raw)


def _flt(raw: Any, where: str) -> float:
    if isinstance(raw, bool) or not isinstance(raw, (int, float)):
        raise _wrong(raw, where, "float")
    return float(raw)


def _str(raw: Any, where: str) -> str:
    if not isinstance(raw, str):
        raise _wrong(type(raw).__name__, where, "string")
    return raw


_SCALARS = {bool: _bool, int: _int, float: _flt, str: _str, bytes: _bytes}


def _container(t: Any, origin: Any, raw: Any, where: str, kind: str) -> Any:
    if origin in (list, tuple, typing.Sequence):
        if not isinstance(raw, list):
            raise _wrong(type(raw).__name__, where, "slice")
        (elem, *_) = typing.get_args(t) or (Any,)
        items = [_decode(elem, x, f"{where}[{i}]", kind) for i, x in enumerate(raw)]
        return tuple(items) if origin is tuple else items
    if not isinstance(raw, Mapping):
        raise _wrong(type(raw).__name__, where, "map")
    _, vt = typing.get_args(t) or (str, Any)
    return {str(k): _decode(vt, v, f"{where}[{k}]") for k, v in raw.items()}


def _decode(t: Any, raw: Any, where: str, kind: str = "") -> Any:
    origin = typing.get_origin(t)
    if origin is typing.Union or str(origin) == "<class 'types.UnionType'>":
        if raw is None:
            return None
        t = next(a for a in typing.get_args(t) if a is not type(None))
        origin = typing.get_origin(t)
    if dataclasses.is_dataclass(t):
        return _fields(t, raw, where)
    if raw is None:
        return None
    if kind == "bytes":
        return _bytes(raw, where)
    if t in _SCALARS:
        return _SCALARS[t](raw, where)
    if origin in (list, tuple, typing.Sequence, dict, typing.Mapping):
        return _container(t, origin, raw, where, kind)
    return raw  # Any


__all__ = ["GoJSONError", "go", "marshal", "unmarshal"]
