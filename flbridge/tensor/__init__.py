"""fl tensors and their bytes: XPUTensor, the wrapper subclass PyTorch sees
(xpu_tensor); the Storage its views share and the residency rules that move
bytes between host and device (residency); device memory (allocator); host
staging for collectives (hoststage); and untyped_storage() (untyped_storage)."""
from .allocator import DeviceAllocator, GraphPool
from .hoststage import HostStage, has_fl, tree_map
from .residency import Storage, host_bytes, make_resident, next_serial
from .xpu_tensor import (XPUTensor, chip_of, covers_storage, dense_strides, host_address, host_copy, host_view,
                         itemsize, new_tensor, resize_for_output, set_geometry)
