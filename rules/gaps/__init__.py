"""GPU idle gaps and low utilization over the whole capture (the ``nsys analyze`` parity rules), and what they share."""
