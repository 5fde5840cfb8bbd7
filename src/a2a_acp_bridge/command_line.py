"""A command line as the policy reads it: its simple commands as words, and whatever in it
cannot be known for certain before a shell runs it.

The bridge does not ship a shell parser: this is a small tokenizer for the safe subset of
POSIX shell a coding agent sends (words, quotes, escapes, `;` `&&` `||` `|` `&` and
newlines between commands, redirections). Anything beyond that subset is not guessed at:
it makes the line `uncertain`, and the policy answers an uncertain line `ask`, never
`allow`. Uncertain are: expansions and substitutions (`$...`, backquotes), `eval`, control
structures and grouping (`if`, `for`, `(`, `{`, ...), here-documents and here-strings,
process substitution, an unterminated quote, and a redirection whose target is not a plain
word.

Words are compared after quote removal, so `np"m" test` is `npm test`, and a quoted
`"a && b"` stays one word. No I/O; the root is applied by the caller (policy.py) to the
redirection targets.
"""

from __future__ import annotations

from dataclasses import dataclass

# Words that start something this tokenizer does not follow (control flow, functions).
CONTROL_WORDS = frozenset(
    {
        "if",
        "then",
        "else",
        "elif",
        "fi",
        "for",
        "while",
        "until",
        "do",
        "done",
        "case",
        "esac",
        "select",
        "function",
        "coproc",
        "!",
        "[[",
        "]]",
    }
)
# Builtins that run text as a new command line: what they run cannot be read here.
EVAL_WORDS = frozenset({"eval", "source", ".", "trap", "alias"})
# Characters that end a word outside quotes.
_BREAKS = frozenset(" \t\n;&|<>()")
# Redirection targets that write nowhere a file could be.
HARMLESS_TARGETS = frozenset({"/dev/null", "/dev/stdout", "/dev/stderr"})


@dataclass(frozen=True)
class Redirection:
    """`operator` (`>`, `>>`, `<`, `&>`, ...) and its target word (a file, or `&1`)."""

    operator: str
    target: str

    @property
    def names_file(self) -> bool:
        # `2>&1`, `>&-`: a descriptor duplicated or closed, no file.
        if self.operator in (">&", "<&") and (self.target.isdigit() or self.target == "-"):
            return False
        return self.target not in HARMLESS_TARGETS


@dataclass(frozen=True)
class CommandLine:
    """The simple commands of a line, each as its words; `uncertain` says why the line
    cannot be known for certain (empty: it can)."""

    text: str
    parts: tuple[tuple[str, ...], ...]
    redirections: tuple[Redirection, ...] = ()
    uncertain: tuple[str, ...] = ()

    @property
    def certain(self) -> bool:
        return not self.uncertain


def parse_command(text: str) -> CommandLine:
    """The line's simple commands, redirections, and what makes it uncertain."""
    return _Tokenizer(text).run()


