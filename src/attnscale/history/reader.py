"""Read, from a release's own source text, how it scales attention logits.

Why by pattern: the question is what the published code did, so the statement is found in
the unpacked distribution by regular expressions over its text, never by a stored line
number or a remembered quote.  The same patterns then work when the statement moves
(``modeling.py`` -> ``modeling_bert.py`` -> ``models/bert/modeling_bert.py``): every ``.py``
file of the package is searched, and a statement is attributed to the class/function that
encloses it (``BertSelfAttention.forward``).

What counts as a scale statement: an assignment whose right side divides by ``sqrt(x)``,
multiplies by ``rsqrt(x)`` or by ``x ** -p``, divides by ``x ** p``, or divides by a bare
per-head size, where ``x`` is a per-head size (``attention_head_size``, ``dim_per_head``,
``key_depth_per_head``, ``key_dim``, ``kv_channels`` ...) or where the statement sits inside
an attention function.  Statements in initialisers (``stddev = ... ** -0.5``) are kept as
``init`` records: Mesh TensorFlow and T5 fold the factor into the initial W_q (and W_k)
instead of applying it in the forward pass, and the reader says so.

TensorFlow code is only read here, never imported.  Strings and comments are blanked before
matching (same length, same lines), so a docstring that says "rsqrt(d_k)" is not a statement.
"""

from __future__ import annotations

import functools
import re
from dataclasses import dataclass, field, replace
from pathlib import Path

from .cache import CacheStatus, unpack
from .releases import Release

# A name that holds the per-head key size d_k (or the last axis of a per-head tensor).
_DK_NAME = re.compile(
    r"(?i)(head_size|head_dim|dim_head|dim_per_head|d_head|per_head|key_dim|kv_channels|key_size|depth_k"
    r"|\bd_k\b|\bdk\b|\.size\(\s*-1\s*\)|shape\[\s*-1\s*\]|shape_list\([^)]*\)\[\s*-1\s*\])")
_ATTENTION_SCOPE = re.compile(r"(?i)attn|attention")
# Candidate lines: anything that could scale by a power of a size.
_SCALE_HINT = re.compile(r"sqrt\(|\*\*|/=?\s*\(?\s*(?:self\.)?[\w.]*(?:head_size|head_dim|dim_head|dim_per_head|d_head"
                         r"|per_head|key_dim|d_k|dk)\b")
_ASSIGNMENT = re.compile(r"^(?P<lhs>[\w.\[\]\s,]+?)\s*(?P<op>[-+*/]?)=(?!=)\s*(?P<rhs>.+)$")
_SQRT_CALL = re.compile(r"(?P<call>(?<![\w.])(?:[A-Za-z_][\w]*\.)*(?P<fn>r?sqrt))\(")
_POWER = re.compile(r"\*\*\s*\(?\s*(?P<sign>-?)\s*(?P<p>\d*\.?\d+)\s*\)?")
_BARE_DIVISION = re.compile(
    r"(?<!/)/(?!/)=?\s*(?P<arg>(?:self\.|config\.)*\w*(?:head_size|head_dim|dim_head|dim_per_head|d_head|per_head|key_dim|d_k|dk)"
    r"\w*(?:\.size)?)(?![\w.(]|\s*\*\*)")
_SCOPE_HEADER = re.compile(r"^(?P<indent>[ \t]*)(?:async\s+)?(?P<kind>class|def)\s+(?P<name>\w+)")
_BLOCK_HEADER = re.compile(r"^(?:if|elif|else)\b.*:$")
_SIMPLE_FLAG = re.compile(r"^(?:if|elif)\s+(?P<negated>not\s+)?(?:self\.)?(?P<flag>\w+)\s*:$")
_INIT_LHS = re.compile(r"(?i)std|init|initializer")
_SKIPPED_FILE = re.compile(r"(_test|^test_\w*|^conftest)\.py$")


