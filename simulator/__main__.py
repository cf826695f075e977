from simulator.predict import main
import sys
sys.exit(main())
