"""Reading problem files: bytes -> lines -> JSON objects -> `Problem`s, one converter per format.

Each format module exposes `convert(obj: dict) -> Problem`, raising `ProblemError(field, message)`
for a line it cannot use. This module owns everything around that: gzip (by magic bytes), UTF-8 per
line, JSON per line, format detection, duplicate ids, and turning every failure into a `LoadError`.
"""

from __future__ import annotations

import json
import zlib
from typing import Any, Callable

from sandbox.problems import FORMATS, LoadError, LoadResult, Problem, ProblemError, short

MAX_FILE_BYTES = 512 << 20
"""Cap on a file's size, compressed or not (a gzip bomb stops here)."""
MAX_LINE_BYTES = 64 << 20
"""Cap on one line (CodeContests lines with generated tests reach a few MiB)."""
MAX_ERRORS = 500
"""Errors kept per file; the rest are counted in one last error."""

GZIP_MAGIC = b"\x1f\x8b"


def converters() -> dict[str, Callable[[dict], Problem]]:
    from sandbox.formats import apps, codecontests, humaneval, mbpp, native
    return {"native": native.convert, "humaneval": humaneval.convert, "mbpp": mbpp.convert,
            "apps": apps.convert, "codecontests": codecontests.convert}


# Keys that only one format has decide at once; otherwise the format sharing most keys wins.
_MARKERS = (("kind", "native"), ("test_cases", "native"), ("canonical_solution", "humaneval"),
            ("test_list", "mbpp"), ("input_output", "apps"), ("public_tests", "codecontests"),
            ("private_tests", "codecontests"), ("generated_tests", "codecontests"))
_SIGNATURES = {
    "native": {"id", "kind", "prompt", "entry_point", "tests", "test_cases", "setup",
               "reference_solution", "time_limit_s", "memory_limit_mb", "checker", "split", "tags"},
    "humaneval": {"task_id", "prompt", "canonical_solution", "test", "entry_point"},
    "mbpp": {"task_id", "text", "code", "test_list", "test_setup_code", "challenge_test_list",
             "test_imports"},
    "apps": {"problem_id", "question", "solutions", "input_output", "difficulty", "url",
             "starter_code"},
    "codecontests": {"name", "description", "public_tests", "private_tests", "generated_tests",
                     "solutions", "incorrect_solutions", "cf_contest_id", "cf_index", "cf_rating",
                     "time_limit", "memory_limit_bytes"},
}


def detect_format(obj: dict) -> str | None:
    """The format an object's keys say it is in, or None when they say nothing clear."""
    for key, fmt in _MARKERS:
        if key in obj:
            return fmt
    scores = sorted(((len(sig & obj.keys()), fmt) for fmt, sig in _SIGNATURES.items()), reverse=True)
    (best, fmt), (second, _) = scores[0], scores[1]
    if best >= 2 and best > second:
        return fmt
    if "id" in obj and best <= 1:
        return "native"  # only native problems have an `id`; the line will say what is missing
    return None


