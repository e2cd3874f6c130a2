"""The CPU device and its kernels (numpy; compiled ones where the ``jit`` extra is installed).

::

    CpuDevice                      device.py      picks each node's kernel, owns scratch memory
    ├── cpu_kernel, CpuKernel      kernel.py      the registry, per layer class
    ├── conv.py                    convolutions: Winograd, depthwise, im2col variants, bands
    ├── activation.py              transcendental activations in bands
    ├── pooling.py                 max and average pooling in scratch memory
    ├── fused.py                   a producer and its fused activations
    ├── scratch.py                 per-thread working memory
    └── jit/                       compiled kernels (tier "jit"; numba loaded when one is prepared)

The kernel modules are imported here explicitly, which registers them (a device that uses
both tiers tries the compiled kernels first).
"""

from graphexec.devices.cpu import activation, conv, fused, pooling  # noqa: F401  (registrations)
from graphexec.devices.cpu.jit import activation as jit_activation  # noqa: F401
from graphexec.devices.cpu.jit import conv as jit_conv  # noqa: F401
from graphexec.devices.cpu.jit import elementwise as jit_elementwise  # noqa: F401
from graphexec.devices.cpu.jit import excitation as jit_excitation  # noqa: F401
from graphexec.devices.cpu.jit import fused as jit_fused  # noqa: F401
from graphexec.devices.cpu.jit import linear as jit_linear  # noqa: F401
from graphexec.devices.cpu.jit import pooling as jit_pooling  # noqa: F401
from graphexec.devices.cpu.jit import recurrent as jit_recurrent  # noqa: F401
from graphexec.devices.cpu.device import CpuDevice
from graphexec.devices.cpu.kernel import TIERS, CpuKernel, cpu_kernel, registered

__all__ = ["TIERS", "CpuDevice", "CpuKernel", "cpu_kernel", "registered"]