@dataclass(frozen=True)
class Term:
    """One factor ``argument ** exponent`` inside a statement."""

    argument: str
    exponent: float

    @property
    def on_dk(self) -> bool:
        return bool(_DK_NAME.search(self.argument))

    @property
    def formula(self) -> str:
        return power_formula(self.argument, self.exponent)


@dataclass(frozen=True)
class ScaleStatement:
    """A statement that scales attention logits (``forward``), defines a scale (``constant``)
    or folds one into an initial weight (``init``), as found in the release's text."""

    path: str
    line: int
    statement: str
    kind: str
    terms: tuple[Term, ...]
    scope: tuple[str, ...]
    guard: str | None = None
    active_by_default: bool | None = True
    roles: tuple[str, ...] = ()
    quantity: str = "factor"
    applied: str | None = None
    release: str = ""

    @property
    def exponent(self) -> float:
        """The power of d_k this statement applies (to the logits, or to a weight's std for ``init``)."""
        scale = 0.5 if self.quantity == "variance" else 1.0
        return scale * sum(t.exponent for t in self.terms if t.on_dk)

    @property
    def depends_on_dk(self) -> bool:
        return any(t.on_dk for t in self.terms)

    @property
    def formula(self) -> str:
        """The factor as the code writes it, e.g. ``1/sqrt(self.attention_head_size)``."""
        text = " * ".join(t.formula for t in self.terms) or "1"
        return f"variance {text}" if self.quantity == "variance" else text

    @property
    def rule(self) -> str:
        """The factor as a function of d_k: ``1/sqrt(d_k)``, ``1/d_k``, ``1 (none)`` ..."""
        if not self.depends_on_dk:
            return f"other: {self.formula}"
        return rule_of(self.exponent)

    def factor(self, d_k: float) -> float:
        """The factor at head size ``d_k`` (the d_k part only)."""
        if d_k <= 0:
            raise ValueError(f"d_k must be positive, got {d_k}")
        return float(d_k) ** self.exponent

    @property
    def where(self) -> str:
        return f"{self.path}:{self.line}"

    @property
    def logit_exponent(self) -> float | None:
        """The power of d_k the statement puts on a q.k logit.

        An init of both W_q and W_k counts twice; a stored constant counts as it is applied
        (``scores * self.scale`` or ``scores / scale``), None when no use of it was found.
        """
        if self.kind == "init":
            return self.exponent * sum(1 for role in self.roles if role in ("q", "k"))
        if self.kind == "constant":
            return {"*": self.exponent, "/": -self.exponent}.get(self.applied)
        return self.exponent


@dataclass(frozen=True)
class Subject:
    """Which code of a package answers "how are the logits scaled".

    ``alternatives``: the class/function that builds the attention, most recent API first; the
    first one the release defines is read (Mesh TensorFlow 0.1.21 still ships the old
    ``multihead_attention_params`` beside T5's ``AttentionParams``; reading both would count
    the factor twice).  ``also``: scopes read in addition (the dot-product itself).
    """

    alternatives: tuple[str, ...]
    also: tuple[str, ...]
    description: str


SUBJECTS = {
    "pytorch-pretrained-bert": Subject(("BertSelfAttention",), (), "BERT self-attention"),
    "pytorch-transformers": Subject(("BertSelfAttention",), (), "BERT self-attention"),
    "transformers": Subject(("BertSelfAttention",), (), "BERT self-attention"),
    "tensor2tensor": Subject(("multihead_attention",), ("dot_product_attention",), "Transformer multihead attention"),
    "fairseq": Subject(("MultiheadAttention",), (), "multi-head attention"),
    "timm": Subject(("Attention",), (), "the vision transformer's attention"),
    "x-transformers": Subject(("Attention",), (), "attention"),
    "mesh-tensorflow": Subject(("AttentionParams", "multihead_attention_params"),
                               ("attention", "dot_product_attention", "dot_product_attention_v2", "multihead_attention"),
                               "attention parameters (T5) and dot-product attention"),
}


