"""Parsers for ingest bodies: JSON documents and incremental (chunk-fed) bulk streams.

Bulk streams (``text/csv`` with header ``example_id,value``, ``application/x-ndjson`` lines
``{"example_id": ..., "value": ...}``, and ``text/plain`` example ids one per line) are parsed
chunk by chunk as the body arrives: each chunk's complete lines go through a vectorised fast
path (split, one regex per id, ``map(float)``), and only a chunk that fails it is re-scanned
line by line to say exactly which line and field is wrong. Error messages never echo a value.
"""

from __future__ import annotations

import bisect
import csv
import gc
import json
import math
import re
import threading
from array import array
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from itertools import repeat
from typing import Any

import numpy as np

from labels_party.errors import BadInputError, FieldError
from shared.message import EXAMPLE_ID_PATTERN
from shared.segments import SEGMENT_PATTERN
from shared.service import strict_input

ID_RE = re.compile(EXAMPLE_ID_PATTERN.removeprefix("^").removesuffix("$"))
CSV_HEADER = "example_id,value"
MAX_REPORTED_ERRORS = 10
_ID_RULE = "must be 1-128 characters of letters, digits, '_', '.', ':' or '-'"
SEGMENT_RE = re.compile(SEGMENT_PATTERN.removeprefix("^").removesuffix("$"))
_SEGMENT_RULE = "must be 1-64 characters of letters, digits, space, '_', '.', ':' or '-'"
_VALUE_RULE = "must be a finite number"
_TEXT_VALUE_RULE = "must be a finite number, written as a plain decimal (ASCII digits, no '_')"

_gc_lock = threading.Lock()
_gc_users = 0
_gc_was_enabled = True


@contextmanager
def gc_paused() -> Iterator[None]:
    """Pause the cyclic GC while building millions of tuples (they hold no cycles).

    Allocation-triggered collections otherwise rescan the growing heap again and again.
    Counted across threads: the collector comes back when the last user leaves.
    """
    global _gc_users, _gc_was_enabled
    with _gc_lock:
        if _gc_users == 0:
            _gc_was_enabled = gc.isenabled()
            gc.disable()
        _gc_users += 1
    try:
        yield
    finally:
        with _gc_lock:
            _gc_users -= 1
            if _gc_users == 0 and _gc_was_enabled:
                gc.enable()


@dataclass(frozen=True, kw_only=True)
class LabelRows:
    """Parsed label rows, in input order (duplicates kept: the store decides what they mean)."""

    example_ids: list[str]
    values: np.ndarray
    # Where row i came from, for errors found after parsing (a label conflict): None for a JSON
    # batch (``labels[i]``); else the stream line of row 0, and the rows before which a blank
    # line was skipped (one entry per blank line, so rarely any).
    first_line: int | None = None
    blank_before: tuple[int, ...] = ()

    def __len__(self) -> int:
        return len(self.example_ids)

    def where(self, i: int) -> str:
        """Row ``i``'s place in the request as parse errors name it: ``labels[i]``, ``line[n]``."""
        if self.first_line is None:
            return f"labels[{i}]"
        return f"line[{self.first_line + i + bisect.bisect_right(self.blank_before, i)}]"


def _raise(errors: list[FieldError], *, what: str) -> None:
    shown = errors[:MAX_REPORTED_ERRORS]
    more = f" (the first {len(shown)} are listed)" if len(errors) > len(shown) else ""
    raise BadInputError(f"invalid {what}{more}; nothing was stored", shown)


def _number(value: Any) -> float | None:
    """A finite float from a JSON number (bool and strings refused), else None."""
    if type(value) is float:
        return value if math.isfinite(value) else None
    if type(value) is int:
        try:
            as_float = float(value)
        except OverflowError:
            return None
        return as_float if math.isfinite(as_float) else None
    return None


