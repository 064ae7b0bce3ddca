"""The state API is importable as streamstate.state; the old path streamstate.jobs.state still
imports for one release, as aliases of the same objects, and says it is deprecated."""

from __future__ import annotations

import subprocess
import sys
import textwrap

OLD_PATH = textwrap.dedent(
    """
    import warnings
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        from streamstate.jobs.state import StateSpec as old_spec, map_with_state as old_map
        from streamstate.jobs.state.tester import StateTester as old_tester
        import streamstate.jobs.state.api as old_operators
    import streamstate.state as new
    import streamstate.state.operators as operators
    from streamstate.state.tester import StateTester
    assert old_spec is new.StateSpec and old_map is new.map_with_state and old_tester is StateTester
    assert old_operators is operators
    messages = [str(w.message) for w in caught if issubclass(w.category, DeprecationWarning)]
    assert len(messages) == 1 and "import streamstate.state instead" in messages[0], messages
    print("ok")
    """
)


def test_the_old_path_imports_the_same_api_with_a_deprecation_warning():
    result = subprocess.run([sys.executable, "-c", OLD_PATH], capture_output=True, text=True, timeout=120)
    assert result.returncode == 0 and result.stdout.strip() == "ok", result.stderr


def test_the_new_path_exports_the_whole_api():
    import streamstate.state as state

    for name in state.__all__:
        assert getattr(state, name) is not None
