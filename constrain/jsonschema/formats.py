"""`format` values as regexes over the decoded string (full match), intersected with the
string's other constraints.

Each regex admits only valid values (narrower than the RFC where exactness would cost too much;
each narrowing is listed in `FORMAT_NOTES`), so a generated value always passes a checker.
"""

from __future__ import annotations

from functools import lru_cache

from constrain.engine.regex import ByteDFA, combine, compile_regex

__all__ = ["FORMATS", "FORMAT_NOTES", "format_dfa"]

_OCTET = r"(?:25[0-5]|2[0-4][0-9]|1[0-9][0-9]|[1-9][0-9]|[0-9])"
_IPV4 = rf"(?:{_OCTET}\.){{3}}{_OCTET}"
_H16 = r"[0-9A-Fa-f]{1,4}"
_LS32 = rf"(?:{_H16}:{_H16}|{_IPV4})"
_IPV6 = (
    "(?:"
    + "|".join(
        [
            rf"(?:{_H16}:){{6}}{_LS32}",
            rf"::(?:{_H16}:){{5}}{_LS32}",
            rf"(?:{_H16})?::(?:{_H16}:){{4}}{_LS32}",
            rf"(?:(?:{_H16}:){{0,1}}{_H16})?::(?:{_H16}:){{3}}{_LS32}",
            rf"(?:(?:{_H16}:){{0,2}}{_H16})?::(?:{_H16}:){{2}}{_LS32}",
            rf"(?:(?:{_H16}:){{0,3}}{_H16})?::{_H16}:{_LS32}",
            rf"(?:(?:{_H16}:){{0,4}}{_H16})?::{_LS32}",
            rf"(?:(?:{_H16}:){{0,5}}{_H16})?::{_H16}",
            rf"(?:(?:{_H16}:){{0,6}}{_H16})?::",
        ]
    )
    + ")"
)
_DATE = (
    r"(?:[0-9]{4}-(?:(?:0[13578]|1[02])-(?:0[1-9]|[12][0-9]|3[01])|(?:0[469]|11)-(?:0[1-9]|[12][0-9]|30)"
    r"|02-(?:0[1-9]|1[0-9]|2[0-8]))|(?:[0-9]{2}(?:0[48]|[2468][048]|[13579][26])|(?:[02468][048]|[13579][26])00)-02-29)"
)
_TIME = r"(?:[01][0-9]|2[0-3]):[0-5][0-9]:[0-5][0-9](?:\.[0-9]+)?(?:[Zz]|[+-](?:[01][0-9]|2[0-3]):[0-5][0-9])"
# RFC 1123 label, without "--" in positions 3-4 (reserved for IDNA A-labels like "xn--")
_LABEL = (
    r"[A-Za-z0-9](?:[A-Za-z0-9]|[A-Za-z0-9-][A-Za-z0-9]|[A-Za-z0-9-][A-Za-z0-9-][A-Za-z0-9]"
    r"|[A-Za-z0-9-](?:[A-Za-z0-9][A-Za-z0-9-]|-[A-Za-z0-9])[A-Za-z0-9-]{0,57}[A-Za-z0-9])?"
)
_HOSTNAME = rf"{_LABEL}(?:\.{_LABEL}){{0,3}}"
_ATEXT = r"[A-Za-z0-9!#$%&'*+/=?^_`{|}~-]"
_UNRESERVED = r"A-Za-z0-9._~\-"
_SUB_DELIMS = r"!$&'()*+,;="
_PCT = r"%[0-9A-Fa-f]{2}"
_PCHAR = rf"(?:[{_UNRESERVED}{_SUB_DELIMS}:@]|{_PCT})"
_PCHAR_NC = rf"(?:[{_UNRESERVED}{_SUB_DELIMS}@]|{_PCT})"  # no colon (first relative segment)
_QUERY = rf"(?:{_PCHAR}|[/?])*"
_AUTHORITY = (
    rf"(?:(?:[{_UNRESERVED}{_SUB_DELIMS}:]|{_PCT})*@)?"
    rf"(?:\[{_IPV6}\]|(?:[{_UNRESERVED}{_SUB_DELIMS}]|{_PCT})*)(?::[0-9]*)?"
)
_HIER = (
    rf"(?://{_AUTHORITY}(?:/{_PCHAR}*)*|/(?:{_PCHAR}+(?:/{_PCHAR}*)*)?|{_PCHAR}+(?:/{_PCHAR}*)*)?"
)
_RELATIVE = (
    rf"(?://{_AUTHORITY}(?:/{_PCHAR}*)*|/(?:{_PCHAR}+(?:/{_PCHAR}*)*)?"
    rf"|{_PCHAR_NC}+(?:/{_PCHAR}*)*)?"
)
_URI = rf"[A-Za-z][A-Za-z0-9+.\-]*:{_HIER}(?:\?{_QUERY})?(?:#{_QUERY})?"
_POINTER = r"(?:/(?:[^~/]|~[01])*)*"
# RFC 6570 literals (ASCII) and expressions with simple variable names
_TEMPLATE_VAR = r"[A-Za-z0-9_]+(?:\.[A-Za-z0-9_]+)*(?::[1-9][0-9]{0,3}|\*)?"
_URI_TEMPLATE = (
    rf"(?:[!#$&()*+,\-./0-9:;=?@A-Z\[\]_a-z~]|{_PCT}"
    rf"|\{{[+#./;?&]?{_TEMPLATE_VAR}(?:,{_TEMPLATE_VAR})*\}})*"
)

