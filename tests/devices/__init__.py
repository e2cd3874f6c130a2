"""Tests of the devices: the OpenCL device against the CPU layers (skipped without OpenCL)."""
