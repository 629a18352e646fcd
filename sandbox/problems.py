"""Problems: the `Problem` dataclass, its validation and its native JSON form (one object).

A problem is either `function` (call-based: each test a statement, usually an `assert`, run in the
candidate's namespace) or `stdio` (each test case a process fed `input`, its output compared by
`checker`). See docs/design.md "Problems (sandbox/)" for the native JSON Lines format.

This module imports nothing else of the sandbox. Files (reading every format, writing the native
one) belong to `sandbox.formats`: `load_problems`, `load_problems_bytes`, `dump_problems`.
"""

from __future__ import annotations

import ast
import keyword
import math
from collections.abc import Iterable, Iterator
from dataclasses import asdict, dataclass
from typing import Any

from packaging.requirements import InvalidRequirement, Requirement
from packaging.specifiers import Specifier
from packaging.utils import canonicalize_name, canonicalize_version

KINDS = ("function", "stdio")
SPLITS = ("train", "heldout")

MAX_TIME_LIMIT_S = 60.0
"""Upper bound for `time_limit_s`: a training step runs hundreds of candidates."""
MIN_MEMORY_LIMIT_MB = 16
MAX_MEMORY_LIMIT_MB = 16384
MAX_ID_LENGTH = 256


class ProblemError(ValueError):
    """A problem field has a bad value. `field` names it (`tests[2]`, `test_cases[0].input`)."""

    def __init__(self, field: str | None, message: str):
        self.field = field
        self.message = message
        super().__init__(f"{field}: {message}" if field else message)


def short(value: Any, limit: int = 80) -> str:
    """repr() of a value, cut to `limit` characters, for error messages about hostile input."""
    try:
        text = repr(value)
    except Exception:  # a repr that raises must not turn an error message into a crash
        text = f"<{type(value).__name__}>"
    if len(text) > limit:
        text = text[: limit - 15] + f"... ({len(text)} chars)"
    return text


def type_name(value: Any) -> str:
    """A JSON-ish name for a value's type (`object`, `list`, `string`...), for error messages."""
    return {dict: "object", list: "list", str: "string", bool: "boolean", type(None): "null",
            int: "integer", float: "number"}.get(type(value), type(value).__name__)


def named_calls(tests: Iterable[str]) -> Iterator[ast.Call]:
    """Each call of a plain name (``f(...)``, not ``obj.f(...)``) in the tests, test by test in ``ast.walk``
    order; a test that does not parse is passed over."""
    for test in tests:
        try:
            tree = ast.parse(test)
        except (SyntaxError, ValueError, RecursionError, MemoryError):
            continue
        for node in ast.walk(tree):
            if isinstance(node, ast.Call) and isinstance(node.func, ast.Name):
                yield node


def validate_checker(checker: Any) -> str:
    """Return `checker` if it is `exact`, `tokens` or `float:EPS` (EPS a positive finite number)."""
    if not isinstance(checker, str):
        raise ProblemError("checker", f"must be a string, got {type_name(checker)}")
    if checker in ("exact", "tokens"):
        return checker
    if checker.startswith("float:"):
        try:
            eps = float(checker[len("float:"):])
        except ValueError:
            eps = float("nan")
        if math.isfinite(eps) and eps > 0:
            return checker
        raise ProblemError("checker", f"{short(checker)}: EPS in float:EPS must be a positive "
                                      "number, e.g. float:1e-6")
    raise ProblemError("checker", f"{short(checker)} is not one of exact, tokens, float:EPS")


@dataclass(frozen=True)
class TestCase:
    """One stdio case: the program gets `input` on stdin; its stdout is compared with `output`."""

    __test__ = False  # not a pytest test class

    input: str
    output: str

    def __post_init__(self) -> None:
        for name in ("input", "output"):
            value = getattr(self, name)
            if not isinstance(value, str):
                raise ProblemError(name, f"must be a string, got {type_name(value)}")

    def to_dict(self) -> dict:
        return {"input": self.input, "output": self.output}


