"""The `flbridge` command.

    flbridge demo [--steps N] [--device NAME]     train a small CNN on a chip, beside the CPU
    flbridge validate PATH...                     check specs and their runtimes
    flbridge devices                              list the registered chips
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path


def _spec_files(paths: list[str]) -> tuple[list[Path], list[str]]:
    files, missing = [], []
    for p in map(Path, paths):
        if p.is_dir():
            files.extend(sorted(q for q in p.iterdir() if q.suffix in (".yaml", ".yml")))
        elif p.exists():
            files.append(p)
        else:
            missing.append(str(p))
    return files, missing


def validate(paths: list[str], out=None) -> int:
    """Prints every problem as file:line: field: message; returns the exit code."""
    out = out or sys.stdout
    from .errors import SpecError
    from .registry import check_unique, load_spec
    from .runtime import bind_runtime

    files, missing = _spec_files(paths)
    bad = 0
    for m in missing:
        print(f"{m}:0: <file>: no such file or folder", file=out)
        bad += 1
    specs = []
    for f in files:
        try:
            spec = load_spec(f)
        except SpecError as e:
            for p in e.problems:
                print(p, file=out)
            bad += len(e.problems)
            continue
        rt, problems, load_errors = bind_runtime(spec)
        for p in problems:
            print(p, file=out)
        for le in load_errors:
            print(f"{le.file}:{le.line}: {le.field}: {le.message}", file=out)
        bad += len(problems) + len(load_errors)
        if rt is not None:
            specs.append(spec)
            print(f"ok: {f}: {spec.device_type} ({spec.vendor} {spec.chip_model}), "
                  f"{len(rt.ops)} native ops, {len(spec.op_specific)} op-specific fallbacks", file=out)
    try:
        check_unique(specs)
    except SpecError as e:
        for p in e.problems:
            print(p, file=out)
        bad += len(e.problems)
    if not files and not missing:
        print("no spec files found", file=out)
        return 1
    return 1 if bad else 0


def devices(out=None) -> int:
    out = out or sys.stdout
    import flbridge
    flbridge.init()
    for chip in flbridge.chips():
        s = chip.spec
        print(f"fl:{chip.index}  {s.device_type:12s} {s.vendor} {s.chip_model} (driver {s.driver_version})"
              f"  {len(chip.runtime.ops)} native ops  [{s.file}]", file=out)
    return 0


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="flbridge", description="PyTorch on chips described by a YAML spec")
    sub = ap.add_subparsers(dest="cmd", required=True)
    v = sub.add_parser("validate", help="check device specs and their runtimes")
    v.add_argument("paths", nargs="+", help="spec files or folders")
    sub.add_parser("devices", help="list the registered chips")
    d = sub.add_parser("demo", help="train a small CNN on a simulated chip and show what ran where")
    d.add_argument("--steps", type=int, default=8)
    d.add_argument("--device", default=None,
                   help="chip to run on, by spec name (xpu:<name>); default: the current fl device")
    d.add_argument("--batch", type=int, default=16)
    a = ap.parse_args(argv)
    if a.cmd == "validate":
        return validate(a.paths)
    if a.cmd == "devices":
        return devices()
    from .demo import run_demo
    return run_demo(steps=a.steps, device=a.device, batch=a.batch)


def entry() -> int:
    """Console entry point: `flbridge demo | head` ends quietly."""
    try:
        return main()
    except BrokenPipeError:
        import os
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 141


if __name__ == "__main__":
    sys.exit(entry())
