"""Where each aten op on an fl tensor goes.  One op's path: dispatch (the
__torch_dispatch__ entry, installed on XPUTensor by install()) -> route
(OpRoute: the native kernel or the fallback chain) -> native (prepare,
eligibility, adapter: the vendor C call) or cpu_fallback; views, special
ops, foreach and collectives have handlers of their own.  rng holds the
chips' random-number generator states.
docs/architecture.md follows one op file by file."""
from .dispatch import SPECIAL_HANDLERS, install
from .kinds import ALIAS, COLLECTIVE, COMPOSITE, FOREACH, INPLACE_VIEW, ROUTED, SPECIAL, SPECIAL_OPS, VIEW, kind
from .reasons import FAILED, Reason
from .rng import FlGenerator, counter_based, default_generator, seed_later
from .route import OpRoute, route_of
