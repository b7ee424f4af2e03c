"""One DeepSpeed rank for torchrun or the deepspeed launcher:
flbridge.demos.deepspeed's rank, after the test-side workarounds for
issue 18 (tests/i18_workarounds.py; until that branch is merged)."""
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
import i18_workarounds  # noqa: E402

i18_workarounds.apply()
i18_workarounds.for_deepspeed()

from flbridge.demos.deepspeed import main  # noqa: E402

raise SystemExit(main())
