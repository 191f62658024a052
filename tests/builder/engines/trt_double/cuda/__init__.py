"""TEST DOUBLE of cuda-python (``cuda.bindings.runtime``), beside the TensorRT double."""