def _check_label_object(obj: Any, where: str, errors: list[FieldError]) -> tuple[str, float] | None:
    if not isinstance(obj, dict):
        errors.append(FieldError(field=where, message="must be an object {example_id, value}"))
        return None
    extra = set(obj) - {"example_id", "value"}
    if extra:
        errors.append(
            FieldError(field=where, message=f"unexpected key(s): {', '.join(sorted(extra))}")
        )
        return None
    example_id = obj.get("example_id")
    ok = True
    if "example_id" not in obj:
        errors.append(FieldError(field=f"{where}.example_id", message="is required"))
        ok = False
    elif not isinstance(example_id, str) or not ID_RE.fullmatch(example_id):
        errors.append(FieldError(field=f"{where}.example_id", message=_ID_RULE))
        ok = False
    if "value" not in obj:
        errors.append(FieldError(field=f"{where}.value", message="is required"))
        return None
    value = _number(obj["value"])
    if value is None:
        errors.append(FieldError(field=f"{where}.value", message=_VALUE_RULE))
        return None
    return (example_id, value) if ok else None  # type: ignore[return-value]


def _json_problem(exc: Exception) -> str:
    """Why ``json.loads`` refused a document, without quoting it."""
    if isinstance(exc, json.JSONDecodeError):
        return exc.msg
    if isinstance(exc, RecursionError):
        return "nested too deeply"
    return "a number has too many digits"  # ValueError: int() digit limit (CVE-2020-10735)


def _loads(body: bytes) -> Any:
    try:
        return strict_input.loads(body)
    except strict_input.DuplicateKeyError as exc:
        raise BadInputError(
            "a JSON object repeats a key; nothing was stored",
            [FieldError(field=exc.field, message=strict_input.DUPLICATE_KEY_MESSAGE)],
        ) from None
    except UnicodeDecodeError:
        raise BadInputError(
            "the body is not valid UTF-8", [FieldError(field="body", message="is not UTF-8")]
        ) from None
    except json.JSONDecodeError as exc:
        raise BadInputError(
            f"malformed JSON: {exc.msg} at line {exc.lineno} column {exc.colno}",
            [FieldError(field="body", message=f"malformed JSON: {exc.msg}")],
        ) from None
    except (ValueError, RecursionError) as exc:
        reason = _json_problem(exc)
        raise BadInputError(
            f"malformed JSON: {reason}",
            [FieldError(field="body", message=f"malformed JSON: {reason}")],
        ) from None


def _batch(body: bytes, key: str) -> list[Any]:
    """The non-empty list under ``key`` of a JSON object that has no other key."""
    return _batch_with(body, key)[0]


def _batch_with(body: bytes, key: str, *optional: str) -> tuple[list[Any], dict[str, Any]]:
    """:func:`_batch`, also allowing the ``optional`` keys (returned as given)."""
    doc = _loads(body)
    if not isinstance(doc, dict):
        raise BadInputError(
            "body must be a JSON object", [FieldError(field="body", message="must be an object")]
        )
    extra = set(doc) - {key, *optional}
    if extra:
        raise BadInputError(
            "unexpected key(s) in body",
            [FieldError(field=name, message="unexpected key") for name in sorted(extra)],
        )
    items = doc.get(key)
    if not isinstance(items, list):
        raise BadInputError(
            f"{key} must be a list", [FieldError(field=key, message="must be a list")]
        )
    if not items:
        raise BadInputError("empty batch", [FieldError(field=key, message="must not be empty")])
    return items, {name: doc[name] for name in optional if name in doc}


def parse_labels_json(body: bytes) -> LabelRows:
    """``{"labels": [{"example_id": str, "value": number}, ...]}`` (non-empty)."""
    items = _batch(body, "labels")
    errors: list[FieldError] = []
    ids: list[str] = []
    values = array("d")
    for index, obj in enumerate(items):
        checked = _check_label_object(obj, f"labels[{index}]", errors)
        if checked is not None:
            ids.append(checked[0])
            values.append(checked[1])
    if errors:
        _raise(errors, what="labels")
    return LabelRows(example_ids=ids, values=np.frombuffer(values, dtype=np.float64))


