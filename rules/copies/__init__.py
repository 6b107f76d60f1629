"""Copies and memsets that block or run from pageable memory (the ``nsys analyze`` parity rules), with their shared base."""
