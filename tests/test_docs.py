"""Every fenced code block in README.md and docs/**/*.md runs as written.

What each fence language means:

- ``python``: executed.  The python blocks of one file run in order in one
  fresh namespace, in a subprocess of their own (with the simulators in
  strict mode, as in every test), so a block may use names from an earlier
  block of the same file.
- ``sh`` / ``bash`` / ``shell``: every line is a command; ``console``: every
  line starting with ``$ `` is one (the rest is output).  Commands run from
  the repository root and must exit 0.  A command is ``python ...`` or
  ``flbridge ...``, optionally after ``VAR=value`` settings and chained with
  ``&&``.  ``python -m pytest ...`` is checked by collecting
  (``--collect-only``: running the suite from inside the suite would
  recurse), and must select at least one test.  Commands that train or
  benchmark run in the slow suite (``SLOW_COMMANDS``), as do the pages
  whose python blocks take long (``SLOW_DOCS``).
- ``yaml``: must parse; ``c``: must parse as a vendor header with
  flbridge's own header reader.
- ``text``: output or messages shown to the reader, not code.

A block that cannot run in a test (it installs packages, needs the network)
carries ``<!-- not run: <reason> -->`` as the last non-blank line before its
fence.  Any other block, or a fence without a language, fails this test.
A page whose commands only make sense together in a scratch folder (the
vendor guide) has a test of its own that runs its sh and python blocks
(``RUN_ELSEWHERE``); its other blocks are checked here.
"""
from __future__ import annotations

import json
import os
import re
import shlex
import shutil
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
RUN_LANGS = {"python"}
SHELL_LANGS = {"sh", "bash", "shell", "console"}
DATA_LANGS = {"yaml", "c", "text"}
NOT_RUN = re.compile(r"<!--\s*not run:\s*(\S.*?)\s*-->")
FENCE = re.compile(r"^(\s*)(```+|~~~+)\s*([\w+-]*)[^`]*$")     # the language is the info string's first word
# commands too long for the default suite: (prefix, why)
SLOW_COMMANDS = [("flbridge demo", "trains a model (the default suite runs the demo in test_cli.py)"),
                 ("python -m pytest", "collects the test suite"),
                 ("python bench/", "runs a benchmark")]
TIMEOUT = 600
# pages whose sh and python blocks another test runs, in order, in an empty folder
RUN_ELSEWHERE = {"docs/vendor-guide.md": "tests/test_vendor_guide.py"}
# pages whose python blocks take too long for the default suite (CPU seconds measured)
SLOW_DOCS = {"docs/observability.md": "profiles and autocompares several steps: 9 s",
             "docs/compile.md": "compiles (Dynamo, AOTAutograd) a model, an optimizer step and a function: 10 s",
             # the default suite keeps the README; these pages start an interpreter each (2 s) and train
             "docs/amp.md": "trains under autocast on two chips: 5 s",
             "docs/performance.md": "times the overhead and replay examples: 4 s",
             "docs/distributed.md": "runs flccl collectives and a DDP step: 4 s",
             "docs/architecture.md": "follows an op through each layer: 4 s",
             "docs/device.md": "walks residency, memory and streams: 3 s"}


@dataclass
class Block:
    path: str          # relative to the repository root
    line: int          # line of the first code line (1-based)
    lang: str
    code: str
    not_run: str | None

    @property
    def where(self):
        return f"{self.path}:{self.line}"


def doc_files() -> list[str]:
    files = [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]
    return [str(p.relative_to(ROOT)) for p in files if p.is_file()]


def blocks_of(path: str, root: Path = ROOT) -> list[Block]:
    lines = (root / path).read_text(encoding="utf-8").splitlines()
    out, i = [], 0
    while i < len(lines):
        m = FENCE.match(lines[i])
        if not m:
            i += 1
            continue
        indent, fence, lang = m.group(1), m.group(2), m.group(3).lower()
        prev = next((lines[j] for j in range(i - 1, -1, -1) if lines[j].strip()), "")
        marker = NOT_RUN.search(prev)
        body, j = [], i + 1
        while j < len(lines) and lines[j].strip() != fence:
            body.append(lines[j][len(indent):] if lines[j].startswith(indent) else lines[j].lstrip())
            j += 1
        if j == len(lines):
            raise AssertionError(f"{path}:{i + 1}: code fence never closed")
        out.append(Block(path, i + 2, lang, "\n".join(body) + "\n", marker.group(1) if marker else None))
        i = j + 1
    return out


LIST_ITEM = re.compile(r"^\s*([-*+]|\d+[.)])\s")


