"""Vendor C headers -> cffi declarations and function signatures with names.

A real vendor header carries include guards, ``#include``s, ``extern "C"``
blocks, export macros (``X1_API``), ``__attribute__``s, comments and inline
helpers.  cffi's ``cdef`` accepts none of that, so :func:`preprocess` runs a
small C preprocessor: it evaluates conditionals, drops includes and
function-like macros, expands object-like macros, keeps integer ``#define``
constants (cffi exposes them), and strips compiler extensions.  Line
structure is preserved, so a parse error points at the header's own line.

:func:`parse_functions` then reads the preprocessed text with pycparser
(which cffi itself uses) to learn each function's *parameter names*, which is
how the router matches C parameters to aten schema arguments.
"""
from __future__ import annotations

import copy
import hashlib
import re
from dataclasses import dataclass, field
from pathlib import Path

from ..errors import CExprError, HeaderError, NotConstant
from . import cexpr

# What a C compiler on a Linux/GCC host would predefine; enough for the
# `#if defined(__GNUC__)` / `#ifdef _WIN32` switches vendor headers use.
PREDEFINED = {"__GNUC__": "4", "__STDC__": "1", "__STDC_VERSION__": "201112L",
              "__linux__": "1", "__unix__": "1", "__LP64__": "1", "__x86_64__": "1"}

_STD_TYPES = ("size_t ssize_t ptrdiff_t intptr_t uintptr_t int8_t int16_t int32_t int64_t "
              "uint8_t uint16_t uint32_t uint64_t bool _Bool wchar_t FILE va_list").split()

_IDENT = re.compile(r"[A-Za-z_]\w*")
MAX_HEADER_BYTES = 8 << 20     # a runtime header is a few hundred KiB at most
MAX_EXPANDED_LINE = 1 << 16


@dataclass
class Param:
    name: str | None
    ctype: str              # e.g. "const x1_tensor_t *"
    pointer_depth: int
    base: str               # type name without qualifiers and stars, e.g. "x1_tensor_t"
    const_target: bool      # pointer to const


@dataclass
class Function:
    name: str
    returns: str
    params: list[Param]
    line: int

    @property
    def param_names(self) -> list[str | None]:
        return [p.name for p in self.params]


@dataclass
class Header:
    path: str
    cdef: str                       # text cffi accepts
    functions: dict[str, Function]
    constants: dict[str, int] = field(default_factory=dict)   # integer #defines
    typedefs: set[str] = field(default_factory=set)
    enums: dict[str, dict[str, int]] = field(default_factory=dict)  # enum type -> {member: value}

    def constant(self, name: str) -> int | None:
        """An integer #define or enum member, without loading the library."""
        if name in self.constants:
            return self.constants[name]
        for members in self.enums.values():
            if name in members:
                return members[name]
        return None


# ---------------------------------------------------------------- lexing

def _strip_comments(text: str) -> str:
    """Replaces comments by spaces, keeping newlines (and string literals)."""
    out = []
    i, n = 0, len(text)
    while i < n:
        c = text[i]
        if c == "/" and i + 1 < n and text[i + 1] == "*":
            j = text.find("*/", i + 2)
            j = n if j < 0 else j + 2
            out.append(re.sub(r"[^\n]", " ", text[i:j]))
            i = j
        elif c == "/" and i + 1 < n and text[i + 1] == "/":
            j = text.find("\n", i)
            j = n if j < 0 else j
            out.append(" " * (j - i))
            i = j
        elif c in "\"'":
            j = i + 1
            while j < n and text[j] != c and text[j] != "\n":
                j += 2 if text[j] == "\\" else 1
            out.append(text[i:j + 1])
            i = j + 1
        else:
            out.append(c)
            i += 1
    return "".join(out)


def _join_continuations(text: str) -> list[str]:
    """Physical lines, with backslash continuations folded into the first
    line and the continued lines left empty (line numbers stay true)."""
    lines = text.split("\n")
    out: list[str] = []
    i = 0
    while i < len(lines):
        parts, extra = [lines[i]], 0
        while parts[-1].endswith("\\") and i + extra + 1 < len(lines):
            extra += 1
            parts[-1] = parts[-1][:-1]
            parts.append(lines[i + extra])
        out.append(" ".join(parts))
        out.extend([""] * extra)
        i += extra + 1
    return out


# ------------------------------------------- #if and #define arithmetic

