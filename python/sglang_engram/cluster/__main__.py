import sys

from sglang_engram.cluster.cli import main

if __name__ == "__main__":
    sys.exit(main())
