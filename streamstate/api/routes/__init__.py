"""One router per resource (sessions, series, alerts, operations), included by
:func:`streamstate.api.app.create_app`."""
