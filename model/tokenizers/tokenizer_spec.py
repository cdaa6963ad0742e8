"""The normalizer, pre-tokenizer and decoder of a tokenizer.json as the JSON specs the library
writes for them: what style they make (byte-level? which character stands for a space?), what
they may do to a prompt (insert text, run regexes), and the leading-space switches a
tokenizer_config.json may set.

The library runs each regex with a backtracking engine (Oniguruma), so one hostile pattern can
take exponential time on a line of text, until the engine's retry limit makes the library panic
(an exception no caller expects). Before a tokenizer is used, every regex of its
normalizer and pre-tokenizer is checked: at most MAX_PATTERNS of them, each at most
MAX_PATTERN_CHARS long, with at most MAX_ALTERNATIVES alternatives, and no repeated group that
itself repeats or branches (`(a+)+`, `(a|aa)*`), the shapes that backtrack exponentially. The
patterns real tokenizers use (GPT-2's, Llama 3's, Qwen's: a few hundred characters, a dozen
alternatives, quantifiers only on single characters and classes) pass.
"""

from __future__ import annotations

import json

from transformer_viewer.model.errors import CheckpointError

MAX_INSERT = 16  # characters a normalizer may put in at once (Llama's "▁" is one)
METASPACE = "▁"
MAX_PATTERNS = 32  # regexes in one tokenizer; real ones have one to three
MAX_PATTERN_CHARS = 2000  # GPT-4o's split pattern, among the longest, is about 400
MAX_ALTERNATIVES = 64  # `|` branches in one pattern; real ones have up to a dozen
MAX_BOUNDED_REPEAT = 16  # `{n,m}` with m above this counts as unbounded
FIX = "restore the model's own tokenizer.json"


def check_patterns(path: str, *specs) -> None:
    """Refuse, in one line naming `path`, a normalizer/pre-tokenizer spec whose regexes could stall."""
    patterns = [p for spec in specs for p in _regexes(spec)]
    if len(patterns) > MAX_PATTERNS:
        raise CheckpointError(f"{path}: its normalizer and pre-tokenizer run {len(patterns)} regexes, more than a real "
                              f"tokenizer's few (at most {MAX_PATTERNS}); {FIX}")
    for pattern in patterns:
        problem = pattern_problem(pattern)
        if problem:
            shown = pattern if len(pattern) <= 40 else pattern[:40] + "…"
            raise CheckpointError(f"{path}: the regex {shown!r} {problem}, a shape that can stall the tokenizer "
                                  f"on one line of text; {FIX}")


def pattern_problem(pattern: str) -> str | None:
    """Why `pattern` is refused (a few words), or None when its shape is safe to run."""
    if len(pattern) > MAX_PATTERN_CHARS:
        return f"is {len(pattern):,} characters long (at most {MAX_PATTERN_CHARS:,})"
    # One frame per open group: [has a repeat inside, has an alternation inside].
    stack = [[False, False]]
    alternatives = 1
    i, n = 0, len(pattern)
    closed: list[bool] | None = None  # the group that just closed, when a quantifier may follow it
    while i < n:
        c = pattern[i]
        after_group, closed = closed, None
        if c == "\\":
            i += 2
            continue
        if c == "[":
            i = _class_end(pattern, i)
            continue
        if c == "(":
            stack.append([False, False])
            i = _group_body(pattern, i)
            continue
        elif c == ")" and len(stack) > 1:
            closed = stack.pop()
            stack[-1][0] |= closed[0]
        elif c == "|":
            stack[-1][1] = True
            alternatives += 1
        elif c in "*+?{":
            unbounded, i = _quantifier(pattern, i)
            stack[-1][0] = True  # even `?`: `(a?)+` backtracks as `(a+)+` does
            if unbounded:
                if after_group is not None and (after_group[0] or after_group[1]):
                    kind = "a repeat" if after_group[0] else "alternatives"
                    return f"repeats a group that holds {kind} (nested quantifiers)"
            continue
        i += 1
    if alternatives > MAX_ALTERNATIVES:
        return f"has {alternatives:,} alternatives (at most {MAX_ALTERNATIVES})"
    return None


def _group_body(pattern: str, i: int) -> int:
    """The index where the body of the group opening at i starts: past `(`, and past a `(?:`,
    `(?i:`, `(?=`, `(?<!`, `(?<name>` or `(?>` prefix (its `?` is syntax, not a quantifier)."""
    i += 1
    if not pattern.startswith("?", i):
        return i
    i += 1
    if pattern.startswith("<", i) and not pattern.startswith(("<=", "<!"), i):
        end = pattern.find(">", i)
        return len(pattern) if end < 0 else end + 1
    while i < len(pattern) and (pattern[i].isalpha() or pattern[i] == "-"):
        i += 1  # inline flags: (?i: ...), (?-i: ...)
    if pattern.startswith(("<=", "<!"), i):
        return i + 2
    return i + 1 if i < len(pattern) and pattern[i] in ":=!>" else i