@dataclass
class FactorReading:
    """What the subject code does to the logits under its default settings.

    ``forward_exponent`` is the power of d_k the forward pass multiplies q.k by (what a
    black-box probe measures); ``init_exponent`` the power folded into the initial W_q/W_k
    (what Mesh TensorFlow and T5 do instead).  ``None`` means a guard could not be resolved.
    """

    subject: str | None
    defined_at: str | None
    forward_exponent: float | None
    init_exponent: float
    primary: ScaleStatement | None
    statements: list[ScaleStatement] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)

    @property
    def forward_rule(self) -> str:
        return "unknown" if self.forward_exponent is None else rule_of(self.forward_exponent)

    @property
    def where(self) -> str | None:
        """``path:line`` of the statement shown, else of the subject's definition."""
        return self.primary.where if self.primary else self.defined_at

    @property
    def summary(self) -> str:
        """One line: the factor on the logits (at initialisation) and where it comes from."""
        if self.subject is None:
            return "subject not found"
        if self.init_exponent == 0:
            place = "forward" if self.primary else f"no scale statement in {self.subject}"
            return f"{self.forward_rule} ({place})"
        total = None if self.forward_exponent is None else self.forward_exponent + self.init_exponent
        roles = {r for s in self.statements if s.kind == "init" and s.active_by_default for r in s.roles}
        weights = ", ".join(f"W_{r}" for r in ("q", "k") if r in roles)
        return (f"{rule_of(total) if total is not None else 'unknown'} (folded into the init of {weights}; "
                f"forward: {self.forward_rule})")


@dataclass
class ReadResult:
    """One release read: its cache status, every scale statement found, and the subject's reading (None if unreadable)."""

    release: Release
    status: CacheStatus
    statements: list[ScaleStatement]
    reading: FactorReading | None

    @property
    def ok(self) -> bool:
        return self.reading is not None


def rule_of(exponent: float) -> str:
    """The name of ``d_k ** exponent``: ``1/sqrt(d_k)``, ``1/d_k``, ``1 (none)`` or ``d_k^p``."""
    names = {-0.5: "1/sqrt(d_k)", -1.0: "1/d_k", 0.0: "1 (none)", -0.25: "d_k^-1/4", 0.5: "sqrt(d_k)"}
    for value, name in names.items():
        if abs(exponent - value) < 1e-9:
            return name
    return f"d_k^{exponent:g}"


def power_formula(argument: str, exponent: float) -> str:
    """``argument ** exponent`` written the way people write it."""
    if abs(exponent + 0.5) < 1e-9:
        return f"1/sqrt({argument})"
    if abs(exponent + 1) < 1e-9:
        return f"1/{argument}"
    if abs(exponent - 0.5) < 1e-9:
        return f"sqrt({argument})"
    return f"({argument})^{exponent:g}"


# ----------------------------------------------------------------------------- source text

# A comment, or a string: its opening quote, its body (a backslash takes the next character with it, a
# newline included; a one-quote string also ends at a bare newline) and its closing quote where there is one
_STRING_OR_COMMENT = re.compile(r'''
    (?P<comment>\#[^\n]*)
  | (?P<open>"""|\'\'\')(?P<long>(?:[^"'\\]|\\[\s\S]?|(?!(?P=open))["'])*)(?P<long_close>(?P=open))?
  | (?P<quote>["'])(?P<short>(?:(?!(?P=quote))[^\\\n]|\\[\s\S]?)*)(?P<short_close>(?P=quote))?
''', re.VERBOSE)


def _blanked(match: re.Match) -> str:
    if match.group("comment") is not None:
        return " " * len(match.group("comment"))
    long = match.group("open") is not None
    body = match.group("long" if long else "short")
    return (match.group("open" if long else "quote") + "\n".join(" " * len(part) for part in body.split("\n"))
            + (match.group("long_close" if long else "short_close") or ""))