@dataclass(frozen=True)
class ExampleBatch:
    """Example ids, and each one's segment when the batch gives them (segmented datasets)."""

    ids: list[str]
    segments: list[str] | None = None


def parse_examples_json(body: bytes) -> list[str]:
    """``{"example_ids": [str, ...]}`` (non-empty); segments are refused here."""
    batch = parse_example_batch(body)
    if batch.segments is not None:
        raise BadInputError(
            "unexpected key(s) in body", [FieldError(field="segments", message="unexpected key")]
        )
    return batch.ids


def parse_example_batch(body: bytes) -> ExampleBatch:
    """``{"example_ids": [str, ...], "segments": [str, ...]}``; ``segments`` is optional and,
    when given, one segment (``shared.segments.SEGMENT_PATTERN``) per id, in the same order."""
    ids, optional = _batch_with(body, "example_ids", "segments")
    _check_strings(ids, "example_ids", ID_RE, _ID_RULE, what="example ids")
    if "segments" not in optional or optional["segments"] is None:
        return ExampleBatch(ids=ids)
    segments = optional["segments"]
    if not isinstance(segments, list):
        raise BadInputError(
            "segments must be a list", [FieldError(field="segments", message="must be a list")]
        )
    _check_strings(segments, "segments", SEGMENT_RE, _SEGMENT_RULE, what="segments")
    return ExampleBatch(ids=ids, segments=segments)


def _check_strings(
    items: list[Any], key: str, pattern: re.Pattern[str], rule: str, *, what: str
) -> None:
    """Refuse every item of ``items`` that is not a string matching ``pattern`` (``key[i]``)."""
    errors = [
        FieldError(field=f"{key}[{i}]", message=rule)
        for i, item in enumerate(items)
        if not isinstance(item, str) or not pattern.fullmatch(item)
    ]
    if errors:
        _raise(errors, what=what)


class _LineStream:
    """Split an incoming byte stream into complete UTF-8 lines, numbering them from 1.

    A UTF-8 byte order mark at the very start (spreadsheet exports) is dropped.
    """

    def __init__(self) -> None:
        self._carry = b""
        self.line_no = 0  # lines handed out so far

    def feed(self, chunk: bytes) -> list[str]:
        data = self._carry + chunk if self._carry else chunk
        cut = data.rfind(b"\n")
        if cut < 0:
            self._carry = data
            return []
        self._carry = data[cut + 1 :]
        # The last line before the cut ends in "\r" when lines end in CRLF: drop it here, as
        # _decode's replace() only sees the CRLFs inside the piece.
        end = cut - 1 if cut > 0 and data[cut - 1] == 0x0D else cut
        return self._decode(data[:end])

    def close(self) -> list[str]:
        rest, self._carry = self._carry, b""
        return self._decode(rest) if rest else []

    def _decode(self, data: bytes) -> list[str]:
        try:
            text = data.decode("utf-8")
        except UnicodeDecodeError as exc:
            line = self.line_no + data.count(b"\n", 0, exc.start) + 1
            raise BadInputError(
                "the body is not valid UTF-8",
                [FieldError(field=f"line[{line}]", message="is not valid UTF-8")],
            ) from None
        if self.line_no == 0 and text.startswith("\ufeff"):
            text = text[1:]
        if "\r" in text:
            text = text.replace("\r\n", "\n")
        lines = text.split("\n")
        self.line_no += len(lines)
        return lines


