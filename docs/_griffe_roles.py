"""A griffe extension for ``nox -s docs``: the docstrings' Sphinx roles become links on the site.

packrt's docstrings cross-reference with Sphinx roles (``:class:`Tensor```, ``:func:`~packrt_io.load```,
``:meth:`Module.forward```) because that is what pydoc readers, IDEs and Sphinx users read. mkdocstrings
renders Markdown, where a role is literal text, so the site would show the raw role. This extension
rewrites each role before rendering: the name is resolved the way Python would see it from the
documented object (its members, its module's names and imports, then its parents), and becomes an
optional autorefs reference: a link where the site renders that object, plain code where it does not
(a private helper, numpy's ``ndarray``), never raw markup. ``docs/_hooks.py`` fails the build if a role
survives anywhere in the built HTML.

Sphinx's display rules are kept: ``~a.b.c`` shows ``c``, a leading ``.`` is dropped, and an explicit
title ``:func:`the loader <packrt_io.load>``` shows the title.
"""

from __future__ import annotations

import re
from html import escape
from typing import Any

import griffe

# A role as Sphinx writes it: :class:`Name`, :py:meth:`~a.b`, :func:`title <target>`.
ROLE = re.compile(r":(?:py:)?(?P<role>class|func|meth|mod|data|attr|exc|obj|const|type):`(?P<body>[^`]+)`")
_TITLED = re.compile(r"^(?P<title>.+?)\s*<(?P<target>[^<>]+)>$")


def _split(body: str) -> tuple[str, str]:
    """The (target, shown text) of a role's body, by Sphinx's rules."""
    if titled := _TITLED.match(body):
        return titled["target"].strip().lstrip(".~"), titled["title"]
    short = body.startswith("~")
    target = body.lstrip("~").lstrip(".")
    return target, target.rsplit(".", 1)[-1] if short else target


def _resolve(obj: griffe.Object, target: str) -> str:
    """The full path ``target`` names when read from ``obj``'s scope; the target itself when nothing resolves."""
    head, _, rest = target.partition(".")
    scope: griffe.Object | None = obj
    while scope is not None:
        try:
            found = scope.resolve(head)
        except (griffe.NameResolutionError, KeyError, AttributeError):
            scope = scope.parent
            continue
        return f"{found}.{rest}" if rest else found
    return target


def _rewrite(obj: griffe.Object, text: str) -> str:
    def link(match: re.Match[str]) -> str:
        target, shown = _split(match["body"])
        if match["role"] in {"func", "meth"} and not shown.endswith(")"):
            shown += "()"  # Sphinx's default: a callable is shown called
        identifier = escape(_resolve(obj, target))
        return f'<autoref identifier="{identifier}" optional><code>{escape(shown)}</code></autoref>'

    return ROLE.sub(link, text)


class SphinxRoles(griffe.Extension):
    """Turn every Sphinx role in a docstring into an optional autorefs reference (see the module docstring)."""

    def on_package(self, *, pkg: griffe.Module, loader: griffe.GriffeLoader, **kwargs: Any) -> None:
        # The whole tree once it is complete (names resolve only then), the package's own docstring included.
        pending: list[griffe.Object] = [pkg]
        while pending:
            obj = pending.pop()
            if obj.docstring is not None:
                obj.docstring.value = _rewrite(obj, obj.docstring.value)
            pending.extend(member for member in obj.members.values() if not member.is_alias)
