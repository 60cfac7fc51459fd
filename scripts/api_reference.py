"""Write the Python API reference pages (``docs/reference/*.md``) from the docstrings.

Run ``make api-docs`` (``python -m scripts.api_reference``) after changing a public name or its
docstring; ``tests/unit/test_api_reference.py`` fails while a page is stale. ``--check`` exits 1
instead of writing when a page differs.

A page is prose with generated regions. A region starts with a marker naming what it documents,
``<!-- ::: pgqueue.PgQueue -->`` (a module may add ``members=a,b,c``: those of its names, in
that order), and ends with ``<!-- /::: -->``; everything between is rewritten: the name's
signature, its docstring (reST roles and literals turned into Markdown) and its public members.
The pages read the same on GitHub and in the built site (``make docs``).
"""

from __future__ import annotations

import dataclasses
import importlib
import inspect
import re
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from types import ModuleType
from typing import Annotated, Any, get_args, get_origin, get_overloads, is_typeddict

ROOT = Path(__file__).resolve().parent.parent
PAGES = [ROOT / "docs" / "reference" / name for name in ("api.md", "django.md", "alembic.md")]
COMMAND = "make api-docs"

START = re.compile(r"^<!-- ::: (?P<name>[\w.]+)(?: members=(?P<members>[\w,]+))? -->$")
END = "<!-- /::: -->"
# :class:`~pgqueue.Task` -> `Task`; :meth:`pgqueue.PgQueue.result` -> `pgqueue.PgQueue.result`
ROLE = re.compile(r":[a-z]+:`(?P<tilde>~?)(?P<target>[^`]+)`")
# Reprs that differ from run to run (an object's address) must not make a page stale.
ADDRESS = re.compile(r" at 0x[0-9a-f]+")


def resolve(name: str) -> Any:
    """The object a dotted name names: the longest importable module, then attributes."""
    parts = name.split(".")
    for cut in range(len(parts), 0, -1):
        try:
            value: Any = importlib.import_module(".".join(parts[:cut]))
        except ImportError:
            continue
        for attribute in parts[cut:]:
            value = getattr(value, attribute)
        return value
    raise LookupError(f"{name}: nothing to document under that name")


def markdown(doc: str | None) -> str:
    """A docstring as Markdown: ``literal`` -> `literal`, roles -> `name`, ``text::`` -> ``text:``
    (its indented block stays indented: a code block in Markdown too)."""
    if not doc:
        return ""
    text = inspect.cleandoc(doc)
    text = ROLE.sub(
        lambda m: f"`{m['target'].rsplit('.', 1)[-1] if m['tilde'] else m['target']}`", text
    )
    text = text.replace("``", "`")
    text = re.sub(r"(?m)(\S)::$", r"\1:", text)
    text = re.sub(r"(?m)^::$\n?", "", text)
    return text.strip()


def annotation_text(annotation: object) -> str:
    """An annotation as a reader writes it: a string as is; a typing object without its
    ``Annotated`` checks and module prefixes (``typing.``, ``collections.abc.``)."""
    if isinstance(annotation, str):
        return annotation
    if get_origin(annotation) is Annotated:
        annotation = get_args(annotation)[0]
    text = inspect.formatannotation(annotation)
    return ADDRESS.sub("", re.sub(r"\b(typing|collections\.abc|datetime)\.", "", text))


class _Raw:
    """An annotation written as in the source (``from __future__ import annotations`` keeps
    them as strings, which a signature would show quoted)."""

    def __init__(self, text: object) -> None:
        self.text = annotation_text(text)

    def __repr__(self) -> str:
        return str(self.text)


def signature(
    name: str, value: Any, *, drop_self: bool = False, constructor: bool = False
) -> str | None:
    """``name(params) -> result``, one parameter a line when it would be long; None for a type
    alias (``JobHook = Callable[...]``: Python 3.13 gives it a ``(*args, **kwargs)`` signature,
    3.12 none)."""
    if get_origin(value) is not None:
        return None
    try:
        sig = inspect.signature(value)
    except (TypeError, ValueError):
        return None
    empty = inspect.Parameter.empty
    params = [
        p if p.annotation is empty else p.replace(annotation=_Raw(p.annotation))
        for p in sig.parameters.values()
    ]
    if drop_self and params and params[0].name in ("self", "cls"):
        params = params[1:]
    parts: list[str] = []
    star_done = False
    for index, param in enumerate(params):
        if param.kind is param.VAR_POSITIONAL:
            star_done = True
        elif param.kind is param.KEYWORD_ONLY and not star_done:
            parts.append("*")
            star_done = True
        parts.append(str(param))
        following = params[index + 1] if index + 1 < len(params) else None
        if param.kind is param.POSITIONAL_ONLY and (
            following is None or following.kind is not param.POSITIONAL_ONLY
        ):
            parts.append("/")
    result = (
        ""
        if constructor or sig.return_annotation is empty
        else f" -> {_Raw(sig.return_annotation)}"
    )
    line = f"{name}({', '.join(parts)}){result}"
    if len(line) > 88 and parts:
        inner = "".join(f"\n    {part}," for part in parts)
        line = f"{name}({inner}\n){result}"
    return ADDRESS.sub("", line)


def code(text: str) -> str:
    return f"```text\n{text}\n```"


def anchor(name: str) -> str:
    return f'<a id="{name}"></a>'