def indented_code(path: str, root: Path = ROOT) -> list[int]:
    """Lines starting a Markdown indented code block (4 spaces after a blank
    line, under a plain paragraph, so not a list item's continuation): code
    this test could not classify, so it must be fenced."""
    out, fence, para, blank = [], None, "", True
    for i, line in enumerate((root / path).read_text(encoding="utf-8").splitlines()):
        m = FENCE.match(line)
        if fence:
            fence = None if line.strip() == fence else fence
            continue
        if m:
            fence = m.group(2)
            continue
        if (line.startswith("    ") and line.strip() and blank and para and not para[0].isspace()
                and not LIST_ITEM.match(para) and not para.startswith("|")):
            out.append(i + 1)
        if line.strip() and blank:
            para = line
        blank = not line.strip()
    return out


# ----------------------------------------------------------- shell commands

def commands_of(block: Block) -> list[tuple[int, str]]:
    """(line, command) for each command in a shell block."""
    out, pending, start = [], "", 0
    for k, raw in enumerate(block.code.splitlines()):
        line = raw.strip()
        if block.lang == "console" and not pending:
            if not line.startswith("$ "):
                continue
            line = line[2:]
        if not pending:
            start = block.line + k
        if line.endswith("\\"):
            pending += line[:-1].rstrip() + " "
            continue
        line, pending = pending + line, ""
        if line and not line.startswith("#"):
            out.append((start, line))
    return out


def _argv(words: list[str]) -> tuple[dict, list[str]]:
    env, words = {}, list(words)
    while words and re.fullmatch(r"[A-Za-z_]\w*=.*", words[0]):
        k, _, v = words.pop(0).partition("=")
        env[k] = v
    return env, words


def plan_command(cmd: str) -> list[tuple[dict, list[str]]]:
    """Each step of `cmd` as (env, argv); raises ValueError saying why a
    command cannot run here."""
    words = shlex.split(cmd, comments=True)
    steps, cur = [], []
    for w in words + ["&&"]:
        if w == "&&":
            steps.append(cur)
            cur = []
        elif w in ("|", "||", ";", ">", ">>", "<", "&"):
            raise ValueError(f"shell syntax {w!r} is not run by this test")
        else:
            cur.append(w)
    out = []
    for step in steps:
        env, argv = _argv(step)
        if not argv or argv[0] not in ("python", "python3", "flbridge"):
            raise ValueError(f"{' '.join(argv) or cmd!r} is neither a python nor a flbridge command")
        if argv[0] == "flbridge":
            exe = shutil.which("flbridge", path=os.pathsep.join([str(Path(sys.executable).parent),
                                                                  os.environ.get("PATH", "")]))
            argv = ([exe] if exe else [sys.executable, "-c", "from flbridge.cli import entry; entry()"]) + argv[1:]
        else:
            argv = [sys.executable] + argv[1:]
            if argv[1:3] == ["-m", "pytest"]:
                argv += ["--collect-only", "-q"]
        out.append((env, argv))
    return out


def is_slow(cmd: str) -> str | None:
    norm = " ".join(cmd.split())
    norm = re.sub(r"^([A-Za-z_]\w*=\S*\s+)*", "", norm)
    return next((why for prefix, why in SLOW_COMMANDS if norm.startswith(prefix)), None)


def run_command(where: str, cmd: str) -> None:
    for env, argv in plan_command(cmd):
        r = subprocess.run(argv, cwd=ROOT, env={**os.environ, **env}, capture_output=True, text=True,
                           timeout=TIMEOUT)
        tail = (r.stdout[-3000:] + "\n" + r.stderr[-3000:]).strip()
        # (pytest exits with 5 when a command selects no test)
        assert r.returncode == 0, f"{where}: `{cmd}` exited with {r.returncode}:\n{tail}"


# ------------------------------------------------------------ python blocks

def run_python_blocks(path: str, blocks: list[Block]) -> None:
    payload = json.dumps([{"line": b.line, "code": b.code} for b in blocks])
    r = subprocess.run([sys.executable, __file__, path], input=payload, cwd=ROOT, capture_output=True,
                       text=True, timeout=TIMEOUT)
    assert r.returncode == 0, f"python blocks of {path} failed:\n{r.stdout[-3000:]}\n{r.stderr[-5000:]}"


def _exec_blocks(path: str) -> None:
    """In the subprocess: run each block in one namespace; line numbers in
    tracebacks are the document's own."""
    ns = {"__name__": "__main__"}
    for b in json.load(sys.stdin):
        exec(compile("\n" * (b["line"] - 1) + b["code"], path, "exec"), ns)


# ------------------------------------------------------------ data blocks