# Package requirements of an environment: a distribution name and version clauses, nothing else.
# pip reads more than PEP 508 names: a string that looks like a path or an archive file name
# (`foo-1.0.tar.gz`, `x.whl`, `./src`) is installed from that file, and an sdist's setup.py runs to
# build it. `foo-1.0.tar.gz` is also a valid PEP 508 *name*, so a name check alone lets it through.
# A requirement is parsed by `packaging` and refused when it has a URL, extras or markers, a path
# separator, or a name ending like an archive pip would open; what remains is normalized
# (canonical name, sorted canonical clauses, clauses of one name merged) so the same environment
# spelled differently is one build.
MAX_REQUIREMENT_LENGTH = 200
"""Longest requirement string accepted."""
# Every suffix pip's `is_archive_file` treats as a local archive, and eggs.
FILE_SUFFIXES = (".whl", ".zip", ".tar.gz", ".tgz", ".tar.bz2", ".tbz", ".tar.xz", ".txz", ".tlz", ".tar.lz",
                 ".tar.lzma", ".tar", ".egg")
EXAMPLES = "numpy, numpy==2.*, pandas>=2,<3"


def _clause(spec: Specifier) -> str:
    """One version clause in canonical form: `>=1.0` and `>=1` are the same clause (PEP 440 pads
    with zeros). `~=` (whose length is its meaning) and `===` (a string match) stay as written."""
    if spec.operator in ("~=", "===") or spec.version.endswith(".*"):
        return f"{spec.operator}{spec.version}"
    return f"{spec.operator}{canonicalize_version(spec.version)}"


def parse_requirement(text: object) -> tuple[str, frozenset[str]]:
    """`(canonical name, canonical clauses)` of one requirement; ValueError saying what is wrong."""
    if not isinstance(text, str):
        raise ValueError(f"must be a string such as {EXAMPLES}")
    spec = text.strip()
    if not spec or len(spec) > MAX_REQUIREMENT_LENGTH:
        raise ValueError(f"must be 1 to {MAX_REQUIREMENT_LENGTH} characters")
    if "/" in spec or "\\" in spec:
        raise ValueError("is a path or URL; name a package from the index, e.g. " + EXAMPLES)
    try:
        req = Requirement(spec)
    except InvalidRequirement as e:
        raise ValueError(f"is not a requirement like {EXAMPLES} ({str(e).splitlines()[0][:120]})") from None
    if req.url:
        raise ValueError("has a URL; name a package from the index, e.g. " + EXAMPLES)
    if req.marker is not None:
        raise ValueError("has an environment marker (`; ...`); give the name and versions only")
    if req.extras:
        raise ValueError("has extras (`[...]`); list the packages the extra would bring instead")
    if req.name.lower().endswith(FILE_SUFFIXES) or req.name.startswith("."):
        raise ValueError("looks like a file name (pip would install that file); name a package from the index, "
                         "e.g. " + EXAMPLES)
    return canonicalize_name(req.name), frozenset(_clause(s) for s in req.specifier)


def normalize_requirements(texts) -> tuple[str, ...]:
    """The requirements as pip receives them: canonical, clauses of one name merged, sorted by name.
    ValueError `(index, message)` for the first bad one."""
    by_name: dict[str, set[str]] = {}
    for i, text in enumerate(texts):
        try:
            name, clauses = parse_requirement(text)
        except ValueError as e:
            raise ValueError(i, str(e)) from None
        by_name.setdefault(name, set()).update(clauses)
    return tuple(name + ",".join(sorted(by_name[name])) for name in sorted(by_name))


MAX_PACKAGES = 64
"""Most requirements in one environment."""


