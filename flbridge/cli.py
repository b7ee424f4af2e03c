"""The `flbridge` command.

    flbridge demo [--steps N] [--batch N] [--device NAME]   train a small CNN on a chip, beside the CPU
    flbridge demo --model gpt                                 the same with a small GPT (tied embedding)
    flbridge demo --graph                                     inference eager and by FLGraph replay
    flbridge demo --compile                                   a small GPT trained with torch.compile(backend="fl")
    flbridge demo --nproc 2                                   the same under DDP on 2 processes (flccl)
    flbridge demo --deepspeed [--nproc 2]                     DeepSpeed ZeRO-2 on 2 processes, beside the CPU
    flbridge validate [--static] PATH...                      check specs (and load their runtimes)
    flbridge devices                                          list the fl devices, usable or not
    flbridge doctor [--json]                                  check the whole setup, with fixes
    flbridge scaffold --header H --so S --name xpu:N          write a starter spec from a vendor header
    flbridge coverage FILE.py[:NAME] [--device NAME]...       ops a model calls and their route per chip (no kernel runs)

Every error ends the command with one `flbridge <command>: error: ...` line
on stderr and a non-zero exit status.
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path


def _spec_files(paths: list[str]) -> tuple[list[Path], list[str]]:
    files, missing = [], []
    for p in map(Path, paths):
        if p.is_dir():
            files.extend(sorted(q for q in p.iterdir() if q.suffix in (".yaml", ".yml") and q.is_file()))
        elif p.exists():
            files.append(p)
        else:
            missing.append(str(p))
    return files, missing


def validate(paths: list[str], out=None, static: bool = False) -> int:
    """Prints every problem as file:line: field: message, or `ok:` for a spec
    without problems; returns the exit code.  `static`: check against the
    header only (the library is not loaded, `python:` modules are not
    imported)."""
    out = out or sys.stdout
    from .specs import load_specs
    from .binding import bind_runtime, check_static

    files, missing = _spec_files(paths)
    bad = 0
    for m in missing:
        print(f"{m}:1: <file>: no such file or folder", file=out)
        bad += 1
    # every spec is loaded and checked before anything is printed, so a
    # duplicate device_type is reported instead of an `ok:`
    for slot in load_specs(files, static=static):
        lines, summary = [], ""
        if slot.error is not None:
            lines = slot.problems
        elif static:
            result, problems = check_static(slot.spec)
            lines = [str(p) for p in problems]
            if result is not None:
                summary = (f"{len(result.ops)} native ops, {len(slot.spec.op_specific)} op-specific "
                           f"fallbacks (static: library not loaded)")
        else:
            rt, problems, load_errors = bind_runtime(slot.spec)
            lines = [str(p) for p in problems] + [f"{e.file}:{e.line}: {e.field}: {e.message}" for e in load_errors]
            if rt is not None:
                summary = f"{len(rt.ops)} native ops, {len(slot.spec.op_specific)} op-specific fallbacks"
        for line in lines:
            print(line, file=out)
        bad += len(lines)
        if not lines:
            s = slot.spec
            print(f"ok: {slot.path}: {s.device_type} ({s.vendor} {s.chip_model}), {summary}", file=out)
    if not files and not missing:
        print("no spec files found", file=out)
        return 1
    if files and not static:
        print("note: the runtime libraries were loaded (their start-up code ran) and python: fallback modules "
              "imported; `flbridge validate --static` checks without either", file=out)
    return 1 if bad else 0


def devices(out=None) -> int:
    """Lists every fl device index: usable chips, and the specs that failed
    (which keep their index).  Exit status 1 when one is unavailable."""
    out = out or sys.stdout
    import flbridge
    flbridge.init()
    slots = flbridge.chips()
    for chip in slots:
        if chip.available:
            s = chip.spec
            print(f"fl:{chip.index}  {s.device_type:12s} {s.vendor} {s.chip_model} (driver {s.driver_version})"
                  f"  {len(chip.runtime.ops)} native ops  [{s.file}]", file=out)
        else:
            print(f"fl:{chip.index}  {chip.device_type:12s} UNAVAILABLE  [{chip.file}]", file=out)
            for p in chip.problems:
                print(f"      {p}", file=out)
    if not slots:
        print("no fl devices (see `flbridge doctor`)", file=out)
        return 1
    return 0 if all(c.available for c in slots) else 1


def _positive(text: str) -> int:
    try:
        v = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a whole number") from None
    if v < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1, got {v}")
    return v


def _parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(prog="flbridge", description="PyTorch on chips described by a YAML spec")
    sub = ap.add_subparsers(dest="cmd", required=True)
    v = sub.add_parser("validate", help="check device specs and their runtimes (loads the libraries and imports "
                                        "python: fallback modules; --static does neither)")
    v.add_argument("paths", nargs="+", help="spec files or folders")
    v.add_argument("--static", action="store_true",
                   help="check against the header only: do not load the library (its start-up code does "
                        "not run) nor import python: fallback modules")
    sub.add_parser("devices", help="list the fl devices (specs that failed keep their index)")
    d = sub.add_parser("demo", help="train a small CNN on a simulated chip and show what ran where")
    d.add_argument("--steps", type=_positive, default=8, help="training steps (at least 1; default 8)")
    d.add_argument("--device", default=None,
                   help="chip to run on: a spec name (xpu:<name>) or fl:<index>; default: the current fl "
                        "device, fl:0 (the first spec in discovery order)")
    d.add_argument("--batch", type=_positive, default=16, help="batch size (at least 1; default 16)")
    d.add_argument("--model", choices=("cnn", "gpt"), default="cnn",
                   help="what to train: cnn (SmallCNN, default) or gpt (TinyGPT, a small language model)")
    d.add_argument("--graph", action="store_true",
                   help="instead: a transformer's inference eager and by torch.fl.FLGraph replay, beside the CPU")
    d.add_argument("--compile", action="store_true",
                   help="instead: a small GPT trained with torch.compile(model, backend=\"fl\"), beside the CPU")
    d.add_argument("--nproc", type=_positive, default=None,
                   help="processes: above 1, DistributedDataParallel over that many ranks (flccl backend); "
                        "with --deepspeed, its ranks (default 2)")
    d.add_argument("--deepspeed", action="store_true",
                   help="instead: DeepSpeed ZeRO stage 2 (its Adam, gradient clipping, a checkpoint) on --nproc "
                        "processes, beside one CPU process (needs the deepspeed package)")
    doc = sub.add_parser("doctor", help="check the setup: versions, spec folder, each spec, library, "
                                        "header, init, memory, a smoke test; each problem with its fix")
    doc.add_argument("--json", action="store_true", help="print the checks as JSON")
    sc = sub.add_parser("scaffold", help="write a starter spec from a vendor header (to stdout or -o)")
    sc.add_argument("--header", required=True, help="the vendor runtime's C header")
    sc.add_argument("--so", required=True, help="the vendor runtime library (not loaded)")
    sc.add_argument("--name", required=True, help="the chip's spec name, xpu:<name>")
    sc.add_argument("--vendor", default=None, help="vendor name shown by get_device_name()")
    sc.add_argument("--model", default=None, help="chip model shown by get_device_name()")
    sc.add_argument("-o", "--output", default=None,
                    help="write the spec here (paths in it are then relative to its folder)")
    cov = sub.add_parser("coverage", help="every aten op a model calls and the route it would take on each chip, "
                                          "without running a kernel")
    cov.add_argument("target", help="FILE.py[:NAME] or module[:NAME]: NAME (default `example`) returns (model, "
                                    "example_inputs) or (model, example_inputs, loss_fn); e.g. "
                                    "flbridge.demos.models:example_gpt")
    cov.add_argument("--device", action="append", default=None,
                     help="a chip (xpu:<name> or fl:<index>); repeat for several side by side; default: all")
    cov.add_argument("--format", choices=("text", "markdown", "json"), default="text")
    cov.add_argument("--no-backward", action="store_true", help="the forward pass only")
    cov.add_argument("--optimizer", choices=("none", "sgd", "adam", "adamw"), default="none",
                     help="also one optimizer step")
    return ap


def main(argv: list[str] | None = None) -> int:
    a = _parser().parse_args(argv)
    from .errors import FlbridgeError
    try:
        return _run(a)
    except (FlbridgeError, OSError, ValueError) as e:
        print(f"flbridge {a.cmd}: error: {one_line(e)}", file=sys.stderr)
        return 1


def one_line(e: BaseException, limit: int = 400) -> str:
    """An error message on one line (a spec's problems are joined)."""
    text = " ".join(part.strip() for part in str(e).strip().splitlines()) or type(e).__name__
    if len(text) > limit:
        text = text[:limit].rsplit(" ", 1)[0] + " ... (`flbridge doctor` shows everything)"
    return text


def _run(a) -> int:
    if a.cmd == "validate":
        return validate(a.paths, static=a.static)
    if a.cmd == "devices":
        return devices()
    if a.cmd == "doctor":
        from .tools.doctor import main as doctor_main
        return doctor_main(["--json"] if a.json else [])
    if a.cmd == "coverage":
        from .observe.coverage import cli as coverage_cli
        return coverage_cli(a.target, a.device, a.format, not a.no_backward, a.optimizer)
    if a.cmd == "scaffold":
        from .tools.scaffold import scaffold_command
        return scaffold_command(a.header, a.so, a.name, vendor=a.vendor, model=a.model, output=a.output)
    if a.compile:
        from .demos.compile import run_compile_demo
        return run_compile_demo(steps=a.steps, device=a.device, batch=a.batch if a.batch != 16 else 8)
    if a.graph:
        from .demos.graph import run_graph_demo
        return run_graph_demo(device=a.device, batch=a.batch if a.batch != 16 else 8)
    if a.deepspeed:
        from .demos.deepspeed import run_deepspeed_demo
        return run_deepspeed_demo(nproc=a.nproc or 2, steps=a.steps if a.steps != 8 else 4, device=a.device,
                                  batch=a.batch if a.batch != 16 else 8)
    if (a.nproc or 1) > 1:
        from .demos.ddp import run_ddp_demo
        return run_ddp_demo(nproc=a.nproc, steps=a.steps, device=a.device, batch=a.batch)
    from .demos.train import run_demo
    return run_demo(steps=a.steps, device=a.device, batch=a.batch, model=a.model)


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
