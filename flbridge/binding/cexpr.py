"""C integer constant expressions (``#if`` conditions, ``#define`` values),
evaluated with C's operators and 64-bit bounds.

Python's ``eval`` would accept ``9**9**9`` or ``1 << 40000000000`` and run
for minutes or exhaust memory; C has no ``**`` and its constants fit in 64
bits.  Here every literal and every intermediate result must fit in
[-2**63, 2**64), a shift count must be 0..63, and division by zero is an
error, so evaluation is linear in the expression's length.
"""
from __future__ import annotations

import re

from ..errors import CExprError, NotConstant

MIN_VALUE = -(1 << 63)
MAX_VALUE = (1 << 64) - 1
MAX_LENGTH = 4096          # characters of one expression, after macro expansion
MAX_DEPTH = 200            # nested parentheses and unary operators

_TOKEN = re.compile(r"\s*(?:"
                    r"(?P<num>(?:0[xX][0-9a-fA-F]+|0[bB][01]+|\d+)[uUlL]*)"
                    r"|(?P<char>'(?:\\.|[^'\\])+')"
                    r"|(?P<ident>[A-Za-z_]\w*)"
                    r"|(?P<op>&&|\|\||==|!=|<=|>=|<<|>>|[-+*/%<>!~&|^()?:])"
                    r")")
_ESCAPES = {"n": 10, "t": 9, "r": 13, "0": 0, "\\": 92, "'": 39, '"': 34, "a": 7, "b": 8, "f": 12, "v": 11}

# binary operators: precedence (higher binds tighter)
_BINARY = {"*": 10, "/": 10, "%": 10, "+": 9, "-": 9, "<<": 8, ">>": 8, "<": 7, ">": 7, "<=": 7, ">=": 7,
           "==": 6, "!=": 6, "&": 5, "^": 4, "|": 3, "&&": 2, "||": 1}


def tokenize(text: str) -> list[tuple[str, str]]:
    if len(text) > MAX_LENGTH:
        raise CExprError(f"expression longer than {MAX_LENGTH} characters")
    out, pos = [], 0
    while pos < len(text):
        if text[pos:].strip() == "":
            break
        m = _TOKEN.match(text, pos)
        if not m:
            raise CExprError(f"unexpected {text[pos:].strip()[:20]!r}")
        kind = m.lastgroup
        out.append((kind, m.group(kind)))
        pos = m.end()
    return out


def _literal(tok: str) -> int:
    digits = tok.rstrip("uUlL")
    if digits[:2] in ("0x", "0X"):
        v = int(digits, 16)
    elif digits[:2] in ("0b", "0B"):
        v = int(digits[2:], 2)
    elif len(digits) > 1 and digits[0] == "0":
        if not all(c in "01234567" for c in digits):
            raise CExprError(f"invalid octal constant {tok!r}")
        v = int(digits, 8)
    else:
        if len(digits) > 20:
            raise CExprError(f"integer constant {tok[:24]!r}... does not fit in 64 bits")
        v = int(digits)
    return _check(v, tok)


def _char(tok: str) -> int:
    body = tok[1:-1]
    if body.startswith("\\"):
        if body[1:2] in _ESCAPES and len(body) == 2:
            return _ESCAPES[body[1]]
        if body[1:2] in ("x", "X") and len(body) <= 4:
            return int(body[2:], 16)
        if body[1:].isdigit() and len(body) <= 4:
            return int(body[1:], 8)
        raise CExprError(f"unsupported character constant {tok}")
    if len(body) != 1:
        raise CExprError(f"multi-character constant {tok}")
    return ord(body)


def _check(v: int, what: str) -> int:
    if not MIN_VALUE <= v <= MAX_VALUE:
        raise CExprError(f"{what!s:.40} does not fit in 64 bits")
    return v


class _Parser:
    def __init__(self, tokens, identifier):
        self.toks, self.i, self.identifier = tokens, 0, identifier
        self.depth = 0

    def peek(self):
        return self.toks[self.i] if self.i < len(self.toks) else ("end", "")

    def take(self):
        t = self.peek()
        self.i += 1
        return t

    def expect(self, op):
        kind, val = self.take()
        if (kind, val) != ("op", op):
            raise CExprError(f"expected '{op}'" + (f" before {val!r}" if val else " at the end"))

    def parse(self) -> int:
        if not self.toks:
            raise CExprError("empty expression")
        v = self.ternary()
        if self.i != len(self.toks):
            raise CExprError(f"unexpected {self.peek()[1]!r}")
        return v

    def ternary(self) -> int:
        cond = self.binary(1)
        if self.peek() == ("op", "?"):
            self.take()
            a = self.ternary()
            self.expect(":")
            b = self.ternary()
            return a if cond else b
        return cond

    def binary(self, min_prec: int) -> int:
        left = self.unary()
        while True:
            kind, op = self.peek()
            prec = _BINARY.get(op) if kind == "op" else None
            if prec is None or prec < min_prec:
                return left
            self.take()
            right = self.binary(prec + 1)
            left = _apply(op, left, right)

    def unary(self) -> int:
        self.depth += 1
        if self.depth > MAX_DEPTH:
            raise CExprError(f"nested more than {MAX_DEPTH} deep")
        try:
            return self._unary()
        finally:
            self.depth -= 1

    def _unary(self) -> int:
        kind, val = self.take()
        if kind == "num":
            return _literal(val)
        if kind == "char":
            return _char(val)
        if kind == "ident":
            return self.identifier(val)
        if kind == "op" and val == "(":
            v = self.ternary()
            self.expect(")")
            return v
        if kind == "op" and val in ("-", "+", "~", "!"):
            v = self.unary()
            if val == "-":
                return _check(-v, "negation")
            if val == "~":
                return ~v if v < 0 or v < (1 << 63) else (~v) & MAX_VALUE
            return int(not v) if val == "!" else v
        if kind == "op" and val == "*":
            raise NotConstant("'*' is a dereference here, not a constant")
        raise CExprError(f"unexpected {val!r}" if val else "unexpected end of expression")


def _apply(op: str, a: int, b: int) -> int:
    if op in ("/", "%"):
        if b == 0:
            raise CExprError("division by zero")
        q = abs(a) // abs(b) * (1 if (a < 0) == (b < 0) else -1)   # C truncates toward zero
        return _check(q if op == "/" else a - q * b, op)
    if op in ("<<", ">>"):
        if not 0 <= b <= 63:
            raise CExprError(f"shift by {b} (C allows 0 to 63 for a 64-bit value)")
        return _check(a << b, f"{a} << {b}") if op == "<<" else a >> b
    if op == "&&":
        return int(bool(a) and bool(b))
    if op == "||":
        return int(bool(a) or bool(b))
    v = {"*": lambda: a * b, "+": lambda: a + b, "-": lambda: a - b, "<": lambda: int(a < b),
         ">": lambda: int(a > b), "<=": lambda: int(a <= b), ">=": lambda: int(a >= b),
         "==": lambda: int(a == b), "!=": lambda: int(a != b), "&": lambda: a & b,
         "^": lambda: a ^ b, "|": lambda: a | b}[op]()
    return _check(v, f"{a} {op} {b}")


def evaluate(text: str, identifier=None) -> int:
    """The value of `text`.  `identifier(name)` gives a name's value (raise
    NotConstant for names that are not integers); by default every name is
    an error.  Raises CExprError."""
    def no_names(name):
        raise NotConstant(f"'{name}' is not an integer constant")
    return _Parser(tokenize(text), identifier or no_names).parse()