def own_classes(cls: type) -> list[type]:
    """The class and its bases that are pgqueue's (whose members are documented with it)."""
    return [c for c in cls.__mro__ if c.__module__.startswith("pgqueue")]


def members_of(cls: type) -> Iterator[tuple[str, Any]]:
    """A class's public methods and properties (its own, then inherited pgqueue ones)."""
    seen: set[str] = set()
    for owner in own_classes(cls):
        for key, found in vars(owner).items():
            if key.startswith("_") or key in seen:
                continue
            value = found.__func__ if isinstance(found, (staticmethod, classmethod)) else found
            if inspect.isfunction(value) or isinstance(value, property):
                seen.add(key)
                yield key, value


def fields_of(cls: type) -> list[tuple[str, str]]:
    """Annotated attributes (TypedDict keys, dataclass and named-tuple fields)."""
    found: dict[str, str] = {}
    for owner in reversed(own_classes(cls)):
        for key, annotation in vars(owner).get("__annotations__", {}).items():
            if not key.startswith("_") and "ClassVar" not in str(annotation):
                found[key] = annotation_text(annotation)
    return list(found.items())


def render_object(name: str, value: Any, level: int, members: list[str] | None) -> list[str]:
    short = name.rsplit(".", 1)[-1]
    out = [anchor(name), "", f"{'#' * level} `{name}`", ""]
    if inspect.ismodule(value):
        return out + render_module(name, value, level, members)
    if inspect.isclass(value):
        kind = "TypedDict" if is_typeddict(value) else "class"
        shown = None if kind == "TypedDict" else signature(short, value, constructor=True)
        out += [code(f"{kind} {shown or short}"), ""]
        doc = markdown(value.__doc__)
        if doc:
            out += [doc, ""]
        fields = fields_of(value)
        if fields and (is_typeddict(value) or dataclasses.is_dataclass(value)):
            out += [f"- `{key}`: `{annotation}`" for key, annotation in fields] + [""]
        for key, member in members_of(value):
            out += render_member(f"{name}.{key}", f"{short}.{key}", member, level + 1)
        return out
    if callable(value):
        shown = signature(short, value)
        if shown:
            out += [code(shown), ""]
        doc = markdown(value.__doc__)
        return out + ([doc, ""] if doc else [])
    # A plain value (a version string, a sentinel): its type, not its value (which changes).
    value_type = type(value)
    out += [f"A `{value_type.__name__}`."]
    if value_type.__module__.startswith("pgqueue") and value_type.__doc__:
        out += ["", markdown(value_type.__doc__)]
    return [*out, ""]


def render_member(name: str, short: str, member: Any, level: int) -> list[str]:
    out = [anchor(name), "", f"{'#' * level} `{short}`", ""]
    if isinstance(member, property):
        out += ["A property.", ""]
        doc = markdown(member.__doc__)
    else:
        prefix = "async def " if inspect.iscoroutinefunction(member) else "def "
        # An overloaded method shows its overloads: they are its precise types.
        forms = get_overloads(member) or [member]
        shown = [text for form in forms if (text := signature(short, form, drop_self=True))]
        if shown:
            out += [code("\n".join(prefix + text for text in shown)), ""]
        doc = markdown(member.__doc__)
    return out + ([doc, ""] if doc else [])


def render_module(
    name: str, module: ModuleType, level: int, members: list[str] | None
) -> list[str]:
    out: list[str] = []
    if members is None:
        doc = markdown(module.__doc__)
        if doc:
            out += [doc, ""]
        public = getattr(module, "__all__", None) or [
            key
            for key, value in vars(module).items()
            if not key.startswith("_")
            and getattr(value, "__module__", None) == module.__name__
            and (inspect.isclass(value) or inspect.isfunction(value))
        ]
        members = list(public)
    for key in members:
        out += render_object(f"{name}.{key}", getattr(module, key), level + 1, None)
    return out


def render(text: str, keep: Callable[[str], bool] = lambda name: False) -> str:
    """The page with every generated region rewritten, but those whose name ``keep`` says to
    leave as they are (a module this Python cannot import: ``django.tasks`` needs Django 6)."""
    lines = text.split("\n")
    out: list[str] = []
    section = 1  # the level of the prose heading a region is under
    fenced = False
    i = 0
    while i < len(lines):
        match = START.match(lines[i])
        fenced ^= lines[i].startswith("```")
        if not fenced and (heading := re.match(r"^(#+) ", lines[i])):
            section = len(heading[1])
        out.append(lines[i])
        i += 1
        if not match:
            continue
        start = i
        while i < len(lines) and lines[i] != END:
            i += 1
        if i == len(lines):
            raise ValueError(f"{match['name']}: its region has no end marker ({END})")
        if keep(match["name"]):
            out += [*lines[start:i], END]
            i += 1
            continue
        members = match["members"].split(",") if match["members"] else None
        level = min(section + 1, 6)
        body = render_object(match["name"], resolve(match["name"]), level, members)
        out += ["", *body, END]
        i += 1
    return "\n".join(out)


def main(argv: list[str]) -> int:
    stale = []
    for page in PAGES:
        current = page.read_text()
        fresh = render(current)
        if fresh != current:
            stale.append(page.relative_to(ROOT))
            if "--check" not in argv:
                page.write_text(fresh)
    if stale and "--check" in argv:
        print(f"stale: {', '.join(map(str, stale))}; regenerate with `{COMMAND}`", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
