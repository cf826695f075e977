import sys

from simulator.cli.predict import main

sys.exit(main())