# a regular subset of the regexes valid in both ECMA-262 (unicode mode) and Python: literals,
# escapes of syntax characters and classes, bracket classes without ranges, groups nested
# three deep, quantifiers without a maximum (so never {3,1})
_REGEX_ATOM = (
    r"(?:[^\\^$.|?*+()\[\]{}]|\\[\\^$.|?*+()\[\]{}/dDwWsSntrf]"
    r"|\[\^?(?:[^\]\\\[\-]|\\[\\\]\[^dDwWsSntr\-])+\]|\.)"
)
_QUANT = r"(?:(?:[*+?]|\{[0-9]{1,3},?\})\??)?"


def _regex_syntax(depth: int) -> str:
    atom = _REGEX_ATOM
    if depth:
        atom = rf"(?:{atom}|\((?:\?:)?{_regex_syntax(depth - 1)}\))"
    piece = rf"(?:{atom}{_QUANT}|\^|\$)"
    return rf"{piece}*(?:\|{piece}*)*"


FORMATS: dict[str, str] = {
    "date": _DATE,
    "time": _TIME,
    "date-time": rf"{_DATE}[Tt]{_TIME}",
    "duration": (
        r"P(?:[0-9]+W|(?:[0-9]+Y(?:[0-9]+M(?:[0-9]+D)?)?|[0-9]+M(?:[0-9]+D)?|[0-9]+D)"
        r"(?:T(?:[0-9]+H(?:[0-9]+M(?:[0-9]+S)?)?|[0-9]+M(?:[0-9]+S)?|[0-9]+S))?"
        r"|T(?:[0-9]+H(?:[0-9]+M(?:[0-9]+S)?)?|[0-9]+M(?:[0-9]+S)?|[0-9]+S))"
    ),
    "email": rf"{_ATEXT}+(?:\.{_ATEXT}+)*@(?:{_HOSTNAME}|\[{_IPV4}\])",
    "hostname": _HOSTNAME,
    "ipv4": _IPV4,
    "ipv6": _IPV6,
    "uuid": r"[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}",
    "uri": _URI,
    "uri-reference": rf"(?:{_URI}|{_RELATIVE}(?:\?{_QUERY})?(?:#{_QUERY})?)",
    "json-pointer": _POINTER,
    "relative-json-pointer": rf"(?:0|[1-9][0-9]*)(?:#|{_POINTER})",
    "regex": _regex_syntax(3),
    # the internationalised formats, narrowed to their ASCII forms (which they include)
    "iri": _URI,
    "iri-reference": rf"(?:{_URI}|{_RELATIVE}(?:\?{_QUERY})?(?:#{_QUERY})?)",
    "idn-email": rf"{_ATEXT}+(?:\.{_ATEXT}+)*@(?:{_HOSTNAME}|\[{_IPV4}\])",
    "idn-hostname": _HOSTNAME,
    "uri-template": _URI_TEMPLATE,
}

FORMAT_NOTES: dict[str, str] = {
    "date": "RFC 3339 full-date, calendar-exact (leap years)",
    "time": "RFC 3339 full-time with offset; leap second 60 not admitted",
    "date-time": "RFC 3339, `T` or `t`; leap second 60 not admitted",
    "duration": "RFC 3339 appendix A (ISO 8601 durations, weeks alone)",
    "email": "dot-atom local part of at most 64 characters @ hostname or [IPv4]; no quoted "
    "local parts",
    "hostname": "RFC 1123 labels without `--` in positions 3-4; at most 4 labels of at most "
    "62 characters (so under 253 in total)",
    "ipv4": "dotted quad without leading zeros",
    "ipv6": "RFC 4291 text forms incl. `::` and an IPv4 tail; no zone id",
    "uuid": "8-4-4-4-12 hex digits",
    "uri": "RFC 3986 absolute URI (ASCII; percent-encoding; IPv6 literals)",
    "uri-reference": "RFC 3986 URI or relative reference",
    "json-pointer": "RFC 6901",
    "relative-json-pointer": "draft-handrews-relative-json-pointer",
    "regex": "a regular subset valid in ECMA-262 and Python: groups nested 3 deep, classes "
    "without ranges, quantifiers without a maximum",
    "iri": "as `uri` (ASCII IRIs only)",
    "iri-reference": "as `uri-reference` (ASCII only)",
    "idn-email": "as `email` (ASCII only)",
    "idn-hostname": "as `hostname` (ASCII labels only, no A-labels)",
    "uri-template": "RFC 6570 with ASCII literals; variable names of letters, digits, `_` and "
    "dots; prefix and explode modifiers",
}

# lengths the RFCs bound, intersected with the format's regex: RFC 5321 limits the local part
# of an address to 64 octets (so a long maxLength does not have to be counted in the DFA)
_LENGTH_BOUNDS = {
    "email": r"[^@]{1,64}@[^@]*",
    "idn-email": r"[^@]{1,64}@[^@]*",
}


@lru_cache(maxsize=64)
def format_dfa(name: str) -> ByteDFA:
    """The DFA of format `name` over the text between a JSON string's quotes."""
    dfa = compile_regex(FORMATS[name], encoding="json")
    bound = _LENGTH_BOUNDS.get(name)
    if bound is not None:
        dfa = combine(dfa, compile_regex(bound, encoding="json"), "and", f"{name} (bounded)")
    return dfa