def _expand_names(expr: str, table: dict, path: str, line: int) -> str:
    """Object-like macro substitution, repeated (nested macros), bounded:
    a header whose macros grow without end is an error, not a hang."""
    out = _substitute(expr, table, cexpr.MAX_LENGTH)
    if out is None:
        raise HeaderError(path, line, f"macro expansion longer than {cexpr.MAX_LENGTH} characters "
                                      f"(a macro that expands to itself?)")
    return out


def _substitute(text: str, table: dict, limit: int) -> str | None:
    """`text` with the object-like macros of `table` replaced, repeatedly
    (nested macros, at most 8 rounds); None once it grows past `limit`."""
    for _ in range(8):
        new = _IDENT.sub(lambda m: table[m.group(0)] or "" if m.group(0) in table else m.group(0), text)
        if len(new) > limit:
            return None
        if new == text:
            break
        text = new
    return text


def _eval_pp(expr: str, macros: dict[str, str | None], path: str, line: int) -> int:
    # defined(X) / defined X first, then macro expansion, then arithmetic.
    expr = re.sub(r"defined\s*\(\s*(\w+)\s*\)|defined\s+(\w+)",
                  lambda m: "1" if (m.group(1) or m.group(2)) in macros else "0", expr)
    expanded = _expand_names(expr, {k: (v or "0") for k, v in macros.items()}, path, line)
    try:
        return cexpr.evaluate(expanded, lambda name: 0)  # unknown identifiers are 0, as in C
    except CExprError as e:
        raise HeaderError(path, line, f"cannot evaluate #if {expr.strip()[:80]!r}: {e}") from None


def _int_value(value: str, macros: dict[str, str | None], path: str, line: int) -> int | None:
    """Value of a #define body if it is an integer constant expression; None
    when it is something else (a type, an attribute, a string).  A body of
    numbers and operators only that is not a valid, bounded C expression is
    a HeaderError."""
    v = value.strip()
    if not v:
        return None
    try:
        v = _expand_names(v, {k: m for k, m in macros.items() if k not in PREDEFINED}, path, line)
    except HeaderError:
        return None  # too long to be a constant a kernel takes; cffi never sees it
    arithmetic = not _IDENT.search(re.sub(r"(0[xX][0-9a-fA-F]+|0[bB][01]+|\d+)[uUlL]*", "", v)) \
        and re.search(r"\d", v) is not None and not any(c in v for c in "'\".")
    try:
        return cexpr.evaluate(v)
    except CExprError as e:
        if arithmetic:
            raise HeaderError(path, line, f"#define value {value.strip()[:80]!r} is not a valid C integer "
                                          f"constant expression: {e}") from None
        return None


# ------------------------------------------------------------ preprocess

def _strip_extensions(text: str) -> str:
    """Removes compiler extensions cffi/pycparser do not parse."""
    def drop_balanced(src: str, keyword: str) -> str:
        while True:
            m = re.search(r"\b" + keyword + r"\s*\(", src)
            if not m:
                return src
            depth, j = 0, m.end() - 1
            while j < len(src):
                if src[j] == "(":
                    depth += 1
                elif src[j] == ")":
                    depth -= 1
                    if depth == 0:
                        break
                j += 1
            src = src[:m.start()] + re.sub(r"[^\n]", " ", src[m.start():j + 1]) + src[j + 1:]
    for kw in ("__attribute__", "__declspec", "__asm__", "__asm", "_Alignas", "alignas"):
        text = drop_balanced(text, kw)
    text = re.sub(r"\b(__extension__|__inline__|__inline|__restrict__|__restrict|restrict|"
                  r"__cdecl|__stdcall|__fastcall|_Noreturn|__declspec)\b", " ", text)
    return text


def _drop_function_bodies(text: str) -> str:
    """Blanks inline function definitions (`head(...) { ... }` at file scope),
    keeping newlines."""
    out: list[str] = []
    depth = 0
    stmt_start = 0        # index in `out` after the last file-scope ';' or '}'
    last_sig = ""         # last non-space character emitted at file scope
    i, n = 0, len(text)
    while i < n:
        c = text[i]
        if c == "{" and depth == 0 and last_sig == ")":
            j, d = i, 0
            while j < n:
                d += text[j] == "{"
                d -= text[j] == "}"
                if d == 0:
                    break
                j += 1
            out[stmt_start:] = ["\n" if ch == "\n" else " " for ch in out[stmt_start:]]
            out.extend("\n" if ch == "\n" else " " for ch in text[i:j + 1])
            stmt_start, last_sig = len(out), ""
            i = j + 1
            continue
        if c == "{":
            depth += 1
        elif c == "}":
            depth = max(0, depth - 1)
        out.append(c)
        if depth == 0 and c in ";}":
            stmt_start = len(out)
        if depth == 0 and not c.isspace():
            last_sig = c
        i += 1
    return "".join(out)