class LabelStreamParser:
    """Incremental parser of ``text/csv`` or ``application/x-ndjson`` label streams."""

    def __init__(self, *, fmt: str) -> None:
        if fmt not in ("csv", "ndjson"):
            raise ValueError(f"unknown stream format {fmt!r}")
        self.fmt = fmt
        self._lines = _LineStream()
        self._ids: list[str] = []
        self._values = array("d")
        self._errors: list[FieldError] = []
        self._header_seen = fmt != "csv"
        self._first_line: int | None = None  # the line of the first row (after the header)
        self._blank_before: list[int] = []

    def feed(self, chunk: bytes) -> None:
        first = self._lines.line_no + 1
        self._parse(self._lines.feed(chunk), first)

    def finish(self) -> LabelRows:
        first = self._lines.line_no + 1
        self._parse(self._lines.close(), first)
        if not self._header_seen:
            self._errors.append(
                FieldError(field="line[1]", message=f"CSV header must be exactly {CSV_HEADER!r}")
            )
        if self._errors:
            _raise(self._errors, what="label stream")
        if not self._ids:
            raise BadInputError(
                "empty batch", [FieldError(field="body", message="contains no label rows")]
            )
        return LabelRows(
            example_ids=self._ids,
            values=np.frombuffer(self._values, dtype=np.float64),
            first_line=self._first_line,
            blank_before=tuple(self._blank_before),
        )

    def _parse(self, lines: list[str], first: int) -> None:
        if not lines:
            return
        if not self._header_seen:
            header = lines[0].strip()
            if '"' in header:
                header = ",".join(_csv_fields(header) or ["?"])
            if header != CSV_HEADER:
                self._errors.append(
                    FieldError(
                        field=f"line[{first}]", message=f"CSV header must be exactly {CSV_HEADER!r}"
                    )
                )
            self._header_seen = True
            lines, first = lines[1:], first + 1
        if self._first_line is None:
            self._first_line = first
        if "" in lines:  # blank lines are allowed (a trailing newline, say); keep numbering
            numbered = [(first + i, line) for i, line in enumerate(lines) if line]
            kept = len(self._ids)
            for line in lines:
                if line:
                    kept += 1
                else:
                    self._blank_before.append(kept)
        else:
            numbered = None
        if self._errors:  # already failing: only collect diagnostics, cheaply
            if len(self._errors) < MAX_REPORTED_ERRORS:
                self._slow(numbered if numbered is not None else list(enumerate(lines, first)))
            return
        body = [line for _, line in numbered] if numbered is not None else lines
        if not body:
            return
        if self.fmt == "csv" and self._fast_csv(body):
            return
        if self.fmt == "ndjson" and self._fast_ndjson(body):
            return
        self._slow(numbered if numbered is not None else list(enumerate(lines, first)))

    def _fast_csv(self, body: list[str]) -> bool:
        text = "\n".join(body)
        if '"' in text:  # quoted fields: the line-by-line path parses them
            return False
        if not strict_input.plain_ascii_numbers(text):  # float() would read 1_000, full-width
            return False
        commas = list(map(str.count, body, repeat(",", len(body))))
        if commas.count(1) != len(commas):
            return False
        parts = text.replace(",", "\n").split("\n")
        ids = parts[0::2]
        if not all(map(ID_RE.fullmatch, ids)):
            return False
        try:
            values = np.array(list(map(float, parts[1::2])), dtype=np.float64)
        except ValueError:
            return False
        return self._keep(ids, values)

    def _keep(self, ids: list[str], values: np.ndarray) -> bool:
        """Keep a fast-parsed batch if every value is finite (else the line path says which)."""
        if not np.isfinite(values).all():
            return False
        self._ids.extend(ids)
        self._values.frombytes(values.tobytes())
        return True

    def _fast_ndjson(self, body: list[str]) -> bool:
        try:
            objs = json.loads("[" + ",".join(body) + "]")
            if len(objs) != len(body) or set(map(len, objs)) != {2}:
                return False
            # No repeated key: each object has the two keys and a string id (6 quotes); a
            # repeated key, or any other string, adds quotes (the line-by-line path says which).
            if sum(map(str.count, body, repeat('"', len(body)))) != 6 * len(body):
                return False
            ids = [obj["example_id"] for obj in objs]
            raw = [obj["value"] for obj in objs]
            if not all(map(ID_RE.fullmatch, ids)) or not set(map(type, raw)) <= {float, int}:
                return False
            values = np.array(raw, dtype=np.float64)
        except (ValueError, TypeError, KeyError, OverflowError, RecursionError):
            return False
        return self._keep(ids, values)

    def _slow(self, numbered: list[tuple[int, str]]) -> None:
        for line_no, line in numbered:
            if not line:
                continue
            where = f"line[{line_no}]"
            if self.fmt == "csv":
                fields = _csv_fields(line) if '"' in line else line.split(",")
                if fields is None:
                    self._errors.append(
                        FieldError(field=where, message='malformed quoting (RFC 4180: "a","1")')
                    )
                    continue
                if len(fields) != 2:
                    self._errors.append(
                        FieldError(
                            field=where, message="must have exactly 2 fields: example_id,value"
                        )
                    )
                    continue
                example_id, raw = fields
                ok = True
                if not ID_RE.fullmatch(example_id):
                    self._errors.append(FieldError(field=f"{where}.example_id", message=_ID_RULE))
                    ok = False
                try:
                    value: float | None = strict_input.parse_decimal(raw)
                except ValueError:
                    value = None
                if value is None or not math.isfinite(value):
                    self._errors.append(
                        FieldError(field=f"{where}.value", message=_TEXT_VALUE_RULE)
                    )
                    ok = False
                if ok:
                    self._ids.append(example_id)
                    self._values.append(value)  # type: ignore[arg-type]
            else:
                try:
                    obj = strict_input.loads(line, prefix=where)
                except strict_input.DuplicateKeyError as exc:
                    self._errors.append(
                        FieldError(field=exc.field, message=strict_input.DUPLICATE_KEY_MESSAGE)
                    )
                    continue
                except (ValueError, RecursionError) as exc:
                    reason = _json_problem(exc)
                    self._errors.append(
                        FieldError(field=where, message=f"malformed JSON: {reason}")
                    )
                    continue
                checked = _check_label_object(obj, where, self._errors)
                if checked is not None:
                    self._ids.append(checked[0])
                    self._values.append(checked[1])


