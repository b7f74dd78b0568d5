"""The paper's micro-benchmarks (section 4): one module per profile, named as its config file,
beside their context (``base.py``: ``Profile``, ``ProfileContext``), which trains with
TensorFlow, and the pure-Python tables and readings a report reads them with."""
