"""tritonforge builder: models.yaml → verified ONNX variants → a Triton model repository."""

__version__ = "0.1.0"