@functools.lru_cache(maxsize=4)
def blank_strings_and_comments(text: str) -> str:
    """``text`` with string bodies and comments replaced by spaces: same length, same line breaks.
    (A file's statements and their guards blank it several times in a row: the last few are kept.)"""
    return _STRING_OR_COMMENT.sub(_blanked, text)


@dataclass(frozen=True)
class LogicalLine:
    first: int   # 1-based number of its first physical line
    last: int
    indent: int
    code: str    # strings and comments blanked, physical lines joined by one space


def logical_lines(text: str) -> list[LogicalLine]:
    """The statements of ``text``, with lines inside brackets or after a backslash joined."""
    code_lines = blank_strings_and_comments(text).split("\n")
    result, buffer, first, depth = [], [], 0, 0
    for number, line in enumerate(code_lines, 1):
        if not buffer:
            if not line.strip():
                continue
            first = number
        buffer.append(line)
        depth += (line.count("(") + line.count("[") + line.count("{")
                  - line.count(")") - line.count("]") - line.count("}"))
        if depth > 0 or line.rstrip().endswith("\\"):
            continue
        joined = " ".join(part.strip().rstrip("\\").strip() for part in buffer)
        indent = len(buffer[0]) - len(buffer[0].lstrip())
        result.append(LogicalLine(first, number, indent, " ".join(joined.split())))
        buffer, depth = [], 0
    return result


def _balanced_after(code: str, open_index: int) -> str:
    """The text inside the bracket that opens at ``open_index``."""
    depth = 0
    for index in range(open_index, len(code)):
        depth += {"(": 1, ")": -1}.get(code[index], 0)
        if depth == 0:
            return code[open_index + 1:index].strip()
    return code[open_index + 1:].strip()


def _matching_open(code: str, close_index: int) -> int:
    """The index of the bracket that the ``)`` or ``]`` at ``close_index`` closes (0 if none)."""
    depth = 0
    for back in range(close_index, -1, -1):
        depth += {")": 1, "]": 1, "(": -1, "[": -1}.get(code[back], 0)
        if depth == 0:
            return back
    return 0


def _operand_before(code: str, end: int) -> tuple[str, int]:
    """The operand that ends just before ``end`` (a dotted name, a call, a subscript, a bracketed
    group) and the index where it starts."""
    index = end
    while index > 0 and code[index - 1] == " ":
        index -= 1
    stop = index
    while index > 0:
        char = code[index - 1]
        if char in ")]":
            index = _matching_open(code, index - 1)
        elif char.isalnum() or char in "_.":
            index -= 1
        else:
            break
    operand = code[index:stop].strip()
    while operand.startswith("(") and _matching_open(operand, len(operand) - 1) == 0 and operand.endswith(")"):
        operand = operand[1:-1].strip()
    return operand, index


def _operator_before(code: str, start: int) -> str:
    """The operator that applies the operand starting at ``start``: '/' or '*' (also for '/=' and '*=')."""
    index = start
    while index > 0 and code[index - 1] in " (":
        index -= 1
    if index > 1 and code[index - 1] == "=" and code[index - 2] in "/*":
        return code[index - 2]
    return code[index - 1] if index > 0 and code[index - 1] in "/*" else "*"


def scale_terms(rhs: str, op: str = "") -> list[Term]:
    """The ``x ** p`` factors of an expression: ``/ sqrt(x)``, ``* rsqrt(x)``, ``x ** -p``, ``/ (x ** p)``, ``/ d_head``.

    ``op`` is the operator of an augmented assignment (``/`` for ``/=``), which applies to the whole right side.
    """
    expression = f"{op}= {rhs}" if op in ("/", "*") else rhs
    terms: list[Term] = []
    for match in _SQRT_CALL.finditer(expression):
        argument = _balanced_after(expression, match.end() - 1)
        sign = -1 if _operator_before(expression, match.start("call")) == "/" else 1
        exponent = sign * (-0.5 if match.group("fn") == "rsqrt" else 0.5)
        terms.append(Term(_strip_casts(argument), exponent))
    for match in _POWER.finditer(expression):
        power = float(match.group("p")) * (-1 if match.group("sign") else 1)
        if power >= 1:  # squares and cubes are not scale factors
            continue
        operand, start = _operand_before(expression, match.start())
        if not operand or operand[0].isdigit() or "sqrt(" in operand:
            continue
        sign = -1 if _operator_before(expression, start) == "/" else 1
        terms.append(Term(_strip_casts(operand), sign * power))
    for match in _BARE_DIVISION.finditer(expression):
        terms.append(Term(match.group("arg"), -1.0))
    return terms


