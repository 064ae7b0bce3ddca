"""Deprecated: the state API's old import path. Use :mod:`streamstate.state`.

``streamstate.jobs.state`` and its submodules (``tester``, ``spec``, ``api``, ...) still import,
as aliases of ``streamstate.state`` and its modules, for one release; each import of this
package warns once.
"""

import importlib
import sys
import warnings

from streamstate.state import *  # noqa: F403 - the old path re-exports the whole public API
from streamstate.state import __all__  # noqa: F401

warnings.warn(
    "streamstate.jobs.state is deprecated and will be removed in the next release; "
    "import streamstate.state instead (same names)",
    DeprecationWarning,
    stacklevel=2,
)

# Old submodule paths -> the modules they became (state/api.py is now state/operators.py).
_MOVED = {
    "api": "operators",
    "buckets": "buckets",
    "keyrun": "keyrun",
    "outputs": "outputs",
    "packing": "packing",
    "processor": "processor",
    "spec": "spec",
    "state": "state",
    "tester": "tester",
}
for _old, _new in _MOVED.items():
    sys.modules[f"{__name__}.{_old}"] = importlib.import_module(f"streamstate.state.{_new}")
