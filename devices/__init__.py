"""Where tensors live and how a node runs there: ``cpu`` (numpy, the reference) and, loaded
only when asked for, ``opencl``."""