def _strip_casts(argument: str) -> str:
    """``float(x)``, ``tf.to_float(x)``, ``tf.cast(x, ...)`` -> ``x``: casts do not change the factor."""
    match = re.fullmatch(r"(?:float|int|tf\.to_float|tf\.cast|torch\.tensor)\((.*)\)", argument.strip())
    if not match:
        return argument.strip()
    inner = match.group(1)
    return _strip_casts(inner.split(",")[0] if inner.count(",") and "(" not in inner.split(",")[0] else inner)


# ----------------------------------------------------------------------------- context

def enclosing_scopes(lines: list[LogicalLine], index: int) -> tuple[str, ...]:
    """The names of the classes/functions around ``lines[index]``, outermost first."""
    names, indent = [], lines[index].indent
    for back in range(index - 1, -1, -1):
        line = lines[back]
        if line.indent >= indent:
            continue
        header = _SCOPE_HEADER.match(" " * line.indent + line.code)
        if header:
            names.append(header.group("name"))
        indent = line.indent
        if indent == 0:
            break
    return tuple(reversed(names))


def block_guard(lines: list[LogicalLine], index: int) -> LogicalLine | None:
    """The ``if``/``elif``/``else`` header directly around ``lines[index]``, if any."""
    indent = lines[index].indent
    for back in range(index - 1, -1, -1):
        line = lines[back]
        if line.indent < indent:
            return line if _BLOCK_HEADER.match(line.code) else None
    return None


def flag_default(text: str, flag: str) -> bool | None:
    """The default a keyword parameter ``flag`` has in the signatures of ``text``; None if absent or mixed."""
    values = set(re.findall(rf"[(,]\s*{re.escape(flag)}\s*=\s*(True|False)\s*[,)]", blank_strings_and_comments(text)))
    return (values.pop() == "True") if len(values) == 1 else None


def guard_active(guard: LogicalLine | None, text: str) -> bool | None:
    """Whether a simple ``if [not] [self.]flag:`` guard holds under the flag's default; None if unknown."""
    if guard is None:
        return True
    match = _SIMPLE_FLAG.match(guard.code)
    if not match:
        return None
    default = flag_default(text, match.group("flag"))
    if default is None:
        return None
    return default != bool(match.group("negated"))


def init_roles(lhs: str, lines: list[LogicalLine], index: int) -> tuple[str, ...]:
    """Which weights an init statement scales: from its name (``qk_stddev``), else from the
    ``q_init = ...(stddev=stddev)`` line that uses it next."""
    name = lhs.strip().split(".")[-1]
    prefix = re.match(r"(?i)(qkv|qk|kv|q|k|v|o)_", name)
    if prefix:
        return tuple(prefix.group(1).lower())
    for later in lines[index + 1:index + 6]:
        use = re.match(rf"(?P<who>\w+?)_init\w*\s*=.*\b(?:stddev|scale)\s*=\s*{re.escape(name)}\b", later.code)
        if use:
            return tuple(use.group("who").lower()) if use.group("who").lower() in ("q", "k", "qk", "kv", "v") else ("?",)
    return ("?",)


def init_quantity(lhs: str, lines: list[LogicalLine], index: int) -> str:
    """``variance`` when the value feeds a variance-scaling initialiser, else ``std``."""
    name = re.escape(lhs.strip().split(".")[-1])
    for later in lines[index + 1:index + 4]:
        if re.search(rf"VarianceScaling\w*\(\s*(?:scale\s*=\s*)?{name}\b", later.code):
            return "variance"
    return "std"


