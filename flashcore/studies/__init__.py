"""The lab: what the notebooks and ``python -m flashcore`` run, and nothing a user imports.

Timing harness and sweeps (``bench``), the FP8 error study (``fp8_study``), long-context
sweeps (``long_context``), offline SASS analysis (``sass``), the timing-leak test
(``timing_leak``), transformers end to end (``e2e``), report tables and figures
(``report``) and the online-softmax derivation (``derivation``). The product, the kernels
with their references and the error rule, lives one level up.
"""
