"""Run every benchmark script in this folder in turn (``make bench``)."""

import runpy
import sys
from pathlib import Path

here = Path(__file__).parent
for script in sorted(here.glob("*.py")):
    if script.name == "run_all.py" or (len(sys.argv) > 1 and script.stem not in sys.argv[1:]):
        continue
    print(f"## {script.stem}", flush=True)
    runpy.run_path(str(script), run_name="__main__")
