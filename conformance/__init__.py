"""DFlash parity and conformance framework.

Data flows one way: case -> adapter (inside the engine's env) -> observation JSON
-> diff against goldens and other engines -> pytest verdict and HTML report.
"""

__version__ = "0.1.0"