def _csv_fields(line: str) -> list[str] | None:
    """One CSV line with RFC 4180 quoting (``"a","1.5"``), or None if the quoting is broken."""
    try:
        rows = list(csv.reader([line], strict=True))
    except csv.Error:
        return None
    return rows[0] if len(rows) == 1 else None


class ExampleStreamParser:
    """Incremental parser of ``text/plain`` example ids, one per line (blank lines ignored)."""

    def __init__(self) -> None:
        self._lines = _LineStream()
        self._ids: list[str] = []
        self._errors: list[FieldError] = []

    def feed(self, chunk: bytes) -> None:
        first = self._lines.line_no + 1
        self._parse(self._lines.feed(chunk), first)

    def finish(self) -> list[str]:
        first = self._lines.line_no + 1
        self._parse(self._lines.close(), first)
        if self._errors:
            _raise(self._errors, what="example id stream")
        if not self._ids:
            raise BadInputError(
                "empty batch", [FieldError(field="body", message="contains no example ids")]
            )
        return self._ids

    def _parse(self, lines: list[str], first: int) -> None:
        numbered = (
            [(first + i, line) for i, line in enumerate(lines) if line] if "" in lines else None
        )
        body = [line for _, line in numbered] if numbered is not None else lines
        if not self._errors and all(map(ID_RE.fullmatch, body)):
            self._ids.extend(body)
            return
        for line_no, line in numbered if numbered is not None else enumerate(lines, first):
            if len(self._errors) >= MAX_REPORTED_ERRORS:
                return
            if not ID_RE.fullmatch(line):
                self._errors.append(FieldError(field=f"line[{line_no}]", message=_ID_RULE))
