"""Problem files: reading every format into `Problem`s, and writing the native one.

`load_problems` / `load_problems_bytes` read a `.jsonl` or `.jsonl.gz` file: bytes -> lines -> JSON
objects -> `Problem`s, one converter per format. Each format module exposes
`convert(obj: dict) -> Problem`, raising `ProblemError(field, message)` for a line it cannot use.
This module owns everything around that: gzip (by magic bytes), UTF-8 per line, JSON per line,
format detection, duplicate ids, and turning every failure into a `LoadError`.

Loading never raises on bad content: it returns the good problems plus one `LoadError` per bad line
(1-based line, field, message). Line 0 means the file as a whole (empty, not JSON Lines, a broken
gzip stream, ...). `dump_problems` writes problems back as native JSON Lines.
"""

from __future__ import annotations

import io
import json
import os
import zlib
from dataclasses import dataclass, field
from typing import IO, Any, Callable, Iterable, Iterator

from sandbox.problems import Environment, Problem, ProblemError, short

FORMATS = ("native", "humaneval", "mbpp", "apps", "codecontests")
"""The formats `load_problems` reads (`format=` takes one of these, or `auto`)."""

MAX_FILE_BYTES = 512 << 20
"""Cap on a file's size, compressed or not (a gzip bomb stops here)."""
MAX_LINE_BYTES = 64 << 20
"""Cap on one line (CodeContests lines with generated tests reach a few MiB)."""
MAX_ERRORS = 500
"""Errors kept per file; the rest are counted in one last error."""

GZIP_MAGIC = b"\x1f\x8b"


@dataclass
class LoadError:
    """One bad line of a problem file. `line` is 1-based; 0 means the whole file."""

    line: int
    field: str | None
    message: str

    def to_dict(self) -> dict:
        return {"line": self.line, "field": self.field, "message": self.message}

    def __str__(self) -> str:
        where = f"line {self.line}" if self.line else "file"
        return f"{where}: {self.field + ': ' if self.field else ''}{self.message}"


@dataclass
class LoadResult:
    """The good problems of a file, one error per bad line, and the format that was read."""

    problems: list[Problem] = field(default_factory=list)
    errors: list[LoadError] = field(default_factory=list)
    format: str = "native"
    limit: str | None = None
    """`bytes` or `lines` when the file was refused for crossing that bound (see `parse_stream`)."""
    environment: Environment | None = None
    """The set's own environment (a line `{"environment": {...}}`), given to each problem without one."""

    @property
    def ok(self) -> bool:
        return not self.errors


def load_problems(path_or_fileobj: "str | os.PathLike | IO[bytes]", format: str = "auto", *,
                  name: str | None = None) -> LoadResult:
    """Load a `.jsonl` or `.jsonl.gz` problem file (gzip recognised by its magic bytes).

    `format` is `auto` (detected from the keys of the first object) or one of FORMATS; `name` is
    only used in messages. A file that cannot be opened raises OSError; bad content never raises.
    """
    if isinstance(path_or_fileobj, (str, os.PathLike)):
        filename = name or os.fspath(path_or_fileobj)
        with open(path_or_fileobj, "rb") as f:
            return parse_stream(f, str(filename), format)
    filename = name or getattr(path_or_fileobj, "name", None) or "<upload>"
    return parse_stream(path_or_fileobj, str(filename), format)


def load_problems_bytes(data: bytes, filename: str = "<upload>", format: str = "auto") -> LoadResult:
    """Load problems from the raw bytes of an uploaded file (`filename` only for messages)."""
    return parse_stream(io.BytesIO(data), filename, format)


def dump_problems(problems: Iterable[Problem], fileobj: IO) -> int:
    """Write problems as native JSON Lines to a text or binary file object; returns the count."""
    count = 0
    for problem in problems:
        d = problem.to_dict()
        line = json.dumps(d, ensure_ascii=False) + "\n"
        try:
            line.encode("utf-8")
        except UnicodeEncodeError:  # lone surrogates (legal in JSON escapes): keep them escaped
            line = json.dumps(d, ensure_ascii=True) + "\n"
        try:
            fileobj.write(line)
        except TypeError:
            fileobj.write(line.encode("utf-8"))
        count += 1
    return count


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
               "reference_solution", "time_limit_s", "memory_limit_mb", "checker", "split", "tags",
               "environment", "excluded"},
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


READ_CHUNK = 1 << 20
"""Bytes read (and decompressed) at a time: memory stays near one chunk plus the longest line."""
PROGRESS_EVERY = 1000
"""Lines between two calls of `parse_stream`'s `progress` callback."""
MULTILINE_CHECK_BYTES = 1 << 20
"""Files up to this size are checked for "one JSON document over several lines" when nothing loaded."""


class _LimitExceeded(Exception):
    """A whole-file bound was crossed; the message says which."""


