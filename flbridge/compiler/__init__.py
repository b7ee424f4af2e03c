"""torch.compile on fl: the `fl` backend (backend: registration through the
torch_dynamo_backends entry point, the default backend's routing of fl
graphs, Dynamo's skip list) and the lowering of AOTAutograd graphs into
flat lists of prepared vendor calls replayed per call (lowering, with the
graph passes in passes).  docs/compile.md says what compiles and why."""
from .backend import fl_backend, reset, stats