def check_data_block(block: Block) -> None:
    if block.lang == "yaml":
        import yaml
        try:
            yaml.safe_load(block.code)
        except yaml.YAMLError as e:
            raise AssertionError(f"{block.where}: yaml block does not parse: {e}") from None
    elif block.lang == "c":
        from flbridge.binding import load_header
        with tempfile.TemporaryDirectory() as d:
            h = Path(d) / "block.h"
            h.write_text(block.code)
            load_header(h)


# ------------------------------------------------------------------ tests

def _problem(block: Block) -> str | None:
    """Why `block` is neither runnable nor explicitly marked, if so."""
    if block.not_run is not None or (block.path in RUN_ELSEWHERE and block.lang in RUN_LANGS | SHELL_LANGS):
        return None
    if not block.lang:
        return "fence has no language: python/sh to run it, text for output (see tests/test_docs.py)"
    if block.lang in RUN_LANGS | DATA_LANGS:
        return None
    if block.lang in SHELL_LANGS:
        for _, cmd in commands_of(block):
            try:
                plan_command(cmd)
            except ValueError as e:
                return f"`{cmd}` cannot run in a test ({e}): mark the block <!-- not run: why --> if it must stay"
        return None
    return f"unknown fence language {block.lang!r}: use python, sh, console, yaml, c or text"


@pytest.mark.parametrize("path", doc_files())
def test_every_block_is_runnable_or_marked(path):
    problems = [f"{b.where}: {p}" for b in blocks_of(path) if (p := _problem(b))]
    problems += [f"{path}:{n}: indented code block: make it a fenced block with a language" for n in indented_code(path)]
    assert not problems, "\n".join(problems)


@pytest.mark.parametrize("path", [pytest.param(p, marks=[pytest.mark.slow] if p in SLOW_DOCS else [])
                                  for p in doc_files()])
def test_doc_blocks_run(path):
    blocks = [b for b in blocks_of(path) if b.not_run is None and not _problem(b)]
    if path in RUN_ELSEWHERE:
        runner = ROOT / RUN_ELSEWHERE[path]
        assert Path(path).name in runner.read_text(), f"{runner} no longer runs {path}"
        blocks = [b for b in blocks if b.lang in DATA_LANGS]
    python = [b for b in blocks if b.lang in RUN_LANGS]
    if python:
        run_python_blocks(path, python)
    for b in blocks:
        if b.lang in DATA_LANGS:
            check_data_block(b)
        elif b.lang in SHELL_LANGS:
            for line, cmd in commands_of(b):
                if not is_slow(cmd):
                    run_command(f"{path}:{line}", cmd)


def _slow_commands():
    out = []
    for path in doc_files():
        for b in blocks_of(path):
            if b.lang in SHELL_LANGS and b.not_run is None and not _problem(b) and path not in RUN_ELSEWHERE:
                out += [pytest.param(f"{path}:{line}", cmd, id=f"{path}:{line}")
                        for line, cmd in commands_of(b) if is_slow(cmd)]
    return out


@pytest.mark.slow
@pytest.mark.parametrize("where,cmd", _slow_commands())
def test_slow_doc_commands_run(where, cmd):
    run_command(where, cmd)


def test_the_block_reader_sees_fences_markers_and_commands(tmp_path):
    doc = ("Intro\n\n<!-- not run: installs packages -->\n```sh\npip install x\n```\n\n"
           "- item\n\n   ```text\n   output\n   ```\n\n```\nbare\n```\n\n"
           "```console\n$ FOO=1 flbridge devices \\\n    --help\nsome output\n```\n")
    (tmp_path / "d.md").write_text(doc)
    bs = blocks_of("d.md", root=tmp_path)
    assert [(b.lang, b.line, b.not_run) for b in bs] == [("sh", 5, "installs packages"), ("text", 11, None),
                                                         ("", 15, None), ("console", 19, None)]
    assert bs[1].code == "output\n"
    assert _problem(bs[0]) is None and "no language" in _problem(bs[2])
    assert commands_of(bs[3]) == [(19, "FOO=1 flbridge devices --help")]
    env, argv = plan_command("FOO=1 flbridge devices --help")[0]
    assert env == {"FOO": "1"} and argv[-2:] == ["devices", "--help"]
    assert "cannot run" in _problem(Block("d.md", 1, "sh", "pip install x\n", None))
    assert is_slow("FLBRIDGE_LOG=all python -m pytest tests/x.py") and not is_slow("flbridge validate x")
    (tmp_path / "i.md").write_text("Run:\n\n    flbridge devices\n\n- item\n\n    continued item\n")
    assert indented_code("i.md", root=tmp_path) == [3]


if __name__ == "__main__":
    _exec_blocks(sys.argv[1])
