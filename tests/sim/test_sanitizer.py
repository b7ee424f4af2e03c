"""The simulators' C self-tests under AddressSanitizer, LeakSanitizer and UBSan."""
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.slow   # builds every library twice more and forks the collectives tests: ~25 s
def test_c_selftests_are_clean_under_sanitizers():
    r = subprocess.run([sys.executable, str(ROOT / "native_sim" / "build.py"), "--sanitize-test"],
                       capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stdout + r.stderr
    assert "selftest_x1: " in r.stdout and "selftest_th1: " in r.stdout
    assert " 0 failures" in r.stdout and "sanitizer self-tests: clean" in r.stdout
