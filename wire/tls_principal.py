"""The principal of a TLS client certificate (KIP-371): its subject DN as Java prints it, mapped by Kafka's
``ssl.principal.mapping.rules``. Sans I/O: certificate bytes and rule text in, strings out.

Kafka names an SSL connection ``User:<name>`` where ``<name>`` comes from the client certificate's subject
distinguished name, in the RFC 2253 form Java's ``X500Principal.getName()`` prints (``CN=alice,OU=eng,O=Acme,C=US``:
the last RDN of the certificate first, the RFC 2253 keywords CN, C, L, ST, O, OU, STREET, DC and UID, every other
attribute as its dotted OID with ``#`` and the hex of its DER value, Java's escapes). Operators' rules are written
against that exact text, so :func:`subject_dn` reproduces it byte for byte rather than using OpenSSL's own format.

The rules are parsed as Kafka's ``SslPrincipalMapper`` parses them: a comma-separated list (whitespace, newlines
included, around the commas is ignored; empty entries are skipped) of ``DEFAULT`` (the DN itself) and
``RULE:pattern/replacement/`` with an optional ``L`` or ``U`` after the last slash (lower or upper case), ``/`` and
``\\`` escaped by a backslash inside pattern and replacement. The first rule whose pattern matches the whole DN
wins; none matching is an error (Kafka refuses the connection). Patterns are Java regexes; Python's ``re`` (ASCII
classes, as Java's defaults) reads the ones operators write, and one it cannot compile is an error at start. The
replacement follows Java's ``replaceAll``: ``$n`` is group n (``$12`` is group 1 then ``2`` when there are fewer
than 12 groups, and a group number beyond the pattern's is the literal text, as Kafka escapes it), ``${name}``
a named group, ``\\x`` the character x.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

#: Kafka's default ``ssl.principal.mapping.rules``: the principal's name is the DN itself.
DEFAULT_RULES = "DEFAULT"

_RULE_PATTERN = r"(DEFAULT)|RULE:((\\.|[^\\/])*)/((\\.|[^\\/])*)/([LU]?).*?|(.*?)"
_RULE_SPLITTER = re.compile(r"\s*(" + _RULE_PATTERN + r")\s*(,\s*|$)", re.ASCII)
_RULE_PARSER = re.compile(_RULE_PATTERN, re.ASCII)
_BACK_REFERENCE = re.compile(r"\$(\d+)", re.ASCII)
_DIGITS = "0123456789"


class PrincipalRulesError(ValueError):
    """``ssl.principal.mapping.rules`` cannot be parsed (the message quotes the rule at fault)."""


class PrincipalMappingError(ValueError):
    """A certificate's DN cannot be mapped: no rule matches it, or the matching rule's replacement names a group
    its pattern lacks (the message names the DN or the rule). Kafka refuses such a connection."""


@dataclass(frozen=True, slots=True)
class _Rule:
    default: bool
    pattern: re.Pattern[str] | None = None
    replacement: str = ""
    case: str = ""  # "L", "U" or ""

    def apply(self, dn: str) -> str | None:
        if self.default:
            return dn
        assert self.pattern is not None
        if self.pattern.fullmatch(dn) is None:
            return None
        groups = self.pattern.groups
        replacement = _escape_literal_back_references(self.replacement, groups)
        result = self.pattern.sub(lambda match: _java_replacement(replacement, match), dn)
        if self.case == "L":
            return result.lower()
        return result.upper() if self.case == "U" else result

    def __str__(self) -> str:
        """As Kafka's ``Rule.toString`` prints it (its tests compare these)."""
        if self.default:
            return "DEFAULT"
        assert self.pattern is not None
        suffix = {"L": "/L", "U": "/U"}.get(self.case, "")
        return f"RULE:{self.pattern.pattern}/{self.replacement}{suffix}"


@dataclass(frozen=True, slots=True)
class PrincipalMapper:
    """Parsed ``ssl.principal.mapping.rules``; :meth:`name` maps one DN."""

    rules: tuple[_Rule, ...]

    def name(self, dn: str) -> str:
        """The short name of ``dn`` by the first rule that matches; :class:`PrincipalMappingError` if none does."""
        for rule in self.rules:
            name = rule.apply(dn)
            if name is not None:
                return name
        raise PrincipalMappingError(f"no rule of ssl.principal.mapping.rules maps {dn} (rules {self})")

    def __str__(self) -> str:
        return "[" + ", ".join(str(rule) for rule in self.rules) + "]"