def _quantifier(pattern: str, i: int) -> tuple[bool, int]:
    """(whether the quantifier at i repeats without a small bound, the index after it and its
    lazy/possessive mark)."""
    c = pattern[i]
    if c == "{":
        end = pattern.find("}", i)
        body = pattern[i + 1:end] if end > 0 else ""
        lo, sep, hi = body.partition(",")
        if end < 0 or not _digits(lo.strip()) or (hi.strip() and not _digits(hi.strip())):
            return False, i + 1  # a literal brace, as Oniguruma reads it (`a{²}` too: no ASCII digits)
        unbounded = bool(sep) and (not hi.strip() or int(hi) > MAX_BOUNDED_REPEAT)
        unbounded = unbounded or int(lo) > MAX_BOUNDED_REPEAT
        i = end + 1
    else:
        unbounded = c != "?"
        i += 1
    if i < len(pattern) and pattern[i] in "?+":
        i += 1
    return unbounded, i


def _digits(text: str) -> bool:
    """ASCII digits only: `str.isdigit` is also true for `²` and `٣`, which no regex engine counts."""
    return text.isascii() and text.isdigit()


def _class_end(pattern: str, i: int) -> int:
    """The index after the character class that opens at i (nested classes and escapes included)."""
    depth, i = 0, i
    n = len(pattern)
    while i < n:
        c = pattern[i]
        if c == "\\":
            i += 2
            continue
        if c == "[":
            depth += 1
            if i + 1 < n and pattern[i + 1] == "^":
                i += 1
            if i + 1 < n and pattern[i + 1] == "]":  # a ] first in a class is literal
                i += 1
        elif c == "]":
            depth -= 1
            if depth == 0:
                return i + 1
        i += 1
    return n


def _regexes(node) -> list[str]:
    """Every regex in a spec: `{"pattern": {"Regex": ...}}` of a Split or Replace, at any depth."""
    out = []
    if isinstance(node, dict):
        pattern = node.get("pattern")
        if isinstance(pattern, dict) and isinstance(pattern.get("Regex"), str):
            out.append(pattern["Regex"])
        for v in node.values():
            if isinstance(v, (dict, list)):
                out.extend(_regexes(v))
    elif isinstance(node, list):
        for v in node:
            out.extend(_regexes(v))
    return out


def spec_of(part) -> dict | None:
    """A normalizer's, pre-tokenizer's or decoder's own spec, as JSON the library writes."""
    return None if part is None else json.loads(part.__getstate__())


def has_type(node, kind: str) -> bool:
    """Whether a pre-tokenizer/decoder spec, or one nested in a Sequence, is of type `kind`."""
    if isinstance(node, dict):
        return node.get("type") == kind or any(has_type(v, kind) for v in node.values() if isinstance(v, list))
    if isinstance(node, list):
        return any(has_type(v, kind) for v in node)
    return False


def respace(node, add_prefix_space: bool | None, legacy: bool | None) -> bool:
    """Set the leading-space switches of a pre-tokenizer spec (and those nested in a Sequence) as
    transformers builds them from the config; whether anything changed. A switch the config does
    not name keeps the file's setting."""
    changed = False
    if isinstance(node, list):
        return any([respace(v, add_prefix_space, legacy) for v in node])
    if not isinstance(node, dict):
        return False
    if node.get("type") == "ByteLevel" and add_prefix_space is not None:
        changed = node.get("add_prefix_space") != add_prefix_space
        node["add_prefix_space"] = add_prefix_space
    elif node.get("type") == "Metaspace":
        scheme = node.get("prepend_scheme", "always")
        add = scheme != "never" if add_prefix_space is None else add_prefix_space
        old = scheme == "always" if legacy is None else legacy
        node["prepend_scheme"] = ("always" if old else "first") if add else "never"
        changed = node["prepend_scheme"] != scheme
    for v in node.values():
        if isinstance(v, (dict, list)):
            changed = respace(v, add_prefix_space, legacy) or changed
    return changed


def longest_insert(node) -> int:
    """The longest text a normalizer spec inserts (a Replace's content, a Prepend's prefix)."""
    if isinstance(node, dict):
        own = [len(node[k]) for k in ("content", "prepend") if isinstance(node.get(k), str)]
        return max([*own, *(longest_insert(v) for v in node.values() if isinstance(v, (dict, list)))], default=0)
    if isinstance(node, list):
        return max((longest_insert(v) for v in node), default=0)
    return 0


def metaspace_char(spec: dict) -> str:
    """The character that stands for a space in vocabulary entries: Metaspace's replacement, or the
    one a Replace decoder turns into a space (Llama 2's), else SentencePiece's usual `▁`."""
    found = []

    def walk(node):
        if isinstance(node, dict):
            if node.get("type") == "Metaspace" and isinstance(node.get("replacement"), str):
                found.append(node["replacement"])
            if (node.get("type") == "Replace" and node.get("content") == " "
                    and isinstance(node.get("pattern"), dict) and isinstance(node["pattern"].get("String"), str)):
                found.append(node["pattern"]["String"])
            for v in node.values():
                if isinstance(v, (dict, list)):
                    walk(v)
        elif isinstance(node, list):
            for v in node:
                walk(v)

    walk(spec.get("pre_tokenizer"))
    walk(spec.get("decoder"))
    return next((c for c in found if c), METASPACE)
