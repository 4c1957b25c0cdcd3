"""The paper's experiments (Section 6), one module each, run by ``msroute reproduce``."""