def preprocess(text: str, path: str = "<header>") -> tuple[str, dict[str, int]]:
    """Returns (cdef text, integer constants)."""
    lines = _join_continuations(_strip_comments(text))
    macros: dict[str, str | None] = dict(PREDEFINED)
    funclike: dict[str, tuple[list[str], str]] = {}
    constants: dict[str, int] = {}
    out: list[str] = []
    # stack of (taking_this_branch, some_branch_taken, parent_active)
    stack: list[list[bool]] = []
    active = True
    for lineno, raw in enumerate(lines, 1):
        s = raw.strip()
        if s.startswith("#"):
            out.append("")
            m = re.match(r"#\s*(\w+)\s*(.*)", s)
            if not m:
                continue
            d, rest = m.group(1), m.group(2).strip()
            if d in ("if", "ifdef", "ifndef"):
                if d == "ifdef":
                    cond = rest.split()[0] in macros if rest else False
                elif d == "ifndef":
                    cond = rest.split()[0] not in macros if rest else True
                else:
                    cond = bool(_eval_pp(rest, macros, path, lineno)) if active else False
                stack.append([active and cond, active and cond, active])
                active = active and cond
            elif d in ("elif", "else"):
                if not stack:
                    raise HeaderError(path, lineno, f"#{d} without #if")
                top = stack[-1]
                if top[1] or not top[2]:
                    top[0] = False
                elif d == "else":
                    top[0] = top[1] = True
                else:
                    top[0] = bool(_eval_pp(rest, macros, path, lineno))
                    top[1] = top[0]
                active = top[0]
            elif d == "endif":
                if not stack:
                    raise HeaderError(path, lineno, "#endif without #if")
                active = stack.pop()[2]
            elif not active:
                continue
            elif d == "define":
                dm = re.match(r"([A-Za-z_]\w*)(\()?\s*(.*)", rest)
                if not dm:
                    raise HeaderError(path, lineno, f"malformed #define {rest!r}")
                name, paren, body = dm.group(1), dm.group(2), dm.group(3)
                if paren:  # function-like: expanded at its uses (attributes, wrappers)
                    pm = re.match(r"([^)]*)\)\s*(.*)", body)
                    if not pm:
                        raise HeaderError(path, lineno, f"malformed #define {rest!r}")
                    params = [x.strip() for x in pm.group(1).split(",") if x.strip()]
                    funclike[name] = (params, pm.group(2))
                    continue
                macros[name] = body
                val = _int_value(body, macros, path, lineno)
                if val is not None:
                    constants[name] = val
                    out[-1] = f"#define {name} {val}"
            elif d == "undef":
                macros.pop(rest.split()[0] if rest else "", None)
                constants.pop(rest.split()[0] if rest else "", None)
            elif d == "error":
                raise HeaderError(path, lineno, f"#error {rest}")
            # include, pragma, line, warning: nothing for cffi
            continue
        if not active:
            out.append("")
            continue
        out.append(raw)
    if stack:
        raise HeaderError(path, len(lines), "unterminated #if/#ifdef block")

    body = "\n".join(out)
    # Expand object-like macros that are not integer constants (export
    # macros such as X1_API, or aliases), in code lines only.
    expand = {k: v or "" for k, v in macros.items() if k not in constants and k not in PREDEFINED}

    def expand_line(lineno: int, line: str) -> str:
        if line.startswith("#define"):
            return line
        out = _substitute(line, expand, MAX_EXPANDED_LINE)
        if out is None:
            raise HeaderError(path, lineno, f"macro expansion makes this line longer than "
                                            f"{MAX_EXPANDED_LINE} characters")
        return out

    body = "\n".join(expand_line(i, ln) for i, ln in enumerate(body.split("\n"), 1))
    body = _expand_calls(body, funclike, path, 4 * len(text) + (1 << 20))
    body = _strip_extensions(body)
    # extern "C" { ... } written without an #ifdef __cplusplus guard
    body = re.sub(r'extern\s+"C"\s*\{', lambda m: re.sub(r"[^\n]", " ", m.group(0)) + "\x00", body)
    if "\x00" in body:
        body = _drop_matching_brace(body)
    body = re.sub(r'extern\s+"C"', "", body)
    body = _drop_function_bodies(body)
    body = re.sub(r"\bstatic\b|\bextern\b", " ", body)
    return body, constants


