"""Low-precision GEMMs: the NVFP4-forward / MXFP8-backward MoE recipe and an MXFP8 linear."""
