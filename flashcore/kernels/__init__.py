"""Triton kernels, one concern per file, each with its launcher."""
