"""The vendor's C runtime: its header turned into cffi declarations
(header, cexpr), the plan for calling each kernel from an aten op's
arguments (callplan), the bound runtime (runtime), its collectives library
(ccl), and launch, the one point where flbridge calls the vendor's compute
functions and where observers attach."""
from . import launch
from .callplan import Plan, classify_param, plan_call, type_aliases
from .ccl import ccl_for
from .header import Function, Header, load_header
from .runtime import Runtime, bind_runtime, check_static, init_runtime, load_runtime