@dataclass(frozen=True)
class Environment:
    """What a problem's candidates run with beyond the standard library (built by sandbox.environments)."""

    python_packages: tuple[str, ...] = ()
    """Requirements as given (`numpy==2.*`, `pandas>=2,<3`): a name and version clauses only
    (`parse_requirement` says what is refused); `requirements()` is their normalized form."""

    def __post_init__(self) -> None:
        if isinstance(self.python_packages, list):
            object.__setattr__(self, "python_packages", tuple(self.python_packages))
        if not isinstance(self.python_packages, tuple):
            raise ProblemError("environment.python_packages", 'must be a list of requirement strings such as '
                                                              '["numpy==2.*"]')
        if len(self.python_packages) > MAX_PACKAGES:
            raise ProblemError("environment.python_packages", f"{len(self.python_packages)} packages; at most "
                                                              f"{MAX_PACKAGES}")
        try:
            normalize_requirements(self.python_packages)
        except ValueError as e:
            i, why = e.args
            raise ProblemError(f"environment.python_packages[{i}]", f"{short(self.python_packages[i])} {why}") from None

    def requirements(self) -> tuple[str, ...]:
        """The packages in normalized form (canonical names, merged sorted clauses, sorted by name): what
        pip installs and what an environment's build is keyed by, so `NumPy>=1.0` and `numpy>=1` are one."""
        return normalize_requirements(self.python_packages)

    def to_dict(self) -> dict:
        return {"python_packages": list(self.python_packages)}

    @classmethod
    def from_dict(cls, d: Any) -> "Environment":
        if not isinstance(d, dict):
            raise ProblemError("environment", f'must be an object such as {{"python_packages": ["numpy"]}}, '
                                              f"got {type_name(d)}")
        unknown = [k for k in d if k != "python_packages"]
        if unknown:
            raise ProblemError(f"environment.{str(unknown[0])[:80]}", "unknown field; valid: python_packages")
        packages = d.get("python_packages") or []
        if not isinstance(packages, list):
            raise ProblemError("environment.python_packages", f"must be a list of requirement strings, got "
                                                              f"{type_name(packages)}")
        return cls(tuple(packages))

    def describe(self) -> str:
        """The packages for messages (`numpy==2.*, scipy`), or `the standard library only`."""
        return ", ".join(self.python_packages) or "the standard library only"


_FIELDS = ("id", "kind", "prompt", "entry_point", "tests", "test_cases", "setup",
           "reference_solution", "time_limit_s", "memory_limit_mb", "checker", "split", "tags", "environment",
           "excluded")


