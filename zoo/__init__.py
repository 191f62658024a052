"""The default zoo: model factories and data readers that ``models.yaml`` names."""