class _Tokenizer:
    def __init__(self, text: str) -> None:
        self.text = text
        self.at = 0
        self.parts: list[tuple[str, ...]] = []
        self.words: list[str] = []
        self.redirections: list[Redirection] = []
        self.uncertain: list[str] = []
        self.pending_redirect: str | None = None

    def doubt(self, why: str) -> None:
        if why not in self.uncertain:
            self.uncertain.append(why)

    def run(self) -> CommandLine:
        text = self.text
        while self.at < len(text):
            char = text[self.at]
            if char in " \t":
                self.at += 1
            elif char == "\n" or char == ";":
                self.at += 1
                self.end_part()
            elif char == "&":
                if text.startswith("&>", self.at):
                    self.redirect("&>>" if text.startswith("&>>", self.at) else "&>")
                else:
                    self.at += 2 if text.startswith("&&", self.at) else 1
                    self.end_part()
            elif char == "|":
                self.at += 2 if text.startswith(("||", "|&"), self.at) else 1
                self.end_part()
            elif char in "<>":
                self.redirect(self.operator())
            elif char in "()":
                self.doubt("it groups commands or substitutes a process: ( )")
                self.at += 1
            elif char == "#":
                # Only at a word's start (inside a word it is a letter): a comment.
                end = text.find("\n", self.at)
                self.at = len(text) if end < 0 else end
            else:
                self.word()
        self.end_part()
        if self.pending_redirect is not None:
            self.doubt("a redirection has no target")
        return CommandLine(text, tuple(self.parts), tuple(self.redirections), tuple(self.uncertain))

    def operator(self) -> str:
        text = self.text
        for op in ("<<<", "<<-", ">>", "<<", "<>", ">|", ">&", "<&", ">", "<"):
            if text.startswith(op, self.at):
                return op
        return text[self.at]  # not reached: the caller saw < or >

    def redirect(self, op: str) -> None:
        self.at += len(op)
        if op.startswith("<<"):
            self.doubt("it holds a here-document or here-string (<<)")
            return
        if self.text.startswith("(", self.at):
            self.doubt("it substitutes a process: <( ) or >( )")
            return
        # A file-descriptor number just before the operator (`2>`) is part of it, not a word.
        if self.words and self.words[-1].isdigit() and self._touching_previous(op):
            self.words.pop()
        self.pending_redirect = op

    def _touching_previous(self, op: str) -> bool:
        start = self.at - len(op)
        return start > 0 and self.text[start - 1].isdigit()

    def word(self) -> None:
        text = self.text
        out: list[str] = []
        quoted = False
        while self.at < len(text):
            char = text[self.at]
            if char in _BREAKS:
                break
            if char == "\\":
                if self.at + 1 < len(text):
                    if text[self.at + 1] != "\n":
                        out.append(text[self.at + 1])
                    self.at += 2
                else:
                    self.at += 1
                quoted = True
            elif char == "'":
                end = text.find("'", self.at + 1)
                if end < 0:
                    self.doubt("a quote is not closed")
                    out.append(text[self.at + 1 :])
                    self.at = len(text)
                else:
                    out.append(text[self.at + 1 : end])
                    self.at = end + 1
                quoted = True
            elif char == '"':
                self.at += 1
                out.append(self.double_quoted())
                quoted = True
            elif char == "$" or char == "`":
                self.doubt("it expands a variable or substitutes a command ($, `)")
                out.append(char)
                self.at += 1
            else:
                if char in "{}" and not out:
                    self.doubt("it groups commands or expands braces ({ })")
                out.append(char)
                self.at += 1
        value = "".join(out)
        if self.pending_redirect is not None:
            self.redirections.append(Redirection(self.pending_redirect, value))
            if not value or (not quoted and value.startswith("~")):
                self.doubt("a redirection's target cannot be placed")
            self.pending_redirect = None
            return
        if not self.words and not quoted:
            if value in CONTROL_WORDS:
                self.doubt(f"it holds shell control flow ({value})")
            elif value in EVAL_WORDS:
                self.doubt(f"it runs text as a command line ({value})")
        self.words.append(value)

    def double_quoted(self) -> str:
        text = self.text
        out: list[str] = []
        while self.at < len(text):
            char = text[self.at]
            if char == '"':
                self.at += 1
                return "".join(out)
            if char == "\\" and self.at + 1 < len(text) and text[self.at + 1] in '"\\$`\n':
                if text[self.at + 1] != "\n":
                    out.append(text[self.at + 1])
                self.at += 2
                continue
            if char == "$" or char == "`":
                self.doubt("it expands a variable or substitutes a command ($, `)")
            out.append(char)
            self.at += 1
        self.doubt("a quote is not closed")
        return "".join(out)

    def end_part(self) -> None:
        if self.pending_redirect is not None:
            self.doubt("a redirection has no target")
            self.pending_redirect = None
        if self.words:
            self.parts.append(tuple(self.words))
            self.words = []