@dataclass(frozen=True)
class Problem:
    """One programming problem, validated on construction (raises `ProblemError`)."""

    id: str
    """Unique within a problem set; kept from the source (`HumanEval/0`, `mbpp/2`, `apps/17`)."""
    kind: str
    """`function` (call-based tests) or `stdio` (stdin/stdout test cases)."""
    prompt: str = ""
    """What the model sees; with completion-style prompting the candidate is `prompt + completion`."""
    entry_point: str | None = None
    """function: the name (function, or class such as APPS' `Solution`) the tests call."""
    tests: tuple[str, ...] = ()
    """function: statements, usually asserts; each one is one test."""
    test_cases: tuple[TestCase, ...] = ()
    """stdio: input/expected-output pairs; each one is one test."""
    setup: str = ""
    """function: code run after the candidate and before the tests, in the tests' namespace."""
    reference_solution: str | None = None
    """A whole program that passes every test (checked by `python -m sandbox check`)."""
    time_limit_s: float = 2.0
    """Wall-clock and CPU-time limit of one execution."""
    memory_limit_mb: int = 256
    """Memory limit of one execution."""
    checker: str = "tokens"
    """stdio output comparison: `exact`, `tokens` (whitespace-insensitive) or `float:EPS`."""
    split: str = "train"
    """`train` or `heldout` (never trained on; used for before/after evaluation)."""
    tags: tuple[str, ...] = ()
    """Free-form labels (difficulty, source, topic)."""
    environment: Environment | None = None
    """Python packages the candidates need (null: the standard library only)."""
    excluded: bool = False
    """Kept in the set but left out of runs and probes (the web app's **Exclude**, carried through its export
    so a re-upload keeps it out); `python -m sandbox check` checks it without counting it."""

    def __post_init__(self) -> None:
        # Lists are accepted for convenience and frozen into tuples so problems stay hashable.
        if isinstance(self.tests, list):
            object.__setattr__(self, "tests", tuple(self.tests))
        if isinstance(self.tags, list):
            object.__setattr__(self, "tags", tuple(self.tags))
        if isinstance(self.test_cases, list):
            cases = []
            for i, case in enumerate(self.test_cases):
                if isinstance(case, dict):
                    case = _test_case_from_dict(case, f"test_cases[{i}]")
                cases.append(case)
            object.__setattr__(self, "test_cases", tuple(cases))
        if isinstance(self.time_limit_s, int) and not isinstance(self.time_limit_s, bool):
            object.__setattr__(self, "time_limit_s", float(self.time_limit_s))
        if isinstance(self.environment, dict):
            object.__setattr__(self, "environment", Environment.from_dict(self.environment))
        self._validate()

    def _validate(self) -> None:
        _check_id(self.id)
        if self.kind not in KINDS:
            raise ProblemError("kind", f"{short(self.kind)} is not one of function, stdio")
        _check_str("prompt", self.prompt)
        _check_str("setup", self.setup)
        if self.reference_solution is not None:
            _check_str("reference_solution", self.reference_solution)
        _check_str_tuple("tests", self.tests)
        _check_str_tuple("tags", self.tags)
        if not isinstance(self.test_cases, tuple):
            raise ProblemError("test_cases", f"must be a list, got {type_name(self.test_cases)}")
        for i, case in enumerate(self.test_cases):
            if not isinstance(case, TestCase):
                raise ProblemError(f"test_cases[{i}]", "must be an object with input and output")
        if self.kind == "function":
            if self.entry_point is None:
                raise ProblemError("entry_point", "is required for kind function")
            if not self.tests:
                raise ProblemError("tests", "a function problem needs at least one test")
            if self.test_cases:
                raise ProblemError("test_cases", "is for kind stdio; a function problem uses tests")
            for i, test in enumerate(self.tests):
                if not test.strip():
                    raise ProblemError(f"tests[{i}]", "is empty")
                _check_compiles(f"tests[{i}]", test)
            if self.setup:
                _check_compiles("setup", self.setup)
        else:
            if not self.test_cases:
                raise ProblemError("test_cases", "a stdio problem needs at least one test case")
            if self.tests:
                raise ProblemError("tests", "is for kind function; a stdio problem uses test_cases")
            if self.setup:
                raise ProblemError("setup", "is for kind function; a stdio problem has no setup")
        if self.entry_point is not None:
            if not isinstance(self.entry_point, str) or not self.entry_point.isidentifier() \
                    or keyword.iskeyword(self.entry_point):
                raise ProblemError("entry_point", f"{short(self.entry_point)} is not a Python name")
        t = self.time_limit_s
        if isinstance(t, bool) or not isinstance(t, (int, float)) or not math.isfinite(t) \
                or not 0 < t <= MAX_TIME_LIMIT_S:
            raise ProblemError("time_limit_s", f"{short(t)} must be a number in (0, {MAX_TIME_LIMIT_S:g}]")
        m = self.memory_limit_mb
        if isinstance(m, bool) or not isinstance(m, int) \
                or not MIN_MEMORY_LIMIT_MB <= m <= MAX_MEMORY_LIMIT_MB:
            raise ProblemError("memory_limit_mb", f"{short(m)} must be an integer in "
                                                  f"[{MIN_MEMORY_LIMIT_MB}, {MAX_MEMORY_LIMIT_MB}]")
        validate_checker(self.checker)
        if self.environment is not None and not isinstance(self.environment, Environment):
            raise ProblemError("environment", f'must be an object such as {{"python_packages": ["numpy"]}}, '
                                              f"got {type_name(self.environment)}")
        if self.split not in SPLITS:
            raise ProblemError("split", f"{short(self.split)} is not one of train, heldout")
        if not isinstance(self.excluded, bool):
            raise ProblemError("excluded", f"{short(self.excluded)} must be true or false, got "
                                           f"{type_name(self.excluded)}")

    def to_dict(self) -> dict:
        """The native JSON form (field names of docs/design.md "Problems (sandbox/)"); fields of the other
        kind are left out."""
        d = asdict(self)
        if self.environment is None:
            del d["environment"]  # the native form of a problem without one is unchanged
        else:
            d["environment"] = self.environment.to_dict()
        if not self.excluded:
            del d["excluded"]  # likewise: only an excluded problem says so
        d["tests"] = list(self.tests)
        d["tags"] = list(self.tags)
        d["test_cases"] = [case.to_dict() for case in self.test_cases]
        if self.kind == "stdio":
            for name in ("entry_point", "tests", "setup"):
                if not d[name]:
                    del d[name]
        else:
            del d["test_cases"]
        return {name: d[name] for name in _FIELDS if name in d}

    @classmethod
    def from_dict(cls, d: Any) -> "Problem":
        """Build a problem from its native JSON form; unknown keys and bad values raise ProblemError."""
        if not isinstance(d, dict):
            raise ProblemError(None, f"a problem must be a JSON object, got {type_name(d)}")
        unknown = [k for k in d if k not in _FIELDS]
        if unknown:
            key = unknown[0]
            hint = _close_field(key)
            raise ProblemError(str(key)[:80], "unknown field" + (f" (did you mean {hint!r}?)" if hint
                               else f"; valid fields: {', '.join(_FIELDS)}"))
        for name in ("id", "kind"):
            if name not in d:
                raise ProblemError(name, "is required")
        kwargs: dict[str, Any] = {}
        for name, value in d.items():
            if value is None and name not in ("id", "kind"):
                continue  # null in an optional field means "use the default"
            if name in ("tests", "tags"):
                if not isinstance(value, list):
                    raise ProblemError(name, f"must be a list of strings, got {type_name(value)}")
                value = tuple(value)
            elif name == "test_cases":
                if not isinstance(value, list):
                    raise ProblemError(name, f"must be a list of objects, got {type_name(value)}")
                value = tuple(_test_case_from_dict(c, f"test_cases[{i}]") for i, c in enumerate(value))
            elif name == "time_limit_s" and isinstance(value, int) and not isinstance(value, bool):
                value = float(value)
            elif name == "memory_limit_mb" and isinstance(value, float) and value.is_integer():
                value = int(value)
            elif name == "environment":
                try:
                    value = Environment.from_dict(value)
                except ProblemError as e:  # named by its problem: a set's file may hold many environments
                    raise ProblemError(e.field, f"problem {short(d['id'])}: {e.message}") from None
            kwargs[name] = value
        return cls(**kwargs)