def parse_stream(fileobj: IO[bytes], filename: str = "<upload>", format: str = "auto", *,
                 max_bytes: int | None = None, max_lines: int | None = None,
                 progress: Callable[[int, int], None] | None = None) -> LoadResult:
    """Parse a problem file from a binary stream, reading it once, a chunk at a time.

    `max_bytes` bounds the (decompressed) text, `max_lines` the lines (blank ones too); both are
    checked as the stream is read, so a gzip bomb or a flood of tiny lines is refused after reading
    only up to the bound, and the whole file is then refused (a line-0 error, no problems; `limit`
    says which bound). `progress(lines, bytes)` is called every PROGRESS_EVERY lines and at the end.
    """
    max_bytes = MAX_FILE_BYTES if max_bytes is None else min(max_bytes, MAX_FILE_BYTES)
    if format != "auto" and format not in FORMATS:
        return LoadResult([], [LoadError(0, "format", f"{short(format)} is not one of auto, "
                                                      f"{', '.join(FORMATS)}")], "native")
    result = LoadResult([], [], format if format != "auto" else "native")
    first = fileobj.read(READ_CHUNK)
    gzipped = first[:2] == GZIP_MAGIC
    chunks = _gunzip_chunks(first, fileobj) if gzipped else _raw_chunks(first, fileobj)
    parser = _LineParser(result, format)
    head = bytearray()
    total = 0
    try:
        for chunk in chunks:
            if not total and chunk.startswith(b"\xef\xbb\xbf"):
                chunk = chunk[3:]
                total += 3
            checked = len(head) >= 4096
            if len(head) <= MULTILINE_CHECK_BYTES:
                head += chunk[:MULTILINE_CHECK_BYTES + 1 - len(head)]
            if not checked and len(head) >= 4096:  # binary data is refused before it is parsed
                whole = _whole_file_problem(bytes(head[:4096]))
                if whole:
                    return LoadResult([], [LoadError(0, None, f"{filename}: {whole}")], result.format)
            total += len(chunk)
            if total > max_bytes:
                what = "decompresses to" if gzipped else "is larger than"
                raise _LimitExceeded(f"{filename}: {what} more than {_mib(max_bytes)}", "bytes")
            parser.feed(chunk, max_lines, progress, total)
        parser.close(max_lines, progress, total)
        _apply_set_environment(result)
    except _LimitExceeded as e:
        message, which = e.args
        return LoadResult([], [LoadError(0, None, message)], result.format, limit=which)
    except (OSError, EOFError, zlib.error) as e:
        return LoadResult([], [LoadError(0, None, f"{filename}: broken gzip data: {e}")], result.format)
    whole = _whole_file_problem(bytes(head[:4096]))
    if whole:
        return LoadResult([], [LoadError(0, None, f"{filename}: {whole}")], result.format)
    if progress is not None:
        progress(parser.lineno, total)

    if not result.problems:
        if not parser.parsed_any and not result.errors:
            result.errors.append(LoadError(0, None, f"{filename}: file has no problems (it is empty "
                                                    "or only blank lines)"))
        elif len(head) <= MULTILINE_CHECK_BYTES and _is_multiline_json_document(bytes(head)):
            result.errors.insert(0, LoadError(0, None, f"{filename}: is one JSON document spread over "
                                                        "several lines, not JSON Lines; write one "
                                                        "problem object per line"))
    if parser.dropped:
        result.errors.append(LoadError(0, None, f"{parser.dropped} more errors not listed"))
    return result


def _apply_set_environment(result: LoadResult) -> None:
    """A problem's own environment wins; every other problem of the file gets the set's."""
    import dataclasses
    if result.environment is not None:
        result.problems = [p if p.environment is not None else dataclasses.replace(p, environment=result.environment)
                           for p in result.problems]


def _mib(n: int) -> str:
    return f"{n >> 20} MiB" if n >= 1 << 20 else f"{n} bytes"


