"""Builds the simulated chip runtimes with the system C compiler.

    python native_sim/build.py [--out DIR] [--force]   # the three .so files
    python native_sim/build.py --sanitize-test          # C self-tests under ASan+UBSan

The libraries are plain C shared objects (no Python extension, no torch
headers).  `pip install` runs this through setup.py; nothing else is needed.
"""
from __future__ import annotations

import argparse
import os
import shlex
import shutil
import subprocess
import sys
import sysconfig
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
DEFAULT_OUT = HERE / "build"
CORE = ["common/simcore.c", "common/simkernels.c", "common/simblas.c", "common/simindex.c", "common/simoptim.c", "common/simrng.c"]
CORE_HEADERS = ["common/simcore.h", "common/simkernels.h", "common/simblas.h"]

# each chip's collectives library (x1_ccl.h, th1_ccl.h) ships inside its runtime library
X1_CCL = ["x1/x1_ccl.c", "common/sim_ccl.c"]
TH1_CCL = ["th1/th1_ccl.c", "common/sim_ccl.c"]

# name -> (sources, header, defines)
LIBRARIES = {
    "libx1sim.so": (["x1/x1_runtime.c"] + X1_CCL, "x1/x1_runtime.h", ["-DX1_SIM_REVISION=1"]),
    "libx1v2sim.so": (["x1/x1_runtime.c"] + X1_CCL, "x1/x1_runtime.h", ["-DX1_SIM_REVISION=2"]),
    "libth1sim.so": (["th1/th1_runtime.c"] + TH1_CCL, "th1/th1_runtime.h", []),
}
SELFTESTS = {
    "selftest_x1": (["x1/x1_runtime.c", "tests/selftest_x1.c"], ["-DX1_SIM_REVISION=2"]),
    "selftest_th1": (["th1/th1_runtime.c", "tests/selftest_th1.c"], []),
    "selftest_x1_ccl": (["x1/x1_runtime.c"] + X1_CCL + ["tests/selftest_x1_ccl.c"], ["-DX1_SIM_REVISION=2"]),
    "selftest_th1_ccl": (["th1/th1_runtime.c"] + TH1_CCL + ["tests/selftest_th1_ccl.c"], []),
}
WARN = ["-Wall", "-Wextra", "-Werror=implicit-function-declaration"]


class BuildError(RuntimeError):
    pass


def compiler() -> list[str]:
    cc = os.environ.get("CC") or sysconfig.get_config_var("CC") or "cc"
    cmd = shlex.split(cc)
    if not shutil.which(cmd[0]):
        for alt in ("cc", "gcc", "clang"):
            if shutil.which(alt):
                return [alt]
        raise BuildError(
            f"no C compiler found (tried {cmd[0]!r}, cc, gcc, clang); install one "
            "(e.g. `apt-get install gcc`) or set CC"
        )
    return cmd


def _accepts(cc: list[str], flags: list[str]) -> bool:
    with tempfile.TemporaryDirectory() as tmp:
        src = Path(tmp, "probe.c")
        src.write_text("int main(void) { return 0; }\n")
        r = subprocess.run(cc + flags + [str(src), "-o", str(Path(tmp, "probe"))],
                           capture_output=True)
        return r.returncode == 0


def opt_flags(cc: list[str]) -> list[str]:
    # The simulators are built on the machine that runs them, so tuning for
    # this CPU is safe; FLSIM_PORTABLE=1 turns it off for relocatable builds.
    # -fno-math-errno: no kernel reads errno, and without it a sqrtf in a loop
    # is a library call that keeps the loop scalar (the results are the same).
    flags = ["-O3"] + (["-fno-math-errno"] if _accepts(cc, ["-fno-math-errno"]) else [])
    if os.environ.get("FLSIM_PORTABLE") != "1" and _accepts(cc, ["-march=native"]):
        return flags + ["-march=native"]
    return flags


def _run(cmd: list[str]) -> None:
    r = subprocess.run(cmd, capture_output=True, text=True)
    if r.returncode != 0:
        raise BuildError(f"command failed ({r.returncode}): {' '.join(cmd)}\n{r.stderr}")


