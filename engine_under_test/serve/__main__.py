import sys

from engine_under_test.serve.main import main

sys.exit(main())
