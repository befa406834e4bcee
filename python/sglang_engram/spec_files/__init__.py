"""The YAML spec files users write (cluster specs, sweep specs, prices): read as a
mapping with one-line errors, and a pydantic error told as one line naming the key.
"""

__all__ = ["schema_errors", "yaml_file"]