def _stale(target: Path, inputs: list[Path]) -> bool:
    if not target.exists():
        return True
    t = target.stat().st_mtime
    return any(p.stat().st_mtime > t for p in inputs)


def build(out: Path = DEFAULT_OUT, force: bool = False, verbose: bool = False) -> dict[str, Path]:
    """Compiles every library into `out`; returns {name: path}.  Processes
    building at the same time (parallel test workers) take turns: the
    first compiles, the others find the libraries fresh."""
    out.mkdir(parents=True, exist_ok=True)
    with open(out / ".build.lock", "w") as lock:
        try:
            import fcntl
            fcntl.flock(lock, fcntl.LOCK_EX)
        except ImportError:  # not POSIX: no concurrent builds there
            pass
        return _build_locked(out, force, verbose)


def _build_locked(out: Path, force: bool, verbose: bool) -> dict[str, Path]:
    cc = compiler()
    flags = opt_flags(cc)
    built = {}
    for name, (srcs, header, defines) in LIBRARIES.items():
        target = out / name
        inputs = [HERE / s for s in CORE + CORE_HEADERS + srcs + [header]] + [Path(__file__)]
        inputs += [p.with_suffix(".h") for p in inputs if p.suffix == ".c" and p.with_suffix(".h").exists()]
        options = cc + flags + WARN + ["-std=c11", "-fPIC", "-shared", "-fvisibility=hidden", "-pthread"] + defines
        # the options a library was built with sit beside it: a change of
        # compiler or of FLSIM_PORTABLE rebuilds it, as a changed source does
        stamp = target.with_name(target.name + ".options")
        same_options = stamp.exists() and stamp.read_text() == " ".join(options)
        if force or not same_options or _stale(target, inputs):
            cmd = options + [str(HERE / s) for s in CORE + srcs] + ["-o", str(target), "-lm"]
            if verbose:
                print(" ".join(cmd))
            tmp = target.with_suffix(f".so.{os.getpid()}.tmp")
            cmd[cmd.index(str(target))] = str(tmp)
            _run(cmd)
            os.replace(tmp, target)  # atomic: a running process never sees half a file
            stamp.write_text(" ".join(options))
        built[name] = target
    return built


def sanitize_test(verbose: bool = False) -> None:
    """Builds the C self-tests with AddressSanitizer + UBSan and runs them."""
    cc = compiler()
    san = ["-fsanitize=address,undefined", "-fno-omit-frame-pointer", "-fno-sanitize-recover=all"]
    with tempfile.TemporaryDirectory() as tmp:
        for name, (srcs, defines) in SELFTESTS.items():
            exe = Path(tmp, name)
            cmd = (cc + ["-O1", "-g", "-std=c11", "-pthread"] + WARN + san + defines +
                   [str(HERE / s) for s in CORE + srcs] + ["-o", str(exe), "-lm"])
            if verbose:
                print(" ".join(cmd))
            _run(cmd)
            env = dict(os.environ, ASAN_OPTIONS="detect_leaks=1:abort_on_error=0",
                       UBSAN_OPTIONS="print_stacktrace=1")
            for k in list(env):
                if k.startswith(("X1SIM_", "TH1SIM_")):
                    del env[k]
            r = subprocess.run([str(exe)], capture_output=True, text=True, env=env)
            sys.stdout.write(r.stdout)
            if r.returncode != 0:
                raise BuildError(f"{name} failed under sanitizers (exit {r.returncode}):\n"
                                 f"{r.stdout}\n{r.stderr}")
            if any(s in r.stderr for s in ("ERROR: AddressSanitizer", "ERROR: LeakSanitizer",
                                           "runtime error:")):
                raise BuildError(f"{name}: sanitizer report:\n{r.stderr}")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--out", type=Path, default=DEFAULT_OUT)
    ap.add_argument("--force", action="store_true")
    ap.add_argument("--sanitize-test", action="store_true")
    ap.add_argument("-v", "--verbose", action="store_true")
    a = ap.parse_args(argv)
    try:
        if a.sanitize_test:
            sanitize_test(a.verbose)
            print("sanitizer self-tests: clean")
        else:
            for name, path in build(a.out, a.force, a.verbose).items():
                print(f"{name}: {path}")
    except BuildError as e:
        print(f"error: {e}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
