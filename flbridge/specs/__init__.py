"""Device specs as data: YAML read with file and line of every value
(reader), the model a checked spec becomes (schema), the field-by-field
checks (checks, collectives), discovery and loading (load), and the aten op
facts specs are written against (aten)."""
from .aten import ALIASES, NO_DEFAULT, WRITE_ONLY, OpInfo, info, normalize, reaches_dispatch, resolve_name
from .checks import Checker, check_op, check_python_target, check_spec
from .collectives import CCL_ROLE_PARAMS, CollectivesSpec
from .load import SpecSlot, check_unique, discover, load_spec, load_specs, not_a_folder, spec_dirs
from .reader import LocDict, LocList, is_file
from .schema import (AMP_DTYPES, DEVICE_TYPE, DTYPE_NAMES, LAYOUT_FAMILIES, ROLE_PARAMS, Capabilities, DeviceSpec,
                     OpEntry, dtype_name)
