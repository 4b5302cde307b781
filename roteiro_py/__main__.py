import sys

from roteiro_py.cli.app import main

sys.exit(main())
