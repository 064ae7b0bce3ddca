"""One router per resource (sessions, series, alerts, operations), included by
:func:`streamstate_api.app.create_app`."""
