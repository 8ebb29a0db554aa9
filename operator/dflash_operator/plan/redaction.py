"""Secrets never reach status, events or the operator's log: what a stage pod said (its
termination message, the tail of its log) is copied into conditions and events, and a
crashing library may print a credential. Known credential shapes are replaced by
`[REDACTED]` (the key name before it is kept, so the message still says what was there).
"""

from __future__ import annotations

import re

REDACTED = "[REDACTED]"

# (pattern, replacement): specific shapes first, then `key=value` forms.
_RULES: tuple[tuple[re.Pattern[str], str], ...] = (
    # AWS access key IDs (long-term AKIA, temporary ASIA, and the other IAM ID prefixes).
    (re.compile(r"\b(?:AKIA|ASIA|AIDA|AROA|AIPA|ANPA|ANVA|AGPA)[A-Z0-9]{16}\b"), REDACTED),
    # Hugging Face user and organisation tokens.
    (re.compile(r"\bhf_[A-Za-z0-9]{20,}\b"), REDACTED),
    (re.compile(r"\bapi_org_[A-Za-z0-9]{20,}\b"), REDACTED),
    # JSON Web Tokens (Kubernetes ServiceAccount tokens, OIDC tokens).
    (re.compile(r"\beyJ[A-Za-z0-9_-]{8,}\.[A-Za-z0-9_-]{8,}\.[A-Za-z0-9_-]{8,}"), REDACTED),
    # HTTP credentials: `Bearer <token>`, `Basic <b64>`, and a password inside a URL.
    (re.compile(r"(?i)\b(bearer|basic)\s+[A-Za-z0-9\-._~+/]{8,}=*"), rf"\1 {REDACTED}"),
    (re.compile(r"(?i)\b([a-z][a-z0-9+.-]*://[^/\s:@]+):[^@\s/]+@"), rf"\1:{REDACTED}@"),
    # `<something secret>=value` / `: value`, in env dumps, configs and exception texts.
    (
        re.compile(
            r"(?i)\b((?:aws_)?secret_access_key|aws_session_token|secret_key|password|passwd|"
            r"api[_-]?key|access[_-]?token|auth[_-]?token|hf_token|token|secret)"
            r"(['\"]?\s*[:=]\s*['\"]?)[^\s'\",;}]+"
        ),
        rf"\1\2{REDACTED}",
    ),
)


def redact(text: str) -> str:
    """`text` with every credential of a known shape replaced by [REDACTED]."""
    for pattern, replacement in _RULES:
        text = pattern.sub(replacement, text)
    return text
