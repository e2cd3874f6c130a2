"""OpenCL: not in this version. graphexec's design has an OpenCL device (pyopencl command
queues, the CPU as the fallback for what it cannot run), but it is not built yet. This
example says so, shows what the command line answers when asked for it, and runs the
Inception-style network on the CPU, the one device there is.

    python examples/opencl.py
"""

from __future__ import annotations

import importlib.util

from common import bundled, check, enable_logging

from graphexec import Engine
from graphexec.cli import main as graphexec_cli


def main() -> None:
    enable_logging("WARNING")
    if importlib.util.find_spec("devices.opencl") is not None:
        raise SystemExit("devices.opencl exists now: this example should show it working")
    print("No OpenCL device is available in this version of graphexec: every node runs on the CPU (numpy).")
    if importlib.util.find_spec("pyopencl") is not None:
        print("(pyopencl is installed, but graphexec has no OpenCL device that could use it yet)")

    param, inputs, expected = bundled("inception_mini")
    print(f"$ graphexec run {param.name} --device opencl", flush=True)
    status = graphexec_cli(["run", str(param), "--device", "opencl"])  # prints its one error line on stderr
    print(f"exit status {status}")
    assert status == 1, "asking for OpenCL must fail clearly, not fall back silently"

    with Engine.load(param) as engine:
        check(engine.forward(*inputs), expected, "on the cpu device vs PyTorch")


if __name__ == "__main__":
    main()
