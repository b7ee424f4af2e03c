"""The fl device as PyTorch sees it: PrivateUse1 registered as `fl` with its
hooks, device guard and factory kernels (registration), init() and the
lazy-init hook (bringup), `torch.fl` (torch_fl, streams), `flbridge.device(...)`
and `wrap` (context), and pinned host memory (pinned)."""
from .bringup import init, register_device_name
from .context import device, wrap
from .registration import register