# ----------------------------------------------------------------------------- scanning

def classify(lhs: str, op: str, rhs: str, terms: list[Term]) -> str:
    """``init`` for an initial-weight scale; ``constant`` for a stored scale that is only the
    factor (``self.scale = 1 / (d_head ** 0.5)``, used later as ``scores * self.scale``);
    else ``forward`` (applied to the tensor itself, e.g. ``logits = qk / np.sqrt(dk)``)."""
    name = lhs.strip().split(".")[-1]
    if _INIT_LHS.search(name) or "initializer" in rhs:
        return "init"
    factor_only = re.match(r"^\(?\s*(?:\d|(?:[\w.]+\.)?r?sqrt\()", rhs) or (
        terms and rhs.lstrip("( ").startswith(terms[0].argument))
    if re.search(r"(?i)scal", name) and not op and factor_only:
        return "constant"
    return "forward"


def constant_use(code: str, lhs: str) -> str | None:
    """How a stored scale is applied in the (blanked) file: ``*`` or ``/``; None if not found or both."""
    name = re.escape(lhs.strip())
    uses = set(re.findall(rf"(?<![*/])([*/])=?[ \t]*\(?[ \t]*{name}\b(?![ \t]*[(.\w])", code))
    uses |= set(re.findall(rf"(?<![\w.]){name}[ \t]*([*])(?![*=])", code))
    if not uses:  # passed by keyword to the function that applies it (transformers 5: ``scaling=self.scaling``)
        for keyword in set(re.findall(rf"\b(\w+)[ \t]*=[ \t]*{name}\b(?![ \t]*[(.\w])", code)):
            if keyword != lhs.strip():
                uses |= set(re.findall(rf"(?<![*/])([*/])=?[ \t]*\(?[ \t]*{keyword}\b(?![ \t]*[(.\w=])", code))
    return uses.pop() if len(uses) == 1 else None


def _is_normalisation(terms: list[Term]) -> bool:
    """``x * rsqrt(variance + eps)``: a norm inside an attention module, not a logit scale."""
    return any(re.search(r"(?i)var|eps", t.argument) for t in terms)


def scan_source(text: str, path: str) -> list[ScaleStatement]:
    """Every scale statement in one file's text (path is recorded as given)."""
    lines = logical_lines(text)
    physical = text.splitlines()
    code = blank_strings_and_comments(text)
    found = []
    for index, line in enumerate(lines):
        if not _SCALE_HINT.search(line.code):
            continue
        assignment = _ASSIGNMENT.match(line.code)
        if not assignment or assignment.group("lhs").strip().startswith(("def ", "class ", "return ")):
            continue
        terms = scale_terms(assignment.group("rhs"), assignment.group("op"))
        if not terms:
            continue
        scope = enclosing_scopes(lines, index)
        attention = any(_ATTENTION_SCOPE.search(name) for name in scope)
        on_dk = any(t.on_dk for t in terms)
        downscale = any(t.exponent < 0 for t in terms)
        if not on_dk and not (attention and downscale and not _is_normalisation(terms)):
            continue
        lhs = assignment.group("lhs")
        kind = classify(lhs, assignment.group("op"), assignment.group("rhs"), terms)
        guard = block_guard(lines, index)
        found.append(ScaleStatement(
            path=path, line=line.first, statement=_source_of(physical, line), kind=kind, terms=tuple(terms),
            scope=scope, guard=_source_of(physical, guard) if guard else None,
            active_by_default=guard_active(guard, text),
            roles=init_roles(lhs, lines, index) if kind == "init" else (),
            quantity=init_quantity(lhs, lines, index) if kind == "init" else "factor",
            applied=constant_use(code, lhs) if kind == "constant" else None))
    return found


