"""An autonomous optimisation loop for an LLM inference stack.

The loop lives in :mod:`optimizer.loop`; records in :mod:`optimizer.records`; errors in
:mod:`optimizer.errors`.
"""

__version__ = "0.1.0"
