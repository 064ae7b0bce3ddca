"""Infrastructure: configuration, install scripts and the build tools they run (``locked_requirements.py``)."""