def _source_of(physical: list[str], line: LogicalLine) -> str:
    """The original text of a logical line (comments kept), its physical lines joined by one space."""
    return " ".join(part.strip() for part in physical[line.first - 1:line.last])


def python_files(root: Path, import_name: str) -> list[Path]:
    """The package's ``.py`` files, tests left out (they check the code; they are not it)."""
    package = root / import_name
    if not package.is_dir():
        raise ValueError(f"{root} has no package folder {import_name!r}")
    return sorted(p for p in package.rglob("*.py") if not _SKIPPED_FILE.search(p.name))


def scan_tree(root: Path, import_name: str, release_label: str = "") -> list[ScaleStatement]:
    """Every scale statement of the package ``import_name`` under ``root``, file by file."""
    statements = []
    for file in python_files(Path(root), import_name):
        text = file.read_text(encoding="utf-8", errors="replace")
        relative = file.relative_to(root).as_posix()
        statements.extend(replace(item, release=release_label) for item in scan_source(text, relative))
    return statements


_DEFINITION = r"^[ \t]*(?:class|def)[ \t]+{name}\b"


def find_definition(root: Path, import_name: str, names: tuple[str, ...]) -> tuple[str, str] | None:
    """The first of ``names`` (in order of preference) that the package defines, and ``path:line``."""
    files = [(f, blank_strings_and_comments(f.read_text(encoding="utf-8", errors="replace")))
             for f in python_files(Path(root), import_name)]
    for name in names:
        pattern = re.compile(_DEFINITION.format(name=re.escape(name)), re.MULTILINE)
        for file, code in files:
            match = pattern.search(code)
            if match:
                line = code.count("\n", 0, match.start()) + 1
                return name, f"{file.relative_to(root).as_posix()}:{line}"
    return None


def subject_reading(statements: list[ScaleStatement], subject: str | None, defined_at: str | None,
                    also: tuple[str, ...] = ()) -> FactorReading:
    """The subject's factor under default settings.

    Active forward statements multiply the logits; active init statements fold a factor into
    W_q/W_k; statements behind a guard that is off by default (or cannot be resolved) become notes.
    """
    if subject is None:
        return FactorReading(None, None, None, 0.0, None)
    scopes = (subject, *also)
    chosen = [s for s in statements if any(name in scopes for name in s.scope) and s.depends_on_dk]
    notes, forward, init, unknown = [], 0.0, 0.0, False
    for item in chosen:
        if item.active_by_default is False:
            notes.append(f"off by default ({item.guard}): {item.where} {item.statement}")
        elif item.active_by_default is None:
            notes.append(f"conditional, default unknown ({item.guard}): {item.where} {item.statement}")
            unknown = unknown or item.kind != "init"
        elif item.logit_exponent is None:
            notes.append(f"stored scale whose use was not found: {item.where} {item.statement}")
            unknown = True
        elif item.kind == "init":
            init += item.logit_exponent
        else:
            forward += item.logit_exponent
    active = [s for s in chosen if s.active_by_default]
    primary = next((s for s in active if s.kind != "init"), None) or next(iter(active), None)
    return FactorReading(subject, defined_at, None if unknown else forward, init, primary, chosen, notes)


def read_tree(root: Path, import_name: str, subject: Subject, label: str = "") -> tuple[list[ScaleStatement], FactorReading]:
    """Every scale statement of an unpacked package, and the subject's reading."""
    statements = scan_tree(root, import_name, label)
    found = find_definition(root, import_name, subject.alternatives)
    name, where = found if found else (None, None)
    return statements, subject_reading(statements, name, where, subject.also)


def read_release(cache_dir, release: Release) -> ReadResult:
    """Unpack (if needed) and read one release; a release that is not usable gives its status and no reading."""
    unpacked = unpack(cache_dir, release)
    if unpacked.root is None:
        return ReadResult(release, unpacked.status, [], None)
    statements, reading = read_tree(unpacked.root, release.import_name, SUBJECTS[release.package], release.label)
    return ReadResult(release, unpacked.status, statements, reading)
