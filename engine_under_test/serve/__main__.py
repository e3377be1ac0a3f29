"""Entry point of `python -m engine_under_test.serve`.

`main()` has already stopped the HTTP server and joined the engine thread when it returns; the
process then leaves with `os._exit` after flushing its streams, skipping the interpreter's
finalisation. That finalisation tears down native thread pools (torch's and the loaded
kernels' libraries) in an order that, now and then, let a C++ thread outlive its owner and the
runtime abort ("terminate called without an active exception", SIGABRT) after a clean stop:
a SIGTERM must end in exit 0, every time.
"""

import logging
import os
import sys

from engine_under_test.serve.main import main

code = main()
logging.shutdown()
sys.stdout.flush()
sys.stderr.flush()
os._exit(code)
