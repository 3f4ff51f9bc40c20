"""`redact(text)`: free text (an exception's message) without URLs or credentials.

A handler's exception text goes to the caller in its Result; a database driver's message
may quote the URL it dialled, password included, or a ``password=...`` of a DSN. What the
caller gets keeps the words and loses the secrets: every URL becomes ``<scheme>://<redacted>``,
the value of a key that names a secret becomes ``<redacted>``, and so does a bearer token
or a ``user:password@`` without a scheme. The process's own log keeps the full exception.
"""

from __future__ import annotations

import re

REDACTED = "<redacted>"

#: a URL up to a blank or a quote (a password with ``/`` or ``@`` stays inside it)
_URL = re.compile(r"\b([A-Za-z][A-Za-z0-9+.-]{0,30})://[^\s'\"<>]+")
#: ``password=...``, ``api_key: ...``, ``"token": "..."`` and the like
_KEY_VALUE = re.compile(
    r"(?i)\b(password|passwd|pwd|secret|token|api[_-]?key|access[_-]?key|private[_-]?key"
    r"|authorization|credentials?)([\"']?\s*[=:]\s*(?:bearer\s+|basic\s+)?[\"']?)[^\s\"',;&})]+"
)
#: ``Bearer <token>`` / ``Basic <base64>`` on their own
_AUTH_SCHEME = re.compile(r"(?i)\b(bearer|basic)\s+[A-Za-z0-9._~+/=-]{8,}")
#: ``user:password@host`` without a scheme (a DSN's authority)
_USERINFO = re.compile(r"[^\s:/@'\"<>]+:[^\s@'\"<>]+@(?=[A-Za-z0-9\[])")


def _url(match: re.Match[str]) -> str:
    # punctuation that ends a sentence or a clause is not part of the URL
    whole = match.group(0)
    trailer = whole[len(whole.rstrip(".,:;)]}!?")) :]
    return f"{match.group(1)}://{REDACTED}{trailer}"


def redact(text: str) -> str:
    """`text` with URLs, secret values, tokens and ``user:password@`` replaced."""
    text = _URL.sub(_url, text)
    text = _KEY_VALUE.sub(lambda m: f"{m.group(1)}{m.group(2)}{REDACTED}", text)
    text = _AUTH_SCHEME.sub(lambda m: f"{m.group(1)} {REDACTED}", text)
    return _USERINFO.sub(f"{REDACTED}@", text)


__all__ = ["REDACTED", "redact"]