def _expand_calls(body: str, funclike: dict, path: str = "<header>", limit: int = 1 << 24) -> str:
    """Expands uses of function-like macros by substituting their arguments
    (newlines inside a use are kept, so line numbers stay true).  The text
    may grow to `limit` characters; past that the header is refused."""
    for _ in range(8):
        changed = False
        for name, (params, repl) in funclike.items():
            start = 0
            use = re.compile(r"\b" + re.escape(name) + r"\s*\(")
            while True:
                m = use.search(body, start)
                if not m:
                    break
                depth, j, args, cur = 0, m.end() - 1, [], m.end()
                while j < len(body):
                    c = body[j]
                    if c == "(":
                        depth += 1
                    elif c == ")":
                        depth -= 1
                        if depth == 0:
                            break
                    elif c == "," and depth == 1:
                        args.append(body[cur:j])
                        cur = j + 1
                    j += 1
                args.append(body[cur:j])
                args = [a.strip() for a in args] if any(a.strip() for a in args) else []
                out = repl
                for p, a in zip(params, args):
                    out = re.sub(r"\b" + re.escape(p) + r"\b", lambda _m, a=a: a, out)
                out += "\n" * body[m.start():j + 1].count("\n")
                body = body[:m.start()] + out + body[j + 1:]
                if len(body) > limit:
                    raise HeaderError(path, body.count("\n", 0, m.start()) + 1,
                                      f"expanding macro {name} makes the header longer than {limit} "
                                      f"characters (a macro that expands to itself?)")
                start = m.start() + len(out)
                changed = True
        if not changed:
            break
    return body


def _drop_matching_brace(body: str) -> str:
    """Removes the '}' closing each extern "C" block (opened where NUL marks)."""
    out: list[str] = []
    open_at: list[int] = []   # brace depth at which each extern "C" block opened
    depth = 0
    for c in body:
        if c == "\x00":
            open_at.append(depth)
            continue
        if c == "{":
            depth += 1
        elif c == "}":
            if open_at and depth == open_at[-1]:
                open_at.pop()
                out.append(" ")
                continue
            depth -= 1
        out.append(c)
    return "".join(out)


# ------------------------------------------------------------- functions

def _typedef_prelude(text: str) -> str:
    declared = set(re.findall(r"typedef[^;]*?\b(\w+)\s*;", text))
    return "".join(f"typedef int {t};" for t in _STD_TYPES if t not in declared and t != "_Bool")


def _parse_c(cdef: str, path: str):
    from pycparser import c_parser

    # pycparser does not take #define lines; blank them (keeping lines)
    src = "\n".join("" if ln.startswith("#") else ln for ln in cdef.split("\n"))
    prelude = _typedef_prelude(src)
    try:
        return c_parser.CParser().parse(prelude + "\n" + src, filename=path)
    except RecursionError:
        raise HeaderError(path, 1, "declarations nested too deeply to parse") from None
    except Exception as e:  # noqa: BLE001 - pycparser's ParseError, or its lexer's errors
        m = re.search(r":(\d+):(\d+): (.*)", str(e))
        if m:
            raise HeaderError(path, max(1, int(m.group(1)) - 1), m.group(3)) from None
        raise HeaderError(path, 1, f"cannot parse: {e}") from None


def parse_functions(cdef: str, path: str = "<header>") -> tuple[dict[str, Function], set[str]]:
    """Function declarations with parameter names, and the typedef names."""
    ast = _parse_c(cdef, path)
    try:
        return _functions(ast)
    except RecursionError:
        raise HeaderError(path, 1, "declarations nested too deeply to parse") from None