def parse_rules(text: str | None) -> PrincipalMapper:
    """Parses ``ssl.principal.mapping.rules`` (None: ``DEFAULT``); :class:`PrincipalRulesError` quoting the rule."""
    source = DEFAULT_RULES if text is None else text
    rules: list[_Rule] = []
    for match in _RULE_SPLITTER.finditer(source.strip()):
        rule = match.group(1)
        parsed = _RULE_PARSER.match(rule)
        if parsed is None:  # cannot happen: the last alternative matches anything
            raise PrincipalRulesError(f"invalid rule: {rule}")
        if parsed.end() != len(rule):
            raise PrincipalRulesError(f"invalid rule `{rule}`, unmatched substring `{rule[parsed.end() :]}`")
        if parsed.group(1) is not None:
            rules.append(_Rule(default=True))
        elif parsed.group(2) is not None:
            try:
                pattern = re.compile(parsed.group(2), re.ASCII)
            except re.error as exc:
                raise PrincipalRulesError(f"invalid pattern in rule `{rule}`: {exc}") from None
            rules.append(_Rule(default=False, pattern=pattern, replacement=parsed.group(4), case=parsed.group(6)))
    return PrincipalMapper(tuple(rules))


def _escape_literal_back_references(replacement: str, groups: int) -> str:
    """Kafka's pre-pass (taken by Kafka from Apache NiFi): a ``$n`` naming a group the pattern does not have, after
    dropping trailing digits down to two, is made literal instead of failing at ``replaceAll``."""
    if groups == 0:
        return replacement
    value = replacement
    for match in _BACK_REFERENCE.finditer(replacement):
        digits = match.group(1)
        if digits.startswith("0"):
            continue
        index = int(digits)
        while index > groups and index >= 10:
            index //= 10
        if index > groups:
            # As Kafka does, the offset is the one in the original text even after earlier escapes were inserted.
            start = match.start(1)
            value = value[: start - 1] + "\\" + value[start - 1 :]
    return value


def _java_replacement(replacement: str, match: re.Match[str]) -> str:
    """``replacement`` for one match, with Java's ``Matcher.appendReplacement`` rules."""
    out: list[str] = []
    i = 0
    groups = match.re.groups
    while i < len(replacement):
        char = replacement[i]
        if char == "\\":
            if i + 1 == len(replacement):
                raise PrincipalMappingError("character to be escaped is missing in the replacement of a mapping rule")
            out.append(replacement[i + 1])
            i += 2
        elif char == "$":
            i += 1
            if i < len(replacement) and replacement[i] == "{":
                end = replacement.find("}", i)
                if end < 0:
                    raise PrincipalMappingError("named capturing group is missing trailing '}' in a mapping rule")
                name = replacement[i + 1 : end]
                if name not in match.re.groupindex:
                    raise PrincipalMappingError(f"no group with name {{{name}}} in a mapping rule")
                out.append(match.group(name) or "")
                i = end + 1
                continue
            if i == len(replacement) or replacement[i] not in _DIGITS:
                raise PrincipalMappingError("illegal group reference in the replacement of a mapping rule")
            index = int(replacement[i])
            i += 1
            if index > groups:
                raise PrincipalMappingError(f"no group {index} in a mapping rule")
            while i < len(replacement) and replacement[i] in _DIGITS and index * 10 + int(replacement[i]) <= groups:
                index = index * 10 + int(replacement[i])
                i += 1
            out.append(match.group(index) or "")
        else:
            out.append(char)
            i += 1
    return "".join(out)


# -- the subject DN ------------------------------------------------------------------------------------------------

_SEQUENCE, _SET, _OID = 0x30, 0x31, 0x06
#: The attributes Java's RFC 2253 output names by keyword; every other one is its dotted OID and ``#`` hex.
_KEYWORDS = {
    "2.5.4.3": "CN",
    "2.5.4.6": "C",
    "2.5.4.7": "L",
    "2.5.4.8": "ST",
    "2.5.4.10": "O",
    "2.5.4.11": "OU",
    "2.5.4.9": "STREET",
    "0.9.2342.19200300.100.1.25": "DC",
    "0.9.2342.19200300.100.1.1": "UID",
}
#: DER string types Java prints as text (PrintableString, T61String, IA5String, GeneralString, BMPString,
#: UTF8String), with how their bytes decode.
_STRING_TYPES = {0x13: "latin-1", 0x14: "latin-1", 0x16: "latin-1", 0x1B: "latin-1", 0x1E: "utf-16-be", 0x0C: "utf-8"}
_ESCAPED = set(',=+<>#;"\\')


