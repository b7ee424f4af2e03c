"""One DeepSpeed rank for torchrun or the deepspeed launcher:
flbridge.demos.deepspeed's rank."""
from flbridge.demos.deepspeed import main

raise SystemExit(main())
