// Anchor translation unit of libhvdrun.so; the code comes from hvdrun_runtime_core.
