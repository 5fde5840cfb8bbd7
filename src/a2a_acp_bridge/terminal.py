"""Text made harmless for a terminal: control characters shown, never obeyed.

What the agent or a caller writes (contextIds, titles, commands, the agent's answer)
reaches log lines and the `send` command's output. An escape sequence there can retitle
the window, clear the screen, hide text or rewrite what was printed before; a carriage
return or a backspace can overwrite a line; bidirectional overrides reorder what is read.
`neutralise` shows every such character as an escape (`\\x1b`, `\\u202e`), so the text is
read as written and nothing is executed.
"""

from __future__ import annotations

import re

# C0 controls, DEL and C1 controls (0x9b is a one-byte CSI), then the invisible format
# characters that reorder or hide text: zero-width ones, bidi marks, embeddings,
# overrides and isolates, the BOM.
_CONTROLS = "\x00-\x1f\x7f-\x9f\u200b-\u200f\u202a-\u202e\u2060-\u2069\ufeff"
_UNSAFE = re.compile(f"[{_CONTROLS}]")


def _escape(match: re.Match[str]) -> str:
    code = ord(match.group())
    return f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}"


def neutralise(text: str, *, keep: str = "") -> str:
    """`text` with every control character escaped, except those in `keep` (say "\\n\\t"
    for text that is printed as lines). A CRLF is kept as a newline when "\\n" is kept."""
    if "\n" in keep:
        text = text.replace("\r\n", "\n")
    if not keep:
        return _UNSAFE.sub(_escape, text)
    return _UNSAFE.sub(lambda m: m.group() if m.group() in keep else _escape(m), text)


def json_safe(text: str) -> str:
    """A JSON document with the controls JSON leaves raw (DEL, C1, bidi and invisible
    format characters) written as \\u escapes: still the same JSON, harmless to print."""
    return _UNSAFE.sub(lambda m: f"\\u{ord(m.group()):04x}", text)
