"""A command line as the policy reads it: its simple commands as words, and whatever in it
cannot be known for certain before a shell runs it.

The bridge does not ship a shell parser: this is a small tokenizer for the safe subset of
POSIX shell a coding agent sends (words, quotes, escapes, `;` `&&` `||` `|` `&` and
newlines between commands, redirections). Anything beyond that subset is not guessed at:
it makes the line `uncertain`, and the policy answers an uncertain line `ask`, never
`allow`. Uncertain are: expansions and substitutions (`$...`, backquotes), `eval` and a
shell given text to run (`sh -c`, a shell reading its input), control structures and
grouping (`if`, `for`, `(`, `{`, ...), here-documents and here-strings, process
substitution, an unterminated quote, a command name that is a pattern (`/usr/bin/cur?`,
`c[u]rl`), and a redirection whose target is not a plain word (a pattern among them:
`> .gi?/config`). Where a command may start is read behind assignments and wrappers
(`env`, `sudo`, `xargs`, ...): behind a wrapper, whose options are not read here, every
word may be the command.

Words are compared after quote removal, so `np"m" test` is `npm test`, and a quoted
`"a && b"` stays one word. No I/O; the root is applied by the caller (policy.py) to the
redirection targets.
"""

from __future__ import annotations

import os
from collections.abc import Iterator, Sequence
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
# Shells (by base name: `/bin/sh` too): given `-c` text, or reading their input, they run a
# command line this tokenizer never sees.
SHELLS = frozenset({"sh", "bash", "dash", "zsh", "ksh", "mksh", "ash", "fish"})
# Words that run the command after them (the policy's deny and ask look behind them too).
WRAPPERS = frozenset(
    {
        "env",
        "command",
        "exec",
        "nohup",
        "time",
        "nice",
        "ionice",
        "sudo",
        "doas",
        "xargs",
        "timeout",
        "stdbuf",
        "builtin",
        "busybox",
        "chroot",
        "strace",
        "unbuffer",
        "setsid",
        "flock",
    }
)
# Unquoted, these make a word a pattern the shell expands against the files (`*`, `?`,
# `[...]`) or into several words (`{a,b}`, `{a..z}`): what it names is known only then.
_PATTERN_CHARS = frozenset("*?")
_PATTERN_PAIRS = (("[", "]"), ("{", "}"))
# Stands for a quoted character in a word's shape (quoted, nothing is a pattern).
_QUOTED = "\0"
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
        # Per word of the current part: whether it is a pattern the shell expands.
        self.patterns: list[bool] = []
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
        # The word as the shell sees it for expansion: quoted characters are _QUOTED (but a
        # closing `]` or `}`, which may still end a pattern begun outside the quotes).
        shape: list[str] = []
        quoted = False
        while self.at < len(text):
            char = text[self.at]
            if char in _BREAKS:
                break
            if char == "\\":
                if self.at + 1 < len(text):
                    if text[self.at + 1] != "\n":
                        out.append(text[self.at + 1])
                        shape.append(_shape_of_quoted(text[self.at + 1]))
                    self.at += 2
                else:
                    self.at += 1
                quoted = True
            elif char == "'":
                end = text.find("'", self.at + 1)
                if end < 0:
                    self.doubt("a quote is not closed")
                    chunk = text[self.at + 1 :]
                    self.at = len(text)
                else:
                    chunk = text[self.at + 1 : end]
                    self.at = end + 1
                out.append(chunk)
                shape.append(_shape_of_quoted(chunk))
                quoted = True
            elif char == '"':
                self.at += 1
                chunk = self.double_quoted()
                out.append(chunk)
                shape.append(_shape_of_quoted(chunk))
                quoted = True
            elif char == "$" or char == "`":
                self.doubt("it expands a variable or substitutes a command ($, `)")
                out.append(char)
                shape.append(char)
                self.at += 1
            else:
                if char in "{}" and not out:
                    self.doubt("it groups commands or expands braces ({ })")
                out.append(char)
                shape.append(char)
                self.at += 1
        value = "".join(out)
        pattern = _is_pattern("".join(shape))
        if self.pending_redirect is not None:
            self.redirections.append(Redirection(self.pending_redirect, value))
            if not value or (not quoted and value.startswith("~")):
                self.doubt("a redirection's target cannot be placed")
            if pattern:
                self.doubt("a redirection's target is a pattern the shell expands (*, ?, [ ], { })")
            self.pending_redirect = None
            return
        if not self.words and not quoted and value in CONTROL_WORDS:
            self.doubt(f"it holds shell control flow ({value})")
        self.words.append(value)
        self.patterns.append(pattern)

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
            self.doubt_what_runs(self.words, self.patterns)
            self.parts.append(tuple(self.words))
            self.words = []
            self.patterns = []

    def doubt_what_runs(self, words: Sequence[str], patterns: Sequence[bool]) -> None:
        """Doubt a part whose command cannot be named before the shell runs it: a pattern
        where a command may start, a builtin that runs text, a shell given text to run."""
        for index in command_positions(words):
            name = words[index]
            if patterns[index]:
                self.doubt(
                    f"a command's name is a pattern the shell expands ({name}): what runs is "
                    "known only then"
                )
            if name in EVAL_WORDS:
                # Quoted or not: quotes are removed before the shell looks the name up.
                self.doubt(f"it runs text as a command line ({name})")
            elif os.path.basename(name) in SHELLS and _shell_runs_text(words[index + 1 :]):
                self.doubt(f"it runs text as a command line ({name} -c, or its input)")


def command_positions(words: Sequence[str]) -> Iterator[int]:
    """Where in a simple command's words a command may start: the first word after the
    assignments (`FOO=1 npm test`), and behind a wrapper (`env`, `sudo -u x`, `xargs`),
    whose options are not read here, every later word."""
    index = 0
    while index < len(words) and is_assignment(words[index]):
        index += 1
    if index >= len(words):
        return
    yield index
    if os.path.basename(words[index]) in WRAPPERS:
        yield from range(index + 1, len(words))


def is_assignment(word: str) -> bool:
    """`NAME=value`: a variable for the command, not the command."""
    name, equals, _ = word.partition("=")
    return bool(equals) and name.replace("_", "a").isalnum() and not name[:1].isdigit()


def _shell_runs_text(arguments: Sequence[str]) -> bool:
    """A shell's arguments make it run text rather than a script file: `-c` (alone or in a
    cluster, `-ec`, `-lc`), `-s`, or no operand at all (it reads its input)."""
    for argument in arguments:
        if argument.startswith("-") and not argument.startswith("--"):
            if "c" in argument or "s" in argument:
                return True
        elif not argument.startswith(("-", "+")):
            return (
                False  # a script file: the command is the file's, as `npm test` runs package.json
            )
    return True


def _shape_of_quoted(chunk: str) -> str:
    return "".join(ch if ch in "]}" else _QUOTED for ch in chunk)


def _is_pattern(shape: str) -> bool:
    """Whether a word (as its shape: quoted characters masked) expands as a pattern."""
    if any(ch in _PATTERN_CHARS for ch in shape):
        return True
    for opening, closing in _PATTERN_PAIRS:
        start = shape.find(opening)
        if start >= 0 and closing in shape[start + 1 :]:
            return True
    return False