def _tlv(der: bytes, offset: int) -> tuple[int, int, int, int]:
    """(tag, start of the value, end of the value, the TLV's end) of the DER element at ``offset``."""
    if offset + 2 > len(der):
        raise ValueError("truncated DER element")
    tag = der[offset]
    if tag & 0x1F == 0x1F:
        raise ValueError("multi-byte DER tags are not expected in a certificate subject")
    length = der[offset + 1]
    start = offset + 2
    if length & 0x80:
        count = length & 0x7F
        if count == 0 or count > 4 or start + count > len(der):
            raise ValueError("bad DER length")
        length = int.from_bytes(der[start : start + count], "big")
        start += count
    end = start + length
    if end > len(der):
        raise ValueError("truncated DER element")
    return tag, start, end, end


def _children(der: bytes, start: int, end: int) -> list[tuple[int, int, int, int]]:
    """The elements of a constructed value, each as (tag, value start, value end, element start)."""
    out = []
    offset = start
    while offset < end:
        tag, value_start, value_end, next_offset = _tlv(der, offset)
        out.append((tag, value_start, value_end, offset))
        offset = next_offset
    return out


def _oid(value: bytes) -> str:
    if not value:
        raise ValueError("empty OID")
    first = value[0]
    arcs = [min(first // 40, 2), first - 40 * min(first // 40, 2)]
    number = 0
    for byte in value[1:]:
        number = (number << 7) | (byte & 0x7F)
        if not byte & 0x80:
            arcs.append(number)
            number = 0
    return ".".join(str(arc) for arc in arcs)


def _escape(text: str) -> str:
    escaped = []
    for char in text:
        if char in _ESCAPED:
            escaped.append("\\" + char)
        elif char == "\0":
            escaped.append("\\00")
        else:
            escaped.append(char)
    joined = "".join(escaped)
    lead = len(joined) - len(joined.lstrip(" \r"))
    trail = len(joined.rstrip(" \r"))
    if lead >= len(joined):  # all whitespace: Java escapes every character
        return "".join("\\" + char for char in joined)
    return "".join("\\" + char if i < lead or i >= trail else char for i, char in enumerate(joined))


def _attribute(der: bytes, start: int, end: int) -> str:
    (oid_tag, oid_start, oid_end, _), (tag, value_start, value_end, value_offset) = _children(der, start, end)[:2]
    if oid_tag != _OID:
        raise ValueError("attribute without an OID")
    oid = _oid(der[oid_start:oid_end])
    keyword = _KEYWORDS.get(oid)
    if keyword is None or tag not in _STRING_TYPES:
        return f"{keyword or oid}=#{der[value_offset:value_end].hex()}"
    return f"{keyword}={_escape(der[value_start:value_end].decode(_STRING_TYPES[tag], errors='replace'))}"


def name_dn(der: bytes, start: int, end: int) -> str:
    """The RFC 2253 text (Java's) of the DER ``Name`` whose content is ``der[start:end]``."""
    rdns = []
    for tag, rdn_start, rdn_end, _ in _children(der, start, end):
        if tag != _SET:
            raise ValueError("an RDN is not a SET")
        rdns.append(
            "+".join(_attribute(der, a_start, a_end) for _, a_start, a_end, _ in _children(der, rdn_start, rdn_end))
        )
    return ",".join(reversed(rdns))


def subject_dn(certificate: bytes) -> str:
    """The subject DN of a DER X.509 certificate as Kafka's principal builder sees it; ValueError if the bytes
    are not a certificate."""
    tag, start, _, _ = _tlv(certificate, 0)
    if tag != _SEQUENCE:
        raise ValueError("not a DER certificate")
    tag, tbs_start, tbs_end, _ = _tlv(certificate, start)
    if tag != _SEQUENCE:
        raise ValueError("not a DER certificate")
    fields = _children(certificate, tbs_start, tbs_end)
    if fields and fields[0][0] == 0xA0:  # [0] EXPLICIT version
        fields = fields[1:]
    # serialNumber, signature, issuer, validity, subject
    if len(fields) < 5 or fields[4][0] != _SEQUENCE:
        raise ValueError("a certificate without a subject")
    _, subject_start, subject_end, _ = fields[4]
    return name_dn(certificate, subject_start, subject_end)


def certificate_principal(certificate: bytes, mapper: PrincipalMapper) -> str:
    """``User:<name>`` of a DER client certificate, its subject DN mapped by the listener's rules: how Kafka names
    an SSL connection, on a client listener and on the CONTROLLER listener alike. ValueError (a
    :class:`PrincipalMappingError`, or bytes that are not a certificate) when it names no principal: Kafka refuses
    such a connection."""
    return f"User:{mapper.name(subject_dn(certificate))}"