class _LineParser:
    """Splits fed chunks into lines (never holding more than MAX_LINE_BYTES of one) and parses each."""

    def __init__(self, result: LoadResult, format: str):
        self.result = result
        self.convert_by_format = converters()
        self.fmt = None if format == "auto" else format
        self.seen_ids: dict[str, int] = {}
        self.dropped = 0
        self.parsed_any = False
        self.lineno = 0
        self.partial = bytearray()
        self.overlong = False  # the current line passed MAX_LINE_BYTES: skip to its end
        self.env_line = 0  # the line of the set's environment, once seen

    def feed(self, chunk: bytes, max_lines: int | None, progress, total: int) -> None:
        pieces = chunk.split(b"\n")
        for i, piece in enumerate(pieces):
            last = i == len(pieces) - 1
            if not self.overlong:
                self.partial += piece
                if len(self.partial) > MAX_LINE_BYTES:
                    self.overlong, self.partial = True, bytearray()
            if last:
                return  # the line goes on in the next chunk
            self._end_line(max_lines, progress, total)

    def close(self, max_lines: int | None, progress, total: int) -> None:
        if self.partial or self.overlong:
            self._end_line(max_lines, progress, total)

    def _end_line(self, max_lines: int | None, progress, total: int) -> None:
        self.lineno += 1
        if max_lines is not None and self.lineno > max_lines:
            raise _LimitExceeded(f"has more than {max_lines} lines (the limit)", "lines")
        if progress is not None and self.lineno % PROGRESS_EVERY == 0:
            progress(self.lineno, total)
        raw, overlong = bytes(self.partial), self.overlong
        self.partial, self.overlong = bytearray(), False
        if overlong:
            self.error(self.lineno, None, f"line is longer than {MAX_LINE_BYTES >> 20} MiB")
            return
        self._parse(self.lineno, raw.rstrip(b"\r"))

    def error(self, line: int, field: str | None, message: str) -> None:
        if len(self.result.errors) < MAX_ERRORS:
            self.result.errors.append(LoadError(line, field, message))
        else:
            self.dropped += 1

    def _parse(self, lineno: int, raw: bytes) -> None:
        if not raw.strip():
            return
        error = self.error
        obj, problem_text = _parse_line(raw)
        if problem_text:
            error(lineno, None, problem_text)
            return
        self.parsed_any = True
        if not isinstance(obj, dict):
            if isinstance(obj, list) and obj and all(isinstance(o, dict) for o in obj):
                error(lineno, None, f"this line is a JSON array of {len(obj)} objects; JSON Lines "
                                    "needs one problem object per line")
            else:
                error(lineno, None, f"expected a JSON object, got {_json_type(obj)}: {short(obj)}")
            return
        where = _lone_surrogate_key(obj)
        if where is not None:  # valid JSON ("\ud800"), but no text: nothing could store or print it
            error(lineno, where, "holds a lone surrogate escape such as \\ud800, which is not a character; "
                                 "write the text as UTF-8 (or escape both halves of a surrogate pair)")
            return
        if set(obj) == {"environment"}:  # the set's environment line, in any format
            self._set_environment(lineno, obj["environment"])
            return
        if self.fmt is None:
            self.fmt = detect_format(obj)
            if self.fmt is None:
                keys = ", ".join(short(k, 30) for k in list(obj)[:12]) or "none"
                error(lineno, None, f"cannot tell the format from this object's keys ({keys}); "
                                    f"choose the format explicitly (one of {', '.join(FORMATS)})")
                return
            self.result.format = self.fmt
        fmt = self.fmt
        try:
            problem = self.convert_by_format[fmt](obj)
        except ProblemError as e:
            error(lineno, e.field, e.message)
            return
        except RecursionError:
            error(lineno, None, "too deeply nested")
            return
        except Exception as e:  # a converter bug must cost one line, never the whole upload
            error(lineno, None, f"cannot read this {fmt} object: {type(e).__name__}: {short(str(e))}")
            return
        if problem.id in self.seen_ids:
            error(lineno, "id", f"duplicate id {short(problem.id)} (first on line {self.seen_ids[problem.id]})")
            return
        self.seen_ids[problem.id] = lineno
        self.result.problems.append(problem)


    def _set_environment(self, lineno: int, value) -> None:
        if self.result.environment is not None:
            self.error(lineno, "environment", f"a second set environment line (the first is line "
                                              f"{self.env_line}); merge them into one")
            return
        try:
            self.result.environment = Environment.from_dict(value)
            self.env_line = lineno
        except ProblemError as e:
            self.error(lineno, e.field, e.message)


def _lone_surrogate_key(obj: dict) -> str | None:
    """The top-level key under which ``obj`` holds a string (or a key) with a lone surrogate, else None."""
    for key, value in obj.items():
        stack = [key, value]
        while stack:
            item = stack.pop()
            if isinstance(item, str):
                if not _is_text(item):
                    return key if _is_text(key) else "key"
            elif isinstance(item, dict):
                stack.extend(item.keys())
                stack.extend(item.values())
            elif isinstance(item, list):
                stack.extend(item)
    return None


def _is_text(value: str) -> bool:
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def _raw_chunks(first: bytes, fileobj: IO[bytes]) -> Iterator[bytes]:
    chunk = first
    while chunk:
        if isinstance(chunk, str):
            chunk = chunk.encode("utf-8", "surrogatepass")
        yield chunk
        chunk = fileobj.read(READ_CHUNK)


def _gunzip_chunks(first: bytes, fileobj: IO[bytes]) -> Iterator[bytes]:
    """Decompressed chunks of every gzip member, each at most READ_CHUNK (a bomb never balloons)."""
    decomp = zlib.decompressobj(16 + zlib.MAX_WBITS)
    for raw in _raw_chunks(first, fileobj):
        rest = raw
        while rest:
            out = decomp.decompress(rest, READ_CHUNK)
            if out:
                yield out
            if decomp.unconsumed_tail:
                rest = decomp.unconsumed_tail
                continue
            if decomp.eof:
                rest = decomp.unused_data
                if rest[:2] == GZIP_MAGIC:  # concatenated gzip members
                    decomp = zlib.decompressobj(16 + zlib.MAX_WBITS)
                    continue
                if rest:
                    return  # trailing garbage after the stream is ignored, as gzip(1) does
                break
            rest = b""
    if not decomp.eof:
        raise EOFError("compressed stream ends early (truncated file?)")


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