def _close_field(key: Any) -> str | None:
    import difflib
    matches = difflib.get_close_matches(str(key)[:80], _FIELDS, n=1, cutoff=0.7)
    return matches[0] if matches else None


def _test_case_from_dict(d: Any, where: str) -> TestCase:
    if not isinstance(d, dict):
        raise ProblemError(where, f"must be an object with input and output, got {type_name(d)}")
    for name in ("input", "output"):
        if name not in d:
            raise ProblemError(f"{where}.{name}", "is required")
        if not isinstance(d[name], str):
            raise ProblemError(f"{where}.{name}", f"must be a string, got {type_name(d[name])}")
    extra = [k for k in d if k not in ("input", "output")]
    if extra:
        raise ProblemError(f"{where}.{str(extra[0])[:80]}", "unknown field; a test case has input and output")
    return TestCase(d["input"], d["output"])


def _check_id(value: Any) -> None:
    if not isinstance(value, str):
        raise ProblemError("id", f"must be a string, got {type_name(value)} {short(value)}")
    if not value.strip():
        raise ProblemError("id", "must not be empty")
    if len(value) > MAX_ID_LENGTH:
        raise ProblemError("id", f"{short(value)} is longer than {MAX_ID_LENGTH} characters")
    if any(ord(c) < 32 or ord(c) == 127 for c in value):
        raise ProblemError("id", f"{short(value)} contains control characters")


def _check_str(name: str, value: Any) -> None:
    if not isinstance(value, str):
        raise ProblemError(name, f"must be a string, got {type_name(value)} {short(value)}")


def _check_str_tuple(name: str, value: Any) -> None:
    if not isinstance(value, tuple):
        raise ProblemError(name, f"must be a list of strings, got {type_name(value)}")
    for i, item in enumerate(value):
        if not isinstance(item, str):
            raise ProblemError(f"{name}[{i}]", f"must be a string, got {type_name(item)} {short(item)}")


def _check_compiles(name: str, source: str) -> None:
    try:
        compile(source, f"<{name}>", "exec", dont_inherit=True)
    except SyntaxError as e:
        raise ProblemError(name, f"does not compile: {e.msg} (line {e.lineno}): {short(source)}") from None
    except (ValueError, RecursionError, MemoryError) as e:
        raise ProblemError(name, f"does not compile: {type(e).__name__}: {short(str(e))}") from None
