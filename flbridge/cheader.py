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
import re
from dataclasses import dataclass, field
from pathlib import Path

from .errors import HeaderError

# What a C compiler on a Linux/GCC host would predefine; enough for the
# `#if defined(__GNUC__)` / `#ifdef _WIN32` switches vendor headers use.
PREDEFINED = {"__GNUC__": "4", "__STDC__": "1", "__STDC_VERSION__": "201112L",
              "__linux__": "1", "__unix__": "1", "__LP64__": "1", "__x86_64__": "1"}

_STD_TYPES = ("size_t ssize_t ptrdiff_t intptr_t uintptr_t int8_t int16_t int32_t int64_t "
              "uint8_t uint16_t uint32_t uint64_t bool _Bool wchar_t FILE va_list").split()

_IDENT = re.compile(r"[A-Za-z_]\w*")
_INT_LITERAL = re.compile(r"^(0[xX][0-9a-fA-F]+|0[0-7]*|[1-9][0-9]*)[uUlL]*$")


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
    constants: dict[str, int] = field(default_factory=dict)
    typedefs: set[str] = field(default_factory=set)


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
        line, extra = lines[i], 0
        while line.endswith("\\") and i + extra + 1 < len(lines):
            extra += 1
            line = line[:-1] + " " + lines[i + extra]
        out.append(line)
        out.extend([""] * extra)
        i += extra + 1
    return out


# ------------------------------------------------- #if expression evaluator

_PP_TOKEN = re.compile(r"\s*(0[xX][0-9a-fA-F]+[uUlL]*|\d+[uUlL]*|[A-Za-z_]\w*|&&|\|\||==|!=|<=|>=|<<|>>|[-+*/%<>!~&|^()?:])")


def _eval_pp(expr: str, macros: dict[str, str | None], path: str, line: int) -> int:
    # defined(X) / defined X first, then macro expansion, then arithmetic.
    expr = re.sub(r"defined\s*\(\s*(\w+)\s*\)|defined\s+(\w+)",
                  lambda m: "1" if (m.group(1) or m.group(2)) in macros else "0", expr)
    for _ in range(8):
        new = _IDENT.sub(lambda m: (macros.get(m.group(0)) or "0")
                         if m.group(0) in macros else m.group(0), expr)
        if new == expr:
            break
        expr = new
    tokens, pos = [], 0
    while pos < len(expr):
        if expr[pos:].strip() == "":
            break
        m = _PP_TOKEN.match(expr, pos)
        if not m:
            raise HeaderError(path, line, f"cannot evaluate #if expression near {expr[pos:]!r}")
        tokens.append(m.group(1))
        pos = m.end()
    py = []
    for t in tokens:
        if re.match(r"^(0[xX][0-9a-fA-F]+|\d+)[uUlL]*$", t):
            py.append(str(int(t.rstrip("uUlL"), 0) if not re.match(r"^0\d", t) else int(t.rstrip("uUlL"), 8)))
        elif _IDENT.fullmatch(t):
            py.append("0")  # unknown identifiers are 0, as in C
        else:
            py.append({"&&": " and ", "||": " or ", "!": " not ", "/": "//"}.get(t, t))
    src = " ".join(py)
    src = re.sub(r"not\s*=", "!=", src)
    try:
        return int(eval(src, {"__builtins__": {}}, {}))  # noqa: S307 - arithmetic on literals only
    except Exception as e:
        raise HeaderError(path, line, f"cannot evaluate #if {expr.strip()!r}: {e}") from None


def _int_value(value: str, macros: dict[str, str | None]) -> int | None:
    """Value of a #define body if it is an integer constant expression."""
    v = value.strip()
    if not v:
        return None
    for _ in range(8):
        new = _IDENT.sub(lambda m: macros[m.group(0)] or "" if m.group(0) in macros
                         and m.group(0) not in PREDEFINED else m.group(0), v)
        if new == v:
            break
        v = new
    if _IDENT.search(re.sub(r"(0[xX][0-9a-fA-F]+|\d+)[uUlL]*", "", v)):
        return None
    if not re.fullmatch(r"[\s\d xXa-fA-FuUlL()+\-*/%<>&|^~]*", v):
        return None
    v = re.sub(r"(0[xX][0-9a-fA-F]+|\d+)[uUlL]+", r"\1", v).replace("/", "//")
    try:
        return int(eval(v, {"__builtins__": {}}, {}))  # noqa: S307 - checked to be integer arithmetic
    except Exception:
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
                val = _int_value(body, macros)
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

    def expand_line(line: str) -> str:
        if line.startswith("#define"):
            return line
        for _ in range(8):
            new = _IDENT.sub(lambda m: expand[m.group(0)] if m.group(0) in expand else m.group(0), line)
            if new == line:
                break
            line = new
        return line

    body = "\n".join(expand_line(ln) for ln in body.split("\n"))
    body = _expand_calls(body, funclike)
    body = _strip_extensions(body)
    # extern "C" { ... } written without an #ifdef __cplusplus guard
    body = re.sub(r'extern\s+"C"\s*\{', lambda m: re.sub(r"[^\n]", " ", m.group(0)) + "\x00", body)
    if "\x00" in body:
        body = _drop_matching_brace(body)
    body = re.sub(r'extern\s+"C"', "", body)
    body = _drop_function_bodies(body)
    body = re.sub(r"\bstatic\b|\bextern\b", " ", body)
    return body, constants


def _expand_calls(body: str, funclike: dict) -> str:
    """Expands uses of function-like macros by substituting their arguments
    (newlines inside a use are kept, so line numbers stay true)."""
    for _ in range(8):
        changed = False
        for name, (params, repl) in funclike.items():
            start = 0
            while True:
                m = re.compile(r"\b" + re.escape(name) + r"\s*\(").search(body, start)
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


def parse_functions(cdef: str, path: str = "<header>") -> tuple[dict[str, Function], set[str]]:
    """Function declarations with parameter names, and the typedef names."""
    from pycparser import c_ast, c_generator, c_parser

    # pycparser does not take #define lines; blank them (keeping lines)
    src = "\n".join("" if ln.startswith("#") else ln for ln in cdef.split("\n"))
    prelude = _typedef_prelude(src)
    try:
        ast = c_parser.CParser().parse(prelude + "\n" + src, filename=path)
    except Exception as e:  # pycparser.plyparser.ParseError
        m = re.search(r":(\d+):(\d+): (.*)", str(e))
        if m:
            raise HeaderError(path, int(m.group(1)) - 1, m.group(3)) from None
        raise HeaderError(path, 0, str(e)) from None
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
                                       params, max(1, ext.coord.line - 1) if ext.coord else 0)
    return functions, typedefs


def load_header(path: str | Path) -> Header:
    p = Path(path)
    try:
        text = p.read_text(encoding="utf-8", errors="replace")
    except OSError as e:
        raise HeaderError(str(p), 0, f"cannot read header: {e.strerror or e}") from None
    cdef, constants = preprocess(text, str(p))
    functions, typedefs = parse_functions(cdef, str(p))
    return Header(str(p), cdef, functions, constants, typedefs)