def parse_bytes(data: bytes, filename: str = "<upload>", format: str = "auto") -> LoadResult:
    if format != "auto" and format not in FORMATS:
        return LoadResult([], [LoadError(0, "format", f"{short(format)} is not one of auto, "
                                                      f"{', '.join(FORMATS)}")], "native")
    result = LoadResult([], [], format if format != "auto" else "native")
    if data[:2] == GZIP_MAGIC:
        try:
            data = _gunzip(data)
        except (OSError, EOFError, zlib.error) as e:
            result.errors.append(LoadError(0, None, f"{filename}: broken gzip data: {e}"))
            return result
        if data is None:
            result.errors.append(LoadError(0, None, f"{filename}: decompresses to more than "
                                                    f"{MAX_FILE_BYTES >> 20} MiB"))
            return result
    elif filename.endswith(".gz"):
        pass  # named .gz but not gzip: read it as plain text, the magic bytes decide
    if data.startswith(b"\xef\xbb\xbf"):
        data = data[3:]
    whole = _whole_file_problem(data)
    if whole:
        result.errors.append(LoadError(0, None, f"{filename}: {whole}"))
        return result

    convert_by_format = converters()
    fmt = None if format == "auto" else format
    seen_ids: dict[str, int] = {}
    dropped = 0
    parsed_any = False

    def error(line: int, field: str | None, message: str) -> None:
        nonlocal dropped
        if len(result.errors) < MAX_ERRORS:
            result.errors.append(LoadError(line, field, message))
        else:
            dropped += 1

    for lineno, raw in enumerate(data.split(b"\n"), start=1):
        raw = raw.rstrip(b"\r")
        if not raw.strip():
            continue
        if len(raw) > MAX_LINE_BYTES:
            error(lineno, None, f"line is longer than {MAX_LINE_BYTES >> 20} MiB")
            continue
        obj, problem_text = _parse_line(raw)
        if problem_text:
            error(lineno, None, problem_text)
            continue
        parsed_any = True
        if not isinstance(obj, dict):
            if isinstance(obj, list) and obj and all(isinstance(o, dict) for o in obj):
                error(lineno, None, f"this line is a JSON array of {len(obj)} objects; JSON Lines "
                                    "needs one problem object per line")
            else:
                error(lineno, None, f"expected a JSON object, got {_json_type(obj)}: {short(obj)}")
            continue
        if fmt is None:
            fmt = detect_format(obj)
            if fmt is None:
                keys = ", ".join(short(k, 30) for k in list(obj)[:12]) or "none"
                error(lineno, None, f"cannot tell the format from this object's keys ({keys}); "
                                    f"choose the format explicitly (one of {', '.join(FORMATS)})")
                continue
            result.format = fmt
        try:
            problem = convert_by_format[fmt](obj)
        except ProblemError as e:
            error(lineno, e.field, e.message)
            continue
        except RecursionError:
            error(lineno, None, "too deeply nested")
            continue
        except Exception as e:  # a converter bug must cost one line, never the whole upload
            error(lineno, None, f"cannot read this {fmt} object: {type(e).__name__}: {short(str(e))}")
            continue
        if problem.id in seen_ids:
            error(lineno, "id", f"duplicate id {short(problem.id)} (first on line {seen_ids[problem.id]})")
            continue
        seen_ids[problem.id] = lineno
        result.problems.append(problem)

    if not result.problems:
        if not parsed_any and not result.errors:
            result.errors.append(LoadError(0, None, f"{filename}: file has no problems (it is empty "
                                                    "or only blank lines)"))
        elif _is_multiline_json_document(data):
            result.errors.insert(0, LoadError(0, None, f"{filename}: is one JSON document spread over "
                                                        "several lines, not JSON Lines; write one "
                                                        "problem object per line"))
    if dropped:
        result.errors.append(LoadError(0, None, f"{dropped} more errors not listed"))
    return result


def _gunzip(data: bytes) -> bytes | None:
    """Decompress (all members), or None past MAX_FILE_BYTES."""
    out = bytearray()
    decomp = zlib.decompressobj(16 + zlib.MAX_WBITS)
    rest = data
    while rest:
        chunk = decomp.decompress(rest, MAX_FILE_BYTES + 1 - len(out))
        out += chunk
        if len(out) > MAX_FILE_BYTES:
            return None
        if decomp.unconsumed_tail:
            rest = decomp.unconsumed_tail
            continue
        if decomp.eof:
            rest = decomp.unused_data
            if rest and rest[:2] == GZIP_MAGIC:  # concatenated gzip members
                decomp = zlib.decompressobj(16 + zlib.MAX_WBITS)
                continue
            break  # trailing garbage after the stream is ignored, as gzip(1) does
        rest = b""
    if not decomp.eof:
        raise EOFError("compressed stream ends early (truncated file?)")
    return bytes(out)


_BINARY_MAGICS = ((b"PK\x03\x04", "a zip archive"), (b"PAR1", "a Parquet file"),
                  (b"\x89PNG", "a PNG image"), (b"%PDF", "a PDF"), (b"BZh", "bzip2 data"),
                  (b"\xfd7zXZ", "xz data"), (b"ARROW1", "an Arrow file"))


def _whole_file_problem(data: bytes) -> str | None:
    for magic, what in _BINARY_MAGICS:
        if data.startswith(magic):
            return f"is {what}, not JSON Lines; export the problems as .jsonl or .jsonl.gz"
    if b"\x00" in data[:4096]:
        return "is binary data, not JSON Lines (UTF-8 text with one JSON object per line)"
    return None


def _parse_line(raw: bytes) -> tuple[Any, str | None]:
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as e:
        return None, f"not valid UTF-8 (byte {e.start}: {raw[e.start:e.start + 1]!r})"
    try:
        return json.loads(text), None
    except json.JSONDecodeError as e:
        return None, f"invalid JSON: {e.msg} at column {e.colno}: {short(text, 60)}"
    except RecursionError:
        return None, "invalid JSON: nested too deeply"
    except (ValueError, MemoryError) as e:  # e.g. an integer literal with too many digits
        return None, f"invalid JSON: {short(str(e), 120)}"


def _is_multiline_json_document(data: bytes) -> bool:
    if data.lstrip()[:1] not in (b"{", b"[") or b"\n" not in data.strip():
        return False
    try:
        json.loads(data)
        return True
    except (ValueError, RecursionError, MemoryError):
        return False


def _json_type(value: Any) -> str:
    return {list: "an array", str: "a string", int: "a number", float: "a number", bool: "a boolean",
            type(None): "null"}.get(type(value), type(value).__name__)
