"""python -m detfuzz: the detfuzz command line, with the same flags, exit codes and reports as
build/detfuzz, in this interpreter (so --import can register torch.library ops)."""
import sys

from ._frontend import run_cli

if __name__ == "__main__":
    sys.exit(run_cli(sys.argv[1:]))
