"""JSON whitespace layouts: which whitespace may stand next to each kind of punctuation.

JSON admits whitespace around every punctuation mark; a grammar for generation admits only
some of it. A `Layout` says, for each *site* (after ``{`` / ``[``, before ``}`` / ``]``,
between the brackets of an empty container, before and after ``:``, before and after ``,``),
the regex of the whitespace allowed there, or None for none. The whitespace at a site is
optional: the punctuation may always touch its neighbours. Nothing is admitted before or after
the document's value.

The modes of ``Grammar.from_json_schema(whitespace=...)`` are values of this one type
(`WHITESPACE`); a regex given as `whitespace` is the layout with that regex at every site, and
must match JSON whitespace only (spaces, tabs, line feeds, carriage returns): anything else
between two tokens would make the text not JSON.
``"pretty"`` (exactly ``json.dumps(value, indent=n)``) is not a layout: its indentation
depends on the nesting depth, so the compiler writes it itself.
"""

from __future__ import annotations

from dataclasses import dataclass, fields

from constrain.engine.regex import combine, compile_regex
from constrain.errors import GrammarError, RegexError

__all__ = ["NATURAL_BREAK", "WHITESPACE", "Layout", "layout_of"]

# "default": the bound of the grammar library's JSON (docs/grammars.md): at most 40 spaces or
# tabs, then at most one line break and 40 more (indented JSON fits; runs of blank lines do not)
_DEFAULT_WS = r"[ \t]{0,40}\r?\n[ \t]{0,40}|[ \t]{1,40}"
# "natural": a line break then an indentation of spaces or of tabs (not both), up to 40
# columns; no `\r`, no trailing spaces before the break, never two breaks
NATURAL_BREAK = r"\n(?: {0,40}|\t{0,10})"


@dataclass(frozen=True)
class Layout:
    """The whitespace allowed at each site next to JSON punctuation: a regex (full match; the
    whitespace is optional there) or None (none).

    Attributes:
        after_open: after the ``{`` or ``[`` of a container that has members or items.
        before_close: before the ``}`` or ``]`` of a container that has members or items.
        inside_empty: between the brackets of an empty container (``{}``, ``[]``).
        before_colon / after_colon: around the ``:`` between a key and its value.
        before_comma / after_comma: around the ``,`` between two members or items.
    """

    after_open: str | None = None
    before_close: str | None = None
    inside_empty: str | None = None
    before_colon: str | None = None
    after_colon: str | None = None
    before_comma: str | None = None
    after_comma: str | None = None

    @classmethod
    def uniform(cls, whitespace: str | None) -> Layout:
        """The same whitespace at every site (``"default"``, a user's regex)."""
        return cls(**{f.name: whitespace for f in fields(cls)})

    def sites(self, kind: str) -> tuple[str | None, str | None]:
        """The whitespace (before, after) punctuation `kind`: ``{ [ } ] : ,``, or ``{} []``
        for an empty container, whose "after" is the whitespace between its brackets. Where a
        value begins or ends (after ``{``'s key, before ``}``) the neighbouring mark's site
        holds the whitespace, so ``{`` has nothing before and ``}`` nothing after."""
        if kind in ("{", "["):
            return None, self.after_open
        if kind in ("}", "]"):
            return self.before_close, None
        if kind in ("{}", "[]"):
            return None, self.inside_empty
        if kind == ":":
            return self.before_colon, self.after_colon
        if kind == ",":
            return self.before_comma, self.after_comma
        raise ValueError(f"unknown punctuation {kind!r}")


WHITESPACE: dict[str, Layout] = {
    "compact": Layout(),
    "default": Layout.uniform(_DEFAULT_WS),
    # the layouts JSON printers and models write: json.dumps with or without indent, with
    # compact separators, JavaScript's JSON.stringify(v, null, n or "\t"), Go's MarshalIndent
    "natural": Layout(
        after_open=NATURAL_BREAK,
        before_close=NATURAL_BREAK,
        after_colon=" ",
        after_comma=" |" + NATURAL_BREAK,
    ),
}


def layout_of(whitespace: str | Layout | None) -> Layout:
    """The layout of a `whitespace` option other than ``"pretty"``: a `Layout`, a mode of
    `WHITESPACE`, None (compact), or a regex allowed at every site."""
    if isinstance(whitespace, Layout):
        return whitespace
    if whitespace is None:
        return WHITESPACE["compact"]
    found = WHITESPACE.get(whitespace)
    if found is not None:
        return found
    _check_whitespace_only(whitespace)
    return Layout.uniform(whitespace)


def _check_whitespace_only(regex: str) -> None:
    """Refuse a whitespace regex that matches some text JSON does not take as whitespace."""
    if not isinstance(regex, str):
        raise GrammarError(f"whitespace must be a mode or a regex, got {type(regex).__name__}")
    try:
        beyond = combine(compile_regex(regex), compile_regex(r"[ \t\n\r]*"), "minus", regex)
    except RegexError as exc:
        raise GrammarError(f"whitespace regex {regex!r}: {exc.reason}") from None
    if not beyond.is_empty():
        example = beyond.shortest_from(beyond.start).decode("utf-8", "replace")
        raise GrammarError(
            f"whitespace regex {regex!r} matches {example!r}, which is not JSON whitespace: "
            f"it may match only spaces, tabs, line feeds and carriage returns"
        )