def _functions(ast) -> tuple[dict[str, Function], set[str]]:
    from pycparser import c_ast, c_generator
    gen = c_generator.CGenerator()
    functions: dict[str, Function] = {}
    typedefs: set[str] = set()

    def describe(node) -> Param:
        t = node.type
        depth = 0
        while isinstance(t, (c_ast.PtrDecl, c_ast.ArrayDecl)):
            depth += 1
            t = t.type
        const_target = isinstance(t, c_ast.TypeDecl) and "const" in (t.quals or [])
        inner = getattr(t, "type", None)
        if isinstance(inner, c_ast.IdentifierType):
            base = " ".join(inner.names)
        else:
            base = getattr(inner, "name", "") or ""
        # the type alone: render with the declarator name removed
        anon = copy.deepcopy(node.type)
        leaf = anon
        while not isinstance(leaf, c_ast.TypeDecl) and hasattr(leaf, "type"):
            leaf = leaf.type
        if isinstance(leaf, c_ast.TypeDecl):
            leaf.declname = None
        ctype = re.sub(r"\s+", " ", gen.visit(anon)).strip()
        return Param(getattr(node, "name", None), ctype, depth, base, const_target and depth > 0)

    for ext in ast.ext:
        if isinstance(ext, c_ast.Typedef):
            typedefs.add(ext.name)
            continue
        if not isinstance(ext, c_ast.Decl) or not isinstance(ext.type, c_ast.FuncDecl):
            continue
        fd = ext.type
        params: list[Param] = []
        if fd.args is not None:
            for p in fd.args.params:
                if isinstance(p, c_ast.EllipsisParam):
                    params.append(Param("...", "...", 0, "...", False))
                    continue
                prm = describe(p)
                if prm.ctype == "void" and prm.pointer_depth == 0 and not prm.name:
                    continue  # f(void)
                params.append(prm)
        ret = gen.visit(fd.type)
        functions[ext.name] = Function(ext.name, re.sub(r"\s+", " ", ret.replace(ext.name, "")).strip(),
                                       params, max(1, ext.coord.line - 1) if ext.coord else 1)
    return functions, typedefs


def _enums(ast, constants: dict[str, int]) -> dict[str, dict[str, int]]:
    """Enum members and values, as C numbers them (a member without a value
    is the previous one plus one).  A value that is not a bounded constant
    ends the enum's known members (cffi reports it when the library loads)."""
    from pycparser import c_ast, c_generator
    gen = c_generator.CGenerator()
    out: dict[str, dict[str, int]] = {}
    known: dict[str, int] = dict(constants)

    def value_of(name):
        if name in known:
            return known[name]
        raise NotConstant(name)

    def collect(enum, key):
        members: dict[str, int] = {}
        nxt = 0
        for e in (enum.values.enumerators if enum.values else ()):
            if e.value is not None:
                try:
                    nxt = cexpr.evaluate(gen.visit(e.value), value_of)
                except (CExprError, RecursionError):
                    break
            members[e.name] = known[e.name] = nxt
            nxt += 1
        out[key] = members

    for ext in ast.ext:
        t = getattr(ext, "type", None)
        t = getattr(t, "type", t) if isinstance(ext, c_ast.Typedef) else t
        if isinstance(t, c_ast.Enum) and t.values is not None:
            key = ext.name if isinstance(ext, c_ast.Typedef) else \
                (f"enum {t.name}" if t.name else f"<enum at line {max(1, ext.coord.line - 1)}>")
            collect(t, key)
    return out


def load_header(path: str | Path) -> Header:
    p = Path(path)
    try:
        with open(p, "rb") as f:
            raw = f.read(MAX_HEADER_BYTES + 1)
    except OSError as e:
        raise HeaderError(str(p), 1, f"cannot read header: {e.strerror or e}") from None
    if len(raw) > MAX_HEADER_BYTES:
        raise HeaderError(str(p), 1, f"larger than {MAX_HEADER_BYTES >> 20} MiB; flbridge reads one "
                                     f"runtime header, not a whole SDK (point runtime_header at it)")
    key = (str(p.resolve()), hashlib.sha256(raw).digest())
    got = _CACHE.get(key)
    if got is None:
        got = _CACHE[key] = _load(p, raw)
        while len(_CACHE) > 16:
            _CACHE.pop(next(iter(_CACHE)))
    return got


# Specs that share a runtime (x1 and its revision 2) parse its header once.
# Headers are not modified after loading; the key includes the content.
_CACHE: dict = {}


def _load(p: Path, raw: bytes) -> Header:
    # comments in other encodings (GBK, Latin-1) are common and harmless
    text = raw.decode("utf-8", errors="replace")
    cdef, constants = preprocess(text, str(p))
    ast = _parse_c(cdef, str(p))
    try:
        functions, typedefs = _functions(ast)
        enums = _enums(ast, constants)
    except RecursionError:
        raise HeaderError(str(p), 1, "declarations nested too deeply to parse") from None
    return Header(str(p), cdef, functions, constants, typedefs, enums)
