"""Package requirements of a problem environment: a distribution name and version clauses, nothing else.

pip reads more than PEP 508 names: a string that looks like a path or an archive file name
(`foo-1.0.tar.gz`, `x.whl`, `./src`) is installed from that file, and an sdist's setup.py is run to
build it. `foo-1.0.tar.gz` is also a valid PEP 508 *name*, so a name check alone lets it through.
Here a requirement is parsed with `packaging.requirements.Requirement` and refused when it has a
URL, extras or markers, a path separator, or a name ending like an archive pip would open; what
remains is normalized (canonical name, sorted canonical clauses, clauses of one name merged) so
the same environment spelled differently is one build.
"""

from __future__ import annotations

from packaging.requirements import InvalidRequirement, Requirement
from packaging.specifiers import Specifier
from packaging.utils import canonicalize_name, canonicalize_version

MAX_LENGTH = 200
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
    if not spec or len(spec) > MAX_LENGTH:
        raise ValueError(f"must be 1 to {MAX_LENGTH} characters")
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
